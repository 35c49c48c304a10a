package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Defaults: the headroom is DefaultRatio of the live heap, at least
// DefaultMinHeadroom bytes.
const (
	DefaultRatio       = 0.25
	DefaultMinHeadroom = 24 << 20
)

// maxPercent caps the GC percent of a nearly empty heap, whose minimum
// headroom is many times its live data.
const maxPercent = 10000

// Tuner moves the GC percent after every garbage collection.
type Tuner struct {
	ratio       float64
	minHeadroom int64
	// afterTune, if set, receives every GC percent set (tests).
	afterTune func(percent int)

	mu       sync.Mutex
	stopped  bool
	prevGOGC int // the GC percent before Start, restored by Stop
	samples  []metrics.Sample
}

// Start starts a Tuner with the defaults unless getenv shows GOGC or
// GOMEMLIMIT set, in which case it returns nil: the operator has chosen.
func Start(getenv func(string) string) *Tuner {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return nil
	}
	return start(DefaultRatio, DefaultMinHeadroom, nil)
}

func start(ratio float64, minHeadroom int64, afterTune func(int)) *Tuner {
	t := &Tuner{
		ratio:       ratio,
		minHeadroom: minHeadroom,
		afterTune:   afterTune,
		samples:     []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
	}
	// SetGCPercent is the only way to read the current value; put it back
	// at once, the first collection sets the tuned one.
	t.prevGOGC = debug.SetGCPercent(100)
	debug.SetGCPercent(t.prevGOGC)
	t.arm()
	return t
}

// Stop stops tuning and restores the GC percent in force before Start. A
// nil Tuner (opted out) is fine.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	debug.SetGCPercent(t.prevGOGC)
}

// sentinel is garbage from birth; its cleanup marks the end of a
// collection. It holds a pointer so it never shares a tiny-allocator block,
// which would delay its cleanup.
type sentinel struct{ _ *byte }

// arm registers a cleanup that runs once the next collection finds a fresh
// sentinel unreachable.
func (t *Tuner) arm() {
	runtime.AddCleanup(&sentinel{}, (*Tuner).afterGC, t)
}

// afterGC runs on the runtime's cleanup goroutine after a collection.
func (t *Tuner) afterGC() {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	metrics.Read(t.samples)
	var live int64
	if v := t.samples[0].Value; v.Kind() == metrics.KindUint64 {
		live = int64(min(v.Uint64(), math.MaxInt64))
	}
	percent := percentFor(t.ratio, t.minHeadroom, live)
	debug.SetGCPercent(percent)
	notify := t.afterTune
	t.mu.Unlock()
	if notify != nil {
		notify(percent)
	}
	t.arm()
}

// percentFor returns the GC percent that lets a heap with live bytes of
// reachable data grow by its headroom (ratio of live, at least
// minHeadroom) before the next collection. A heap the runtime reports no
// live data for gets the cap.
func percentFor(ratio float64, minHeadroom, live int64) int {
	if live <= 0 {
		return maxPercent
	}
	headroom := max(minHeadroom, int64(float64(live)*ratio))
	p := math.Ceil(float64(headroom) * 100 / float64(live))
	return int(min(max(p, 1), maxPercent))
}
