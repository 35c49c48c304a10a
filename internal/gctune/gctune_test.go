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
		{"large heap gets a third of its live data", 1024 * mib, 34},
		{"the crossover", 72 * mib, 34},
		{"just below the crossover", 60 * mib, 40},
		{"an unmeasured heap gets the cap", 0, maxPercent},
		{"a tiny heap is capped", 1024, maxPercent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentFor(DefaultRatio, DefaultMinHeadroom, tc.live, 0); got != tc.want {
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

// fakeTuner is a Tuner whose runtime is a variable: the live heap the
// test sets and the GC percent the Tuner last set. Its ratio is a quarter
// whatever the default, so the percents the tests expect are round.
func fakeTuner(live *int64, percent *int) *Tuner {
	t := newTuner(0.25, DefaultMinHeadroom, nil)
	t.liveBytes = func() int64 { return *live }
	t.setPercent = func(p int) int { old := *percent; *percent = p; return old }
	return t
}

// collected does what afterGC does after a collection, without arming a
// real one's cleanup (which would call the fake from another goroutine).
func collected(t *Tuner) {
	t.mu.Lock()
	t.retuneLocked()
	t.mu.Unlock()
}

func TestHoldRaisesTheGoalToItsFloorUntilReleased(t *testing.T) {
	const mib = 1 << 20
	live, percent := int64(100*mib), 0
	tu := fakeTuner(&live, &percent)
	collected(tu)
	if percent != 25 {
		t.Fatalf("percent before any hold = %d, want 25", percent)
	}
	// A hold takes effect at once, not at the next collection: the load
	// it is for allocates before then.
	h := tu.Hold(400 * mib)
	if percent != 300 {
		t.Fatalf("percent with a 400 MiB floor over 100 MiB live = %d, want 300", percent)
	}
	h.Set(800 * mib)
	if percent != 700 {
		t.Fatalf("percent after raising the floor to 800 MiB = %d, want 700", percent)
	}
	// The floor is a goal, not a headroom: as the live heap nears it,
	// the next collection comes sooner.
	live = 500 * mib
	collected(tu)
	if percent != 60 {
		t.Fatalf("percent with 500 MiB live under an 800 MiB floor = %d, want 60", percent)
	}
	// Past the floor the usual headroom applies.
	live = 1000 * mib
	collected(tu)
	if percent != 25 {
		t.Fatalf("percent past the floor = %d, want 25", percent)
	}
	live = 100 * mib
	other := tu.Hold(200 * mib)
	collected(tu)
	if percent != 700 {
		t.Fatalf("percent with floors of 800 and 200 MiB = %d, want the higher's 700", percent)
	}
	h.Release()
	if percent != 100 {
		t.Fatalf("percent after releasing the 800 MiB floor = %d, want the 200 MiB one's 100", percent)
	}
	h.Release() // a second Release does nothing
	// A lapse takes effect at the next collection: the live size known
	// now is from before the load.
	other.Lapse()
	if percent != 100 {
		t.Fatalf("percent right after a lapse = %d, want the held 100 until a collection", percent)
	}
	collected(tu)
	if percent != 25 {
		t.Fatalf("percent after every release = %d, want 25", percent)
	}
	tu.Stop()
	stopped := percent
	tu.Hold(800 * mib).Release()
	if percent != stopped {
		t.Fatalf("a stopped Tuner set the GC percent to %d on a hold", percent)
	}
}

func TestHoldWithoutATunerDoesNothing(t *testing.T) {
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	h := Hold(1 << 30)
	h.Set(2 << 30)
	h.Release()
	if cur := debug.SetGCPercent(before); cur != before {
		t.Fatalf("Hold without a running Tuner set the GC percent to %d", cur)
	}
}

func TestHoldSteersTheTunerStartStarted(t *testing.T) {
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	runtime.GC()
	tu := Start(func(string) string { return "" })
	h := Hold(64 << 30)
	if cur := debug.SetGCPercent(before); cur != maxPercent {
		t.Fatalf("GC percent under a 64 GiB hold = %d, want the cap %d", cur, maxPercent)
	}
	h.Release()
	runtime.GC()
	tu.Stop()
	if cur := debug.SetGCPercent(before); cur != before {
		t.Fatalf("GC percent after Stop = %d, want %d", cur, before)
	}
	if running.Load() != nil {
		t.Fatal("a stopped Tuner still takes holds")
	}
}

func TestSettleCollectsOnlyWhenTuning(t *testing.T) {
	live, percent := int64(100<<20), 0
	tu := fakeTuner(&live, &percent)
	freed := make(chan struct{}, 4)
	tu.freeOSMemory = func() { freed <- struct{}{} }
	tu.startSettler()
	tu.Settle()
	select {
	case <-freed:
	case <-t.Context().Done():
		t.Fatal("Settle on a running Tuner freed no memory")
	}
	tu.Stop() // waits for the settler
	tu.Settle()
	var none *Tuner
	none.Settle()
	Settle() // no Tuner started: nothing to do
	if n := len(freed); n != 0 {
		t.Fatalf("Settle on a stopped or absent Tuner freed memory (%d calls)", n)
	}
}
