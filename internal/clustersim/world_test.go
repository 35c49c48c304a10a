package clustersim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
)

// epoch is true time zero; a node's clock reads epoch + offset + t*rate.
var epoch = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

// item is one event in the queue: a timer of some node's clock, a message
// or store answer arriving, or a step of the fault schedule.
type item struct {
	at  time.Duration
	seq uint64
	// owner is the process the event happens in; while it is stalled the
	// event waits. nil: the event is outside any process (the network,
	// the bucket, the schedule).
	owner *stall
	// timer events run before messages when a stalled node resumes.
	timer bool
	dead  bool // a stopped timer
	fn    func()
	idx   int
}

type itemHeap []*item

func (h itemHeap) Len() int { return len(h) }
func (h itemHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h itemHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *itemHeap) Push(x any) {
	it := x.(*item)
	it.idx = len(*h)
	*h = append(*h, it)
}
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// stall is what the queue knows of a process: whether it is stalled, and
// the events that wait for it meanwhile. Guarded by the world's mutex.
type stall struct {
	frozen int
	held   []*item
}

// world is the simulation: true time, the event queue, the network and
// the bucket. The driver (run) is the only goroutine that takes events;
// every other goroutine belongs to some node and only adds events.
//
// True time is the synctest bubble's time since the world was made: the
// driver sleeps (in the bubble: no real wait) until the next event is
// due, so timers of code that reads the bubble's clock (gRPC's backoff
// and keepalive under the Follow streams) fire in order with the queue.
type world struct {
	mu   sync.Mutex
	real clock.Clock
	base time.Time
	q    itemHeap
	seq  uint64
	// links[from][to] is the one-way link between two nodes.
	links map[string]map[string]*link
	steps int

	trace   bool
	traceMu sync.Mutex
	log     []string
}

// link is one direction between two nodes.
type link struct {
	latency time.Duration
	// slow is added to every message while set (a congested path).
	slow time.Duration
	// cuts counts the faults that cut the link; it carries nothing while
	// any holds.
	cuts int
	// drop is the chance (per mille) that a message is lost on the way.
	drop int
	// parked are the messages sent while the link was cut, delivered
	// once it heals (TCP retransmits).
	parked []func()
}

// newWorld makes a world whose true time starts now; call it inside the
// synctest bubble.
func newWorld() *world {
	real := clock.Real() // the bubble's clock
	return &world{real: real, base: real.Now(), links: make(map[string]map[string]*link)}
}

// Now is true time.
func (w *world) Now() time.Duration { return w.real.Since(w.base) }

// nowLocked is Now; the lock is held (true time moves only while the
// driver sleeps, and the driver never sleeps holding it).
func (w *world) nowLocked() time.Duration { return w.Now() }

// schedule adds an event at true time at (not before now).
func (w *world) schedule(at time.Duration, owner *stall, timer bool, fn func()) *item {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.scheduleLocked(at, owner, timer, fn)
}

func (w *world) scheduleLocked(at time.Duration, owner *stall, timer bool, fn func()) *item {
	if now := w.nowLocked(); at < now {
		at = now
	}
	w.seq++
	it := &item{at: at, seq: w.seq, owner: owner, timer: timer, fn: fn}
	heap.Push(&w.q, it)
	return it
}

// after schedules fn d after now, outside any process.
func (w *world) after(d time.Duration, fn func()) {
	w.schedule(w.Now()+d, nil, false, fn)
}

// run takes events in order until true time end, waiting for every other
// goroutine to block before each one; check runs after every event.
func (w *world) run(end time.Duration, check func()) {
	for {
		synctest.Wait()
		if check != nil {
			check()
		}
		w.mu.Lock()
		now := w.nowLocked()
		next := end
		if len(w.q) > 0 {
			next = min(next, w.q[0].at)
		}
		if next > now {
			// Time passes only here: the bubble wakes whatever of the
			// code under test waits for it on the way.
			w.mu.Unlock()
			_ = w.real.Sleep(context.Background(), next-now)
			continue
		}
		if len(w.q) == 0 || w.q[0].at > end {
			w.mu.Unlock()
			return
		}
		it := heap.Pop(&w.q).(*item)
		if it.dead {
			w.mu.Unlock()
			continue
		}
		if n := it.owner; n != nil && n.frozen > 0 {
			n.held = append(n.held, it)
			w.mu.Unlock()
			continue
		}
		w.steps++
		w.mu.Unlock()
		it.fn()
	}
}

// link returns the link from a to b, creating it with latency lat.
func (w *world) linkLocked(from, to string) *link {
	m := w.links[from]
	if m == nil {
		m = make(map[string]*link)
		w.links[from] = m
	}
	l := m[to]
	if l == nil {
		l = &link{latency: time.Millisecond}
		m[to] = l
	}
	return l
}

func (w *world) setLink(from, to string, f func(*link)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w.linkLocked(from, to))
}

func (w *world) tracef(format string, args ...any) {
	if !w.trace {
		return
	}
	w.traceMu.Lock()
	defer w.traceMu.Unlock()
	w.log = append(w.log, fmt.Sprintf("%12v ", w.Now())+fmt.Sprintf(format, args...))
}

func (w *world) dump() string {
	w.traceMu.Lock()
	defer w.traceMu.Unlock()
	return strings.Join(w.log, "\n")
}

// traceWriter prefixes a node's log lines with true time.
type traceWriter struct {
	w  *world
	id string
}

func (t traceWriter) Write(p []byte) (int, error) {
	t.w.tracef("%s| %s", t.id, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Errors the transport answers with.
var (
	// errRefused is what a call to a crashed process gets: nothing
	// listens on its address.
	errRefused = errors.New("sim: connection refused")
	// errBucketCut is what a store call gets when the node cannot reach
	// the bucket.
	errBucketCut = errors.New("sim: bucket unreachable")
)

// simClock is one node's clock: local = epoch + offset + t*rate/1000 for
// true time t. Its timers are events in the world's queue, owned by the
// node, so they wait while the node is stalled.
type simClock struct {
	w      *world
	owner  *stall
	offset time.Duration
	rate   int64 // per mille of true time
	// wallStep is how far the wall clock was stepped (Wall only;
	// durations and timers keep to the rate). Guarded by w.mu.
	wallStep time.Duration
}

// stepWall steps the node's wall clock by d, as an NTP step or an
// operator's date does; its monotonic readings do not move.
func (c *simClock) stepWall(d time.Duration) {
	c.w.mu.Lock()
	c.wallStep += d
	c.w.mu.Unlock()
}

var _ clock.Clock = (*simClock)(nil)

func (c *simClock) local(t time.Duration) time.Time {
	return epoch.Add(c.offset + time.Duration(int64(t)*c.rate/1000))
}

// trueAt is the first true time at which the clock reads at least l.
func (c *simClock) trueAt(l time.Time) time.Duration {
	if !c.local(0).Before(l) {
		return 0 // also the zero Time: no deadline
	}
	d := int64(l.Sub(epoch) - c.offset)
	t := time.Duration((d*1000 + c.rate - 1) / c.rate)
	for c.local(t).Before(l) {
		t++
	}
	for t > 0 && !c.local(t-1).Before(l) {
		t--
	}
	return t
}

func (c *simClock) Now() time.Time                  { return c.local(c.w.Now()) }
func (c *simClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *simClock) Wall() time.Time {
	c.w.mu.Lock()
	step := c.wallStep
	c.w.mu.Unlock()
	return c.Now().Add(step)
}

func (c *simClock) NewTimer(d time.Duration) clock.Timer {
	t := &simTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

func (c *simClock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("clustersim: non-positive ticker interval")
	}
	t := &simTimer{c: c, ch: make(chan time.Time, 1), period: d}
	t.Reset(d)
	return simTicker{t}
}

// simTicker is a simTimer with a period, as a clock.Ticker.
type simTicker struct{ t *simTimer }

func (k simTicker) C() <-chan time.Time { return k.t.ch }
func (k simTicker) Stop()               { k.t.Stop() }
func (k simTicker) Reset(d time.Duration) {
	w := k.t.c.w
	w.mu.Lock()
	k.t.period = d
	w.mu.Unlock()
	k.t.Reset(d)
}

func (c *simClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// simTimer is a Timer, or a Ticker when period > 0. Its fields are
// guarded by the world's mutex.
type simTimer struct {
	c        *simClock
	ch       chan time.Time
	period   time.Duration
	deadline time.Time
	it       *item
}

func (t *simTimer) C() <-chan time.Time { return t.ch }

func (t *simTimer) Stop() bool {
	w := t.c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return t.stopLocked()
}

func (t *simTimer) stopLocked() bool {
	was := t.it != nil && !t.it.dead
	if t.it != nil {
		t.it.dead = true
		t.it = nil
	}
	return was
}

func (t *simTimer) Reset(d time.Duration) bool {
	w := t.c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	was := t.stopLocked()
	now := t.c.local(w.nowLocked())
	if d <= 0 && t.period == 0 {
		select {
		case t.ch <- now:
		default:
		}
		return was
	}
	t.deadline = now.Add(d)
	t.armLocked()
	return was
}

func (t *simTimer) armLocked() {
	w := t.c.w
	var it *item
	it = w.scheduleLocked(t.c.trueAt(t.deadline), t.c.owner, true, func() { t.fire(it) })
	t.it = it
}

// fire runs on the driver when the timer is due.
func (t *simTimer) fire(it *item) {
	w := t.c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.it != it || it.dead {
		return
	}
	now := t.c.local(w.nowLocked())
	select {
	case t.ch <- now:
	default: // like time.Ticker, drop ticks nobody reads
	}
	t.it = nil
	if t.period > 0 {
		for !t.deadline.After(now) {
			t.deadline = t.deadline.Add(t.period)
		}
		t.armLocked()
	}
}

// requeueLocked puts an event that waited for a stalled process back in
// the queue at now, after what is queued for now already.
func requeueLocked(w *world, it *item) {
	it.at = w.nowLocked()
	w.seq++
	it.seq = w.seq
	heap.Push(&w.q, it)
}

// linkCuts is how many faults cut the link from a to b.
func (w *world) linkCuts(from, to string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.linkLocked(from, to).cuts
}
