package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		live int64
		want int
	}{
		// GOGC=100 would collect a 10 MiB heap every 10 MiB of garbage.
		{"small heap gets the minimum headroom", 10 * mib, 240},
		{"large heap gets a quarter of its live data", 1024 * mib, 25},
		{"the crossover", 96 * mib, 25},
		{"just below the crossover", 75 * mib, 32},
		{"an unmeasured heap gets the cap", 0, maxPercent},
		{"a tiny heap is capped", 1024, maxPercent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentFor(DefaultRatio, DefaultMinHeadroom, tc.live); got != tc.want {
				t.Fatalf("percent for %d MiB live = %d, want %d", tc.live/mib, got, tc.want)
			}
		})
	}
}

func TestOperatorSettingsWin(t *testing.T) {
	for _, env := range []map[string]string{{"GOGC": "200"}, {"GOMEMLIMIT": "2GiB"}, {"GOGC": "off", "GOMEMLIMIT": "1GiB"}} {
		if tu := Start(func(k string) string { return env[k] }); tu != nil {
			tu.Stop()
			t.Fatalf("Start with %v tuned the runtime", env)
		}
	}
	var none *Tuner
	none.Stop()
}

func TestTunesAfterEveryCollection(t *testing.T) {
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	percents := make(chan int, 16)
	tu := start(DefaultRatio, 1<<20, func(p int) {
		select {
		case percents <- p:
		default:
		}
	})
	for range 2 {
		runtime.GC()
		var p int
		select {
		case p = <-percents:
		case <-t.Context().Done():
			t.Fatal("no GC percent set after a collection")
		}
		cur := debug.SetGCPercent(p)
		if cur != p {
			t.Fatalf("runtime GC percent %d, tuner set %d", cur, p)
		}
		// This test binary's live heap is a few MiB: 1 MiB of headroom
		// is a large share of it, and never a percent below the ratio.
		if p < 25 || p > maxPercent {
			t.Fatalf("GC percent %d outside [25, %d]", p, maxPercent)
		}
	}
	tu.Stop()
	if cur := debug.SetGCPercent(before); cur != before {
		t.Fatalf("GC percent after Stop = %d, want the original %d", cur, before)
	}
	runtime.GC()
	if cur := debug.SetGCPercent(before); cur != before {
		t.Fatalf("a collection after Stop set the GC percent to %d", cur)
	}
}
