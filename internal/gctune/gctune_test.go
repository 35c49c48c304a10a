package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		u    usage
		want int64
	}{
		{
			// 10 MiB live: GOGC's own doubling is below the minimum
			// headroom, so the limit sits well above what GOGC allows.
			name: "small heap gets the minimum headroom",
			u:    usage{live: 10 * mib, total: 40 * mib, released: 5 * mib, free: 10 * mib, objects: 12 * mib},
			want: (40-5-10-12+10)*mib + 64*mib,
		},
		{
			name: "large heap gets a quarter of its live data",
			u:    usage{live: 1024 * mib, total: 1300 * mib, released: 100 * mib, free: 50 * mib, objects: 1100 * mib},
			want: (1300-100-50-1100+1024)*mib + 256*mib,
		},
		{
			// Fragmentation and the runtime's own memory are needed by
			// the live data too: here 30 MiB of each.
			name: "fragmentation and runtime memory count as needed",
			u:    usage{live: 500 * mib, total: 600 * mib, released: 10 * mib, free: 30 * mib, objects: 500 * mib},
			want: (500+30+30)*mib + 125*mib,
		},
		{
			name: "never below the live data",
			u:    usage{live: 300 * mib, total: 100 * mib, objects: 400 * mib},
			want: 300*mib + 75*mib,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := limitFor(DefaultRatio, DefaultMinHeadroom, tc.u); got != tc.want {
				t.Fatalf("limit = %d MiB, want %d MiB", got/mib, tc.want/mib)
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
	before := debug.SetMemoryLimit(-1)
	limits := make(chan int64, 16)
	tu := start(DefaultRatio, 1<<20, func(l int64) {
		select {
		case limits <- l:
		default:
		}
	})
	for range 2 {
		runtime.GC()
		var l int64
		select {
		case l = <-limits:
		case <-t.Context().Done():
			t.Fatal("no limit set after a collection")
		}
		if cur := debug.SetMemoryLimit(-1); cur != l {
			t.Fatalf("runtime limit %d, tuner set %d", cur, l)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if l < int64(ms.HeapAlloc) || l > int64(ms.Sys)+64<<20 {
			t.Fatalf("limit %d outside [heap in use %d, mapped %d + headroom]", l, ms.HeapAlloc, ms.Sys)
		}
	}
	tu.Stop()
	if cur := debug.SetMemoryLimit(-1); cur != before {
		t.Fatalf("limit after Stop = %d, want the original %d", cur, before)
	}
	runtime.GC()
	if cur := debug.SetMemoryLimit(-1); cur != before {
		t.Fatalf("a collection after Stop set the limit to %d", cur)
	}
}
