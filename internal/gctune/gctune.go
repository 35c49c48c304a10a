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
	DefaultMinHeadroom = 64 << 20
)

// Tuner moves the soft memory limit after every garbage collection.
type Tuner struct {
	ratio       float64
	minHeadroom int64
	// afterTune, if set, receives every limit set (tests).
	afterTune func(limit int64)

	mu      sync.Mutex
	stopped bool
	prev    int64 // the limit before Start, restored by Stop
	samples []metrics.Sample
}

// Start starts a Tuner with the defaults unless getenv shows GOGC or
// GOMEMLIMIT set, in which case it returns nil: the operator has chosen.
func Start(getenv func(string) string) *Tuner {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return nil
	}
	return start(DefaultRatio, DefaultMinHeadroom, nil)
}

func start(ratio float64, minHeadroom int64, afterTune func(int64)) *Tuner {
	t := &Tuner{
		ratio:       ratio,
		minHeadroom: minHeadroom,
		afterTune:   afterTune,
		prev:        debug.SetMemoryLimit(-1),
		samples: []metrics.Sample{
			{Name: "/gc/heap/live:bytes"},
			{Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/released:bytes"},
			{Name: "/memory/classes/heap/free:bytes"},
			{Name: "/memory/classes/heap/objects:bytes"},
		},
	}
	t.arm()
	return t
}

// Stop stops tuning and restores the limit in force before Start. A nil
// Tuner (opted out) is fine.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	debug.SetMemoryLimit(t.prev)
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
	limit := limitFor(t.ratio, t.minHeadroom, usage{
		live:     t.value(0),
		total:    t.value(1),
		released: t.value(2),
		free:     t.value(3),
		objects:  t.value(4),
	})
	debug.SetMemoryLimit(limit)
	notify := t.afterTune
	t.mu.Unlock()
	if notify != nil {
		notify(limit)
	}
	t.arm()
}

func (t *Tuner) value(i int) int64 {
	v := t.samples[i].Value
	if v.Kind() != metrics.KindUint64 {
		return 0 // a metric this runtime does not have; Limit copes
	}
	return int64(min(v.Uint64(), math.MaxInt64))
}

// usage is what the runtime reports after a collection, in bytes.
type usage struct {
	live     int64 // heap objects the collection found reachable
	total    int64 // all memory the runtime has mapped
	released int64 // heap memory returned to the OS
	free     int64 // heap memory free and not yet returned
	objects  int64 // heap objects, reachable or not yet swept
}

// limitFor returns the soft memory limit for u: the memory the live data
// needs (everything mapped and in use, less the objects that are dead or
// newer than the collection) plus the headroom.
func limitFor(ratio float64, minHeadroom int64, u usage) int64 {
	needed := u.total - u.released - u.free - u.objects + u.live
	needed = max(needed, u.live)
	headroom := max(minHeadroom, int64(float64(u.live)*ratio))
	return needed + headroom
}
