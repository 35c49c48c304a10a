package s3lect

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
)

// The simulation runs several nodes' cores in one goroutine against one
// in-memory store. Time is "true" simulated time (a Duration since the
// start); each node reads it through its own clock, with an offset and a
// rate. Store calls take effect at one instant between their request and
// their answer, as on a linearizable store, and may fail before or after
// taking effect. Nothing sleeps.

var epoch = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

// simClock maps true time to a node's local time: offset + t*rate/1000.
type simClock struct {
	offset time.Duration
	rate   int64 // per mille of true time
}

func (k simClock) local(t time.Duration) time.Time {
	return epoch.Add(k.offset + time.Duration(int64(t)*k.rate/1000))
}

// trueAt returns the first true time at which the local clock reads at
// least l.
func (k simClock) trueAt(l time.Time) time.Duration {
	d := int64(l.Sub(epoch) - k.offset)
	t := time.Duration((d*1000 + k.rate - 1) / k.rate)
	for k.local(t).Before(l) {
		t++
	}
	for t > 0 && !k.local(t-1).Before(l) {
		t--
	}
	return t
}

var errSim = errors.New("sim: injected store failure")

// faults says how the store and tier 2 misbehave; the zero value is a
// perfect world.
type faults struct {
	failBefore float64 // the call fails without taking effect
	failAfter  float64 // the call takes effect but its answer is lost
	// A call takes up to fastMax to take effect and as long again to be
	// answered; each of those two delays is up to mediumMax with chance
	// medium, and up to slowMax with chance slow.
	fastMax   time.Duration
	medium    float64
	mediumMax time.Duration
	slow      float64
	slowMax   time.Duration
	// observedDrop is the chance a tier-2 message is lost.
	observedDrop float64
}

type event struct {
	at  time.Duration
	seq int
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// landing is a write that took effect at a true time.
type landing struct {
	at   time.Duration
	who  string
	body lockBody
}

// interval is one leadership in true time: [start, end).
type interval struct {
	node       string
	term       uint64
	start, end time.Duration
	open       bool
}

type world struct {
	rng   *rand.Rand
	store *mem.Store
	now   time.Duration
	q     eventHeap
	seq   int
	f     faults
	nodes []*simNode

	intervals []*interval
	etags     map[string]string // every ETag ever written -> the body
	landings  []landing         // every write that took effect
	// partitioned[node] > now: that node's store calls fail.
	partitioned map[string]time.Duration
	log         []string
	trace       bool
}

func newWorld(seed uint64, f faults) *world {
	return &world{
		rng:         rand.New(rand.NewPCG(seed, seed^0x5eed)),
		store:       mem.New(clock.NewFake(epoch)),
		f:           f,
		etags:       make(map[string]string),
		partitioned: make(map[string]time.Duration),
	}
}

func (w *world) at(t time.Duration, fn func()) {
	if t < w.now {
		t = w.now
	}
	w.seq++
	heap.Push(&w.q, event{at: t, seq: w.seq, fn: fn})
}

func (w *world) after(d time.Duration, fn func()) { w.at(w.now+d, fn) }

// runUntil processes events up to and including true time end.
func (w *world) runUntil(end time.Duration) {
	for len(w.q) > 0 && w.q[0].at <= end {
		e := heap.Pop(&w.q).(event)
		w.now = e.at
		e.fn()
	}
	w.now = end
}

func (w *world) logf(format string, args ...any) {
	if w.trace {
		w.log = append(w.log, fmt.Sprintf("%12v ", w.now)+fmt.Sprintf(format, args...))
	}
}

// simNode is one node: a core, its clock, and what the test records.
type simNode struct {
	w     *world
	id    string
	clk   simClock
	p     params
	c     *core
	inc   int // incarnation: answers to a crashed incarnation are dropped
	alive bool
	gen   int // only the latest scheduled wake-up counts
	lead  *interval
	// persisted survives restarts, as a node's view of cluster state would.
	persistedTerm uint64
	useMinTerm    bool

	ops       map[opKind]int
	firstSent map[opKind]time.Time // local time of the first call of each kind
	resigned  []error
	viewCount int
}

func (w *world) addNode(id string, clk simClock, edit func(*params)) *simNode {
	n := &simNode{w: w, id: id, clk: clk, ops: make(map[opKind]int), firstSent: make(map[opKind]time.Time)}
	n.p = params{
		nodeID:   id,
		addr:     id + ":2380",
		lease:    15 * time.Second,
		renew:    5 * time.Second,
		poll:     time.Second,
		validity: time.Duration(float64(15*time.Second) * HolderFraction),
	}
	if edit != nil {
		edit(&n.p)
	}
	w.nodes = append(w.nodes, n)
	return n
}

func (n *simNode) local() time.Time { return n.clk.local(n.w.now) }

func (n *simNode) start() {
	n.alive = true
	n.inc++
	p := n.p
	if n.useMinTerm {
		p.minTerm = func() uint64 { return n.persistedTerm }
	}
	n.c = newCore(p, nil)
	n.w.logf("%s starts", n.id)
	n.pump()
}

func (n *simNode) crash() {
	if !n.alive {
		return
	}
	n.w.logf("%s crashes", n.id)
	n.alive = false
	n.inc++
	n.persistedTerm = max(n.persistedTerm, n.c.maxTerm)
	n.endLead()
	n.c = nil
}

func (n *simNode) endLead() {
	if n.lead != nil {
		n.lead.end, n.lead.open = n.w.now, false
		n.lead = nil
	}
}

// drain records the core's effects.
func (n *simNode) drain() {
	for _, ef := range n.c.effects() {
		switch ef.kind {
		case effLead:
			if n.lead != nil {
				panic(fmt.Sprintf("%s: lead while leading", n.id))
			}
			n.lead = &interval{node: n.id, term: ef.term, start: n.w.now, open: true}
			n.w.intervals = append(n.w.intervals, n.lead)
			n.persistedTerm = max(n.persistedTerm, ef.term)
			n.w.logf("%s leads term %d", n.id, ef.term)
		case effLose:
			n.w.logf("%s stops leading term %d", n.id, ef.term)
			n.endLead()
		case effView:
			n.viewCount++
		case effResigned:
			n.resigned = append(n.resigned, ef.err)
		}
	}
}

// pump lets the core act at the current time and schedules its next wake-up.
func (n *simNode) pump() {
	if !n.alive {
		return
	}
	now := n.local()
	n.c.tick(now)
	n.drain()
	if n.c.inflight == nil {
		if o := n.c.next(now); o != nil {
			n.send(o)
		}
		n.drain()
	}
	n.gen++
	if wk, ok := n.c.wake(now); ok {
		gen, inc := n.gen, n.inc
		n.w.at(n.clk.trueAt(wk), func() {
			if n.inc == inc && n.gen == gen {
				n.pump()
			}
		})
	}
}

// send makes a store call: it takes effect after one delay and is answered
// after another, unless a fault says otherwise.
func (n *simNode) send(o *op) {
	w := n.w
	n.ops[o.kind]++
	if _, ok := n.firstSent[o.kind]; !ok {
		n.firstSent[o.kind] = o.sent
	}
	inc := n.inc
	delay := func() time.Duration {
		hi := w.f.fastMax
		switch r := w.rng.Float64(); {
		case r < w.f.slow:
			hi = w.f.slowMax
		case r < w.f.slow+w.f.medium:
			hi = w.f.mediumMax
		}
		if hi <= 0 {
			return 0
		}
		return time.Duration(w.rng.Int64N(int64(hi)))
	}
	d1, d2 := delay(), delay()
	failBefore := w.rng.Float64() < w.f.failBefore || w.partitioned[n.id] > w.now
	failAfter := w.rng.Float64() < w.f.failAfter
	w.logf("%s sends %s", n.id, o.kind)
	w.after(d1, func() {
		var r result
		if failBefore {
			r.err = errSim
		} else {
			r = w.apply(n.id, o)
			if failAfter {
				r = result{err: errSim}
			}
		}
		w.after(d2, func() {
			if n.inc != inc || !n.alive {
				return
			}
			if r.err != nil {
				w.logf("%s's %s answered: %v", n.id, o.kind, r.err)
			}
			n.c.done(n.local(), r)
			n.drain()
			n.pump()
		})
	})
}

// apply runs a call on the store at the current true time.
func (w *world) apply(who string, o *op) result {
	ctx := context.Background()
	var r result
	switch o.kind {
	case opRead:
		r.data, r.etag, r.err = w.store.Get(ctx, Key)
	case opCreate:
		r.etag, r.err = w.store.PutIfAbsent(ctx, Key, o.data)
	default:
		r.etag, r.err = w.store.PutIfMatch(ctx, Key, o.data, o.etag)
	}
	if r.err == nil && o.kind != opRead {
		if prev, ok := w.etags[r.etag]; ok {
			panic(fmt.Sprintf("ETag %s written twice:\n%s\n%s", r.etag, prev, o.data))
		}
		w.etags[r.etag] = string(o.data)
		w.landings = append(w.landings, landing{at: w.now, who: who, body: o.body})
		w.logf("%s's %s lands: %s", who, o.kind, o.data)
	}
	return r
}

// observe delivers, after d, a tier-2 message in which m hears from the
// holder h.
func (w *world) observe(m *simNode, h Holder, d time.Duration) {
	inc := m.inc
	w.after(d, func() {
		if m.inc != inc || !m.alive {
			return
		}
		m.c.observed(m.local(), h)
		m.drain()
		m.pump()
	})
}

// heartbeats makes every leading node report its last write to every other
// live node every period, through a tier 2 that may drop or delay messages.
func (w *world) heartbeats(period, maxDelay time.Duration) {
	var beat func()
	beat = func() {
		for _, n := range w.nodes {
			if !n.alive {
				continue
			}
			h, ok := n.c.held()
			if !ok {
				continue
			}
			for _, m := range w.nodes {
				if m == n || !m.alive || w.rng.Float64() < w.f.observedDrop {
					continue
				}
				d := time.Duration(0)
				if maxDelay > 0 {
					d = time.Duration(w.rng.Int64N(int64(maxDelay)))
				}
				w.observe(m, h, d)
			}
		}
		w.after(period, beat)
	}
	w.after(period, beat)
}

func (n *simNode) suspect() {
	if n.alive {
		n.c.suspected(n.local())
		n.drain()
		n.pump()
	}
}

func (n *simNode) resign() {
	if n.alive {
		n.c.resign(n.local())
		n.drain()
		n.pump()
	}
}

// finish closes the intervals still open at the end.
func (w *world) finish() {
	for _, iv := range w.intervals {
		if iv.open {
			iv.end = w.now
		}
	}
}

// checkSafety reports two leaderships that overlap in true time, or terms
// that do not grow with time.
func (w *world) checkSafety() error {
	w.finish()
	ivs := append([]*interval(nil), w.intervals...)
	sort.SliceStable(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
	var last *interval
	for _, iv := range ivs {
		if last != nil {
			if iv.start < last.end {
				return fmt.Errorf("overlap: %s term %d [%v, %v) and %s term %d [%v, %v)",
					last.node, last.term, last.start, last.end, iv.node, iv.term, iv.start, iv.end)
			}
			if iv.term <= last.term {
				return fmt.Errorf("term went from %d (%s) to %d (%s) at %v", last.term, last.node, iv.term, iv.node, iv.start)
			}
		}
		if last == nil || iv.end > last.end {
			last = iv
		}
	}
	return nil
}

func (w *world) dump() string { return strings.Join(w.log, "\n") }

// leadTime is the total true time some node was leading.
func (w *world) leadTime() time.Duration {
	w.finish()
	var total time.Duration
	for _, iv := range w.intervals {
		total += iv.end - iv.start
	}
	return total
}

// node returns the node named id.
func (w *world) node(id string) *simNode {
	for _, n := range w.nodes {
		if n.id == id {
			return n
		}
	}
	panic("no node " + id)
}

// leader returns the node that is leading now, if any.
func (w *world) leader() *simNode {
	for _, n := range w.nodes {
		if n.lead != nil {
			return n
		}
	}
	return nil
}

func (w *world) body() (lockBody, bool) {
	data, _, err := w.store.Get(context.Background(), Key)
	if errors.Is(err, objstore.ErrNotFound) {
		return lockBody{}, false
	}
	if err != nil {
		panic(err)
	}
	b, err := parseLock(data)
	if err != nil {
		panic(err)
	}
	return b, true
}

func TestSimClockRoundTrip(t *testing.T) {
	for _, k := range []simClock{{0, 1000}, {time.Hour, 800}, {-3 * time.Hour, 1250}, {7, 1117}} {
		for _, tt := range []time.Duration{0, 1, 999, time.Second, 15*time.Second + 3} {
			l := k.local(tt)
			back := k.trueAt(l)
			if k.local(back).Before(l) || (back > 0 && !k.local(back-1).Before(l)) {
				t.Fatalf("clock %+v: trueAt(local(%v)) = %v is not the first instant reading %v", k, tt, back, l)
			}
		}
	}
}
