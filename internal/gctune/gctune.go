package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Defaults: the headroom is DefaultRatio of the live heap, at least
// DefaultMinHeadroom bytes.
const (
	DefaultRatio       = 1.0 / 3
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
	// setPercent and liveBytes are the runtime's (debug.SetGCPercent and
	// the live heap the last collection marked); tests fake them.
	setPercent func(int) int
	liveBytes  func() int64
	// freeOSMemory is debug.FreeOSMemory; tests fake it.
	freeOSMemory func()

	mu       sync.Mutex
	stopped  bool
	prevGOGC int // the GC percent before Start, restored by Stop
	samples  []metrics.Sample
	// holds are the floors under the heap goal callers asked for (see
	// Hold); the highest counts.
	holds map[*Holding]int64

	// settle asks the settler goroutine, which the Tuner owns from
	// start to Stop, for a Settle; done stops it.
	settle chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
}

// running is the Tuner Start started, which Hold steers: the GC percent
// it sets is process-wide, and so is this.
var running atomic.Pointer[Tuner]

// Start starts a Tuner with the defaults unless getenv shows GOGC or
// GOMEMLIMIT set, in which case it returns nil: the operator has chosen.
// Hold steers the Tuner Start returned until it is stopped.
func Start(getenv func(string) string) *Tuner {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return nil
	}
	t := start(DefaultRatio, DefaultMinHeadroom, nil)
	running.Store(t)
	return t
}

func start(ratio float64, minHeadroom int64, afterTune func(int)) *Tuner {
	t := newTuner(ratio, minHeadroom, afterTune)
	// SetGCPercent is the only way to read the current value; put it back
	// at once, the first collection sets the tuned one.
	t.prevGOGC = t.setPercent(100)
	t.setPercent(t.prevGOGC)
	t.arm()
	t.startSettler()
	return t
}

// startSettler starts the goroutine that runs Settle's collections, so the
// caller (a restart about to serve) does not wait for one.
func (t *Tuner) startSettler() {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			select {
			case <-t.settle:
				t.freeOSMemory()
			case <-t.done:
				return
			}
		}
	}()
}

func newTuner(ratio float64, minHeadroom int64, afterTune func(int)) *Tuner {
	t := &Tuner{
		ratio:        ratio,
		minHeadroom:  minHeadroom,
		afterTune:    afterTune,
		setPercent:   debug.SetGCPercent,
		freeOSMemory: debug.FreeOSMemory,
		samples:      []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
		holds:        map[*Holding]int64{},
		settle:       make(chan struct{}, 1),
		done:         make(chan struct{}),
	}
	t.liveBytes = t.readLive
	return t
}

// Stop stops tuning and restores the GC percent in force before Start. A
// nil Tuner (opted out) is fine.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	running.CompareAndSwap(t, nil)
	t.mu.Lock()
	if !t.stopped {
		close(t.done)
	}
	t.stopped = true
	t.setPercent(t.prevGOGC)
	t.mu.Unlock()
	t.wg.Wait()
}

// Holding is a floor under the heap goal, from Hold until Release.
type Holding struct {
	t *Tuner
}

// Hold lets the heap of the running Tuner (none: Hold does nothing) grow
// to bytes before it collects, until Release: for a node that loads data
// whose size it knows beforehand, such as a snapshot at restart. Growing
// from nothing to a large live heap a quarter at a time marks the data
// it holds about five times over (measured: 13–15 collections and a third
// of a 1 M key restart's CPU); a floor at the size it will reach marks it
// about once. The heap then reaches the floor before it collects, so a
// floor above what the load really holds costs memory: callers estimate
// on the low side, and past the floor the usual headroom applies. bytes
// of 0 or less asks for no floor.
func Hold(bytes int64) *Holding { return running.Load().Hold(bytes) }

// Hold is the package's Hold on t; a nil Tuner gives a Holding that does
// nothing.
func (t *Tuner) Hold(bytes int64) *Holding {
	if t == nil {
		return nil
	}
	h := &Holding{t: t}
	h.Set(bytes)
	return h
}

// Set moves the floor, for a caller whose estimate improves as it loads.
func (h *Holding) Set(bytes int64) {
	if h == nil {
		return
	}
	h.t.mu.Lock()
	h.t.holds[h] = bytes
	h.t.retuneLocked()
	h.t.mu.Unlock()
}

// Release drops the floor and retunes at once: the load is done, and if
// the heap is past the usual goal the collector runs now and the memory
// the load no longer needs can go back to the OS. Calls after the first
// do nothing.
func (h *Holding) Release() {
	if h == nil {
		return
	}
	h.t.mu.Lock()
	if _, ok := h.t.holds[h]; ok {
		delete(h.t.holds, h)
		h.t.retuneLocked()
	}
	h.t.mu.Unlock()
}

// Lapse drops the floor from the next collection on, for a load whose
// result another load takes over at once (a snapshot decoded, then
// loaded into the store, which holds its own floor): the live size the
// Tuner knows is from before the load, so retuning now would collect at
// once and mark everything the load built, which the next load's
// collection marks again.
func (h *Holding) Lapse() {
	if h == nil {
		return
	}
	h.t.mu.Lock()
	delete(h.t.holds, h)
	h.t.mu.Unlock()
}

// Settle has the collector run and give the memory the heap no longer
// uses back to the OS (debug.FreeOSMemory), soon and without the caller
// waiting, when a Tuner is running: for the end of a load whose input (a
// decoded snapshot) just became garbage. Left to itself, the runtime's
// last collection of a restart may have come at its peak, when the
// decoded snapshot and the store both lived; the goal it set lets the
// heap stay there, and the memory stays the process's until the next
// collection, minutes later on an idle node (measured at 1 M keys: 929
// MiB of RSS at the first read and 5 s later, with 450 MiB live). One
// collection of the live data is the price. Settles asked for while one
// is pending make one.
func Settle() { running.Load().Settle() }

// Settle is the package's Settle on t; a nil or stopped Tuner does
// nothing.
func (t *Tuner) Settle() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	select {
	case t.settle <- struct{}{}:
	default:
	}
}

// floorLocked is the highest hold.
func (t *Tuner) floorLocked() int64 {
	var f int64
	for _, b := range t.holds {
		f = max(f, b)
	}
	return f
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
	percent := t.retuneLocked()
	notify := t.afterTune
	t.mu.Unlock()
	// Armed before telling anyone: a collection the news leads to must
	// find the next sentinel (tests waited for the 2-minute forced one).
	t.arm()
	if notify != nil {
		notify(percent)
	}
}

// retuneLocked sets the GC percent for the live heap the last collection
// marked and the holds, and returns it. A stopped Tuner sets nothing.
func (t *Tuner) retuneLocked() int {
	if t.stopped {
		return 0
	}
	percent := percentFor(t.ratio, t.minHeadroom, t.liveBytes(), t.floorLocked())
	t.setPercent(percent)
	return percent
}

// readLive is the live heap the runtime's last collection marked.
func (t *Tuner) readLive() int64 {
	metrics.Read(t.samples)
	if v := t.samples[0].Value; v.Kind() == metrics.KindUint64 {
		return int64(min(v.Uint64(), math.MaxInt64))
	}
	return 0
}

// percentFor returns the GC percent that lets a heap with live bytes of
// reachable data grow by its headroom (ratio of live, at least
// minHeadroom) before the next collection, and at least to floor. A heap
// the runtime reports no live data for gets the cap.
func percentFor(ratio float64, minHeadroom, live, floor int64) int {
	if live <= 0 {
		return maxPercent
	}
	headroom := max(minHeadroom, int64(float64(live)*ratio), floor-live)
	p := math.Ceil(float64(headroom) * 100 / float64(live))
	return int(min(max(p, 1), maxPercent))
}
