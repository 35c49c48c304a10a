package clustersim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// span is a stretch of true time [start, end) one node spent in a role.
type span struct {
	node       string
	term       uint64
	start, end time.Duration
	open       bool
}

func (s span) String() string {
	end := fmt.Sprint(s.end)
	if s.open {
		end = "…"
	}
	return fmt.Sprintf("%s term %d [%v, %s)", s.node, s.term, s.start, end)
}

// rejection is a Cluster State a view refused: node was offered a state
// of Elector term term (from: "push from n3", "heartbeat", ...) while it
// held term held.
type rejection struct {
	node, from string
	term, held uint64
}

type healthChange struct {
	at time.Duration
	ok bool
}

// recorder watches every node and keeps what the invariants are checked
// against. Nodes report to it from their goroutines.
type recorder struct {
	w         *world
	store     objstore.Store // the bucket itself, not a node's way to it
	clusterID string

	mu       sync.Mutex
	electors []*span
	stalls   map[string][]*span
	// leases are the stretches a node was Active with a lease valid by
	// its own clock.
	leases      map[string][]*span
	activeTerm  map[string]uint64 // node -> term while Active
	promotions  []span            // start = when it went Starting
	termOwner   map[uint64]string
	maxPromoted uint64
	healthLog   map[string][]healthChange
	violations  []string

	staleRejected int // pushes or answers a view refused for an older Elector term
	// rejections lists those refusals.
	rejections []rejection
	// stalePromotions counts nodes that went Starting at a term below one
	// taken up before.
	stalePromotions int
	answers         int
}

// member is a simulated node as the recorder knows it.
type member interface {
	nodeID() string
	clock() *simClock
}

func newRecorder(w *world, store objstore.Store, clusterID string) *recorder {
	return &recorder{
		w:          w,
		store:      store,
		clusterID:  clusterID,
		stalls:     make(map[string][]*span),
		leases:     make(map[string][]*span),
		activeTerm: make(map[string]uint64),
		termOwner:  make(map[uint64]string),
		healthLog:  make(map[string][]healthChange),
	}
}

func (r *recorder) violatef(format string, args ...any) {
	msg := fmt.Sprintf("at %v: ", r.w.Now()) + fmt.Sprintf(format, args...)
	r.w.tracef("VIOLATION %s", msg)
	if len(r.violations) < 20 {
		r.violations = append(r.violations, msg)
	}
}

func (r *recorder) electorStart(n member, term uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.electors = append(r.electors, &span{node: n.nodeID(), term: term, start: r.w.Now(), open: true})
	r.w.tracef("%s is Elector at term %d", n.nodeID(), term)
}

func (r *recorder) electorEnd(n member, term uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.electors {
		if s.open && s.node == n.nodeID() && s.term == term {
			s.open, s.end = false, r.w.Now()
			r.w.tracef("%s is no longer Elector (term %d)", n.nodeID(), term)
		}
	}
}

// answered: the Elector of n at term answered a heartbeat now.
func (r *recorder) answered(n member, term uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers++
	for _, s := range r.electors {
		if s.open && s.node == n.nodeID() && s.term == term {
			return
		}
	}
	r.violatef("%s answered a heartbeat as Elector of term %d after losing the lock", n.nodeID(), term)
}

func (r *recorder) frozen(n member, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.w.Now()
	if on {
		r.stalls[n.nodeID()] = append(r.stalls[n.nodeID()], &span{node: n.nodeID(), start: now, open: true})
		return
	}
	if ss := r.stalls[n.nodeID()]; len(ss) > 0 && ss[len(ss)-1].open {
		ss[len(ss)-1].open, ss[len(ss)-1].end = false, now
	}
}

// active: n became Active at term with its lease until leaseUntil (its
// clock). Called with n.mu held.
func (r *recorder) active(n member, term uint64, leaseUntil time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.activeTerm[n.nodeID()] = term
	r.extendLocked(n, term, leaseUntil)
}

// lease: the Active n's lease now runs until leaseUntil.
func (r *recorder) lease(n member, leaseUntil time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if term, ok := r.activeTerm[n.nodeID()]; ok {
		r.extendLocked(n, term, leaseUntil)
	}
}

func (r *recorder) extendLocked(n member, term uint64, leaseUntil time.Time) {
	now := r.w.Now()
	end := n.clock().trueAt(leaseUntil)
	if end <= now {
		return
	}
	if term < r.maxPromoted {
		r.violatef("%s holds a lease at primary term %d after term %d was taken up", n.nodeID(), term, r.maxPromoted)
	}
	ss := r.leases[n.nodeID()]
	if len(ss) > 0 && ss[len(ss)-1].end > now && ss[len(ss)-1].term == term {
		last := ss[len(ss)-1]
		last.end = max(last.end, end)
		return
	}
	r.leases[n.nodeID()] = append(ss, &span{node: n.nodeID(), term: term, start: now, end: end})
}

// inactive: n is no longer Active.
func (r *recorder) inactive(n member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.activeTerm, n.nodeID())
	now := r.w.Now()
	if ss := r.leases[n.nodeID()]; len(ss) > 0 && ss[len(ss)-1].end > now {
		ss[len(ss)-1].end = now
	}
}

// promoted: n went Starting at term. Called with n.mu held.
func (r *recorder) promoted(n member, term uint64) {
	m, _, err := discovery.NewMembersFile(r.store, r.clusterID).Load(context.Background())
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.w.Now()
	r.promotions = append(r.promotions, span{node: n.nodeID(), term: term, start: now})
	switch {
	case err != nil:
		r.violatef("members.json does not load: %v", err)
	case term > m.PrimaryTerm:
		r.violatef("%s took up primary term %d, above members.json's %d", n.nodeID(), term, m.PrimaryTerm)
	}
	if owner, ok := r.termOwner[term]; ok && owner != n.nodeID() {
		r.violatef("primary term %d taken up by %s and by %s", term, owner, n.nodeID())
	}
	r.termOwner[term] = n.nodeID()
	if term <= r.maxPromoted {
		// A push that waited out a stall can name a node at a term below
		// one handed out since; the node may start taking it up. What
		// must not follow is a lease (see extendLocked) or a write at
		// the older term (the engine refuses that promotion once the
		// newer Primary wrote, which promoteLocked models).
		r.stalePromotions++
		r.w.tracef("%s takes up primary term %d after term %d was taken up", n.nodeID(), term, r.maxPromoted)
	}
	r.maxPromoted = max(r.maxPromoted, term)
}

// offered: n's view was offered cs; it held Elector term before.
func (r *recorder) offered(n member, cs *netsyv1.ClusterState, ok bool, before uint64, from string) {
	if cs == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case ok && cs.ElectorTerm < before:
		r.violatef("%s's view accepted a state of Elector term %d (%s) after term %d", n.nodeID(), cs.ElectorTerm, from, before)
	case !ok && cs.ElectorTerm < before:
		r.staleRejected++
		r.rejections = append(r.rejections, rejection{node: n.nodeID(), from: from, term: cs.ElectorTerm, held: before})
		r.w.tracef("%s rejected a state of Elector term %d (%s) after term %d", n.nodeID(), cs.ElectorTerm, from, before)
	}
}

func (r *recorder) health(n member, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.healthLog[n.nodeID()] = append(r.healthLog[n.nodeID()], healthChange{at: r.w.Now(), ok: ok})
	r.w.tracef("%s judges itself Healthy=%v", n.nodeID(), ok)
}

// minus returns the parts of s outside every span of cut.
func minus(s span, cut []*span) []span {
	parts := []span{s}
	for _, c := range cut {
		var next []span
		for _, p := range parts {
			if c.end <= p.start || c.start >= p.end {
				next = append(next, p)
				continue
			}
			if c.start > p.start {
				q := p
				q.end = c.start
				next = append(next, q)
			}
			if c.end < p.end {
				q := p
				q.start = c.end
				next = append(next, q)
			}
		}
		parts = next
	}
	return parts
}

// closedLocked returns copies of spans with open ones ending now.
func (r *recorder) closedLocked(ss []*span) []*span {
	now := r.w.Now()
	out := make([]*span, 0, len(ss))
	for _, s := range ss {
		c := *s
		if c.open {
			c.end, c.open = now, false
		}
		out = append(out, &c)
	}
	return out
}

// overlaps finds two spans of different nodes (or terms) that share an
// instant, not counting the time a node was stalled.
func (r *recorder) overlapsLocked(ss []*span, what string) error {
	var parts []span
	for _, s := range r.closedLocked(ss) {
		for _, p := range minus(*s, r.closedLocked(r.stalls[s.node])) {
			if p.end > p.start {
				parts = append(parts, p)
			}
		}
	}
	slices.SortFunc(parts, func(a, b span) int {
		if a.start != b.start {
			return int(a.start - b.start)
		}
		return int(a.term) - int(b.term)
	})
	for i := range parts {
		for j := i + 1; j < len(parts) && parts[j].start < parts[i].end; j++ {
			if parts[i].node != parts[j].node || parts[i].term != parts[j].term {
				return fmt.Errorf("two %s at once: %v and %v", what, parts[i], parts[j])
			}
		}
	}
	return nil
}

// check returns every invariant broken so far.
func (r *recorder) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := slices.Clone(r.violations)
	if err := r.overlapsLocked(r.electors, "Electors acting"); err != nil {
		errs = append(errs, err.Error())
	}
	// A later Elector has a higher term.
	el := r.closedLocked(r.electors)
	slices.SortStableFunc(el, func(a, b *span) int { return int(a.start - b.start) })
	for i := 1; i < len(el); i++ {
		if el[i].term <= el[i-1].term {
			errs = append(errs, fmt.Sprintf("Elector term went from %v to %v", el[i-1], el[i]))
		}
	}
	var leases []*span
	for _, ss := range r.leases {
		leases = append(leases, ss...)
	}
	if err := r.overlapsLocked(leases, "Active Primaries with valid leases"); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(errs, "\n"))
}

// clusterStateNow asks an Elector for its Cluster State from the driver.
// The driver must never wait for something only a later event brings, so
// the question gets until every goroutine blocks; an Elector that has not
// answered by then is busy, and the question is withdrawn.
func clusterStateNow(e *elector.Elector) (*netsyv1.ClusterState, error) {
	type answer struct {
		cs  *netsyv1.ClusterState
		err error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan answer, 1)
	go func() {
		cs, err := e.ClusterState(ctx, true)
		ch <- answer{cs, err}
	}()
	synctest.Wait()
	select {
	case a := <-ch:
		return a.cs, a.err
	default:
		cancel()
		<-ch
		return nil, errors.New("the Elector does not answer")
	}
}
