package primary

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// appendMark says that entries through index were appended by at.
type appendMark struct {
	index uint64
	at    time.Time
}

// maxLagMarks is the least append history kept to tell a replica's lag in
// time (up to twice as much is held between trims).
const maxLagMarks = 4096

// replicaRec is the Primary's record of one replica.
type replicaRec struct {
	id string
	// streams is how many Follow streams of this term it has open (a
	// reconnect may overlap the old stream briefly).
	streams int
	// durable is the highest index it reported fsync'd on a stream of
	// this term.
	durable uint64
	// heard is when the Primary last heard from it (receipt or
	// heartbeat); last is the heartbeat that came with it.
	heard time.Time
	last  *netsyv1.Heartbeat
	// missed is the index whose quorum deadline it missed (0: none); it
	// does not count until its receipts reach it.
	missed uint64
}

// quorum is the Primary's side of quorum commit (SPEC §4.3): it counts
// the receipts of healthy replicas, tells the log which index a quorum
// holds, and falls back to acknowledging through object storage when the
// quorum cannot be met. Receipts and standalone heartbeats take one path
// (heard). It is reset whenever the node takes up a term.
type quorum struct {
	p *Primary

	mu       sync.Mutex
	term     uint64
	active   bool // the node is the Active (or Draining) Primary at term
	draining bool
	// registered is the count of registered nodes majority quorum is
	// computed from, as last vouched for by a Cluster State (see
	// registeredCount); 0 while none has, and then writes go through
	// object storage under majority quorum.
	registered int
	// members are the nodes listed by the Cluster State that last vouched
	// for a count (nil while none has): only their receipts count. A node
	// that left is out of the count as soon as the lower count is, even
	// while its receipts still say Healthy (it learns it left, and says
	// Degraded, only later); counting it then would let this Primary and
	// the leaver alone acknowledge a write the remaining majority lacks.
	members map[string]bool
	reps    map[string]*replicaRec
	// pending are appends not yet known committed, oldest first: the
	// quorum deadline of each runs from its time.
	pending []appendMark
	// history is a bounded record of recent appends, for lag in time.
	history    []appendMark
	lastMark   uint64
	replicated uint64
	mode       objwal.Mode
	modeSet    bool
	fallback   bool
	reason     string
	fallbacks  uint64
	// receiptLatency observes, for each append mark, how long a quorum
	// took to hold it.
	receiptLatency func(time.Duration)
	onFallback     func(reason string)
	// scratch is evaluateLocked's buffer for the counted durable indexes.
	scratch []uint64
	// wantAppends says whether run is to be woken by appends: only while
	// a quorum of receipts decides (evaluateLocked sets it), since only
	// then does an append start a deadline that matters. A lone node
	// under majority quorum, quorum 0, or a Primary with no count yet,
	// decides from the lease and the clock alone, which ticks serve; the
	// engine then pokes nobody per write.
	wantAppends atomic.Bool
	// rearm is run's (nil while none runs): a lone node's evaluation
	// pokes it each time the lease lets writes go on the local fsync,
	// so run sets its timer for the lease's end as it stands then,
	// whoever renewed the lease and whoever judged.
	rearm chan struct{}
}

func (q *quorum) reset(term uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.term, q.active, q.draining = term, false, false
	q.reps = map[string]*replicaRec{}
	q.pending, q.history, q.lastMark = nil, nil, 0
	// Until the quorum rules choose, writes go through object storage
	// (the Starting step sets the log so); that is no fallback to count.
	q.replicated, q.fallbacks = 0, 0
	q.mode, q.modeSet = objwal.ModeSync, true
	q.fallback, q.reason = true, "no replica follows yet"
}

// needed is how many replica receipts a write waits for: none under
// quorum 0 (object storage acknowledges), N under a static quorum, and
// under majority quorum floor(n/2) of n registered nodes (the Primary
// counts itself).
func needed(quorum, registered int) int {
	switch {
	case quorum == 0:
		return 0
	case quorum > 0:
		return quorum
	default:
		return max(registered, 1) / 2
	}
}

// window is how long a replica may stay silent and still count: two
// heartbeat intervals, as the Elector judges nodes.
func (q *quorum) window() time.Duration { return 2 * q.p.cfg.HeartbeatInterval }

// open and closed track a replica's Follow streams at term.
func (q *quorum) open(id string, term uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if term != q.term {
		return
	}
	r := q.recLocked(id)
	r.streams++
	r.heard = q.p.cfg.Clock.Now()
}

func (q *quorum) closed(id string, term uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if term != q.term || q.reps[id] == nil {
		return
	}
	q.reps[id].streams--
	q.evaluateLocked(q.p.cfg.Clock.Now())
}

func (q *quorum) recLocked(id string) *replicaRec {
	r := q.reps[id]
	if r == nil {
		r = &replicaRec{id: id}
		q.reps[id] = r
	}
	return r
}

// heard processes a receipt (durable > 0) or a standalone heartbeat from a
// replica's stream at term: both prove it alive, a receipt also says what
// it holds.
func (q *quorum) heard(id string, term uint64, durable uint64, hb *netsyv1.Heartbeat) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if term != q.term {
		return
	}
	now := q.p.cfg.Clock.Now()
	r := q.recLocked(id)
	r.heard = now
	if hb != nil {
		r.last = hb
	}
	if durable > r.durable {
		r.durable = durable
	}
	if r.missed != 0 && r.durable >= r.missed {
		q.p.log.Info("a replica that missed a quorum deadline caught up; it counts again", "replica", id, "durable", r.durable)
		r.missed = 0
	}
	q.evaluateLocked(now)
}

// activate starts counting at term with registered nodes in the cluster,
// a count the Cluster State that named this node vouched for or not
// (authoritative), with the members it listed; without it the count and
// the members are unknown until one does, and no receipt counts.
func (q *quorum) activate(term uint64, registered int, members []string, authoritative bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if term != q.term {
		return
	}
	q.active, q.draining, q.registered, q.members = true, false, 0, nil
	if authoritative && registered > 0 {
		q.registered = registered
		q.members = memberSet(members)
	}
	q.evaluateLocked(q.p.cfg.Clock.Now())
}

func memberSet(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// setRegistered follows the Elector's count of registered nodes: any
// authoritative count, and a higher one from any Cluster State (a larger
// count never needs fewer receipts, so raising is always safe). A count
// of 0 says nothing, and an unknown count stays unknown until a state
// vouches for one. The members whose receipts count are taken only from
// an authoritative state, with its count (even an unchanged one: a node
// may have left as another joined): a state that does not vouch for its
// count may list a node that has since left.
func (q *quorum) setRegistered(n int, members []string, authoritative bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n <= 0 {
		return
	}
	if !authoritative && (q.registered == 0 || n <= q.registered) {
		if n < q.registered || q.registered == 0 {
			q.p.log.Debug("a Cluster State that does not vouch for its count of registered nodes does not lower the quorum's",
				"registered", n, "kept", q.registered)
		}
		return
	}
	q.registered = n
	if authoritative {
		q.members = memberSet(members)
	}
	if q.active {
		q.evaluateLocked(q.p.cfg.Clock.Now())
	}
}

// drain makes every upload eager: a Draining Primary flushes to object
// storage before it steps down.
func (q *quorum) drain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.draining = true
	q.evaluateLocked(q.p.cfg.Clock.Now())
}

func (q *quorum) deactivate() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.active = false
	q.wantAppends.Store(false)
}

// appended records that entries through index were appended at now.
func (q *quorum) appended(index uint64, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.markLocked(index, now) {
		q.evaluateLocked(now)
	}
}

// markLocked records an append mark for entries through index, unless one
// covers them; it reports whether it did.
func (q *quorum) markLocked(index uint64, now time.Time) bool {
	if index <= q.lastMark {
		return false
	}
	q.lastMark = index
	m := appendMark{index: index, at: now}
	q.pending = append(q.pending, m)
	q.history = append(q.history, m)
	if len(q.history) >= 2*maxLagMarks {
		// Keep the newest maxLagMarks, in bulk: one copy per maxLagMarks
		// appends rather than a shift of the whole record on every one.
		q.history = append(q.history[:0], q.history[len(q.history)-maxLagMarks:]...)
	}
	return true
}

// tick re-judges health, deadlines and the lease.
func (q *quorum) tick(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.evaluateLocked(now)
}

// countsLocked says whether r counts toward the quorum now, or why not:
// only while its own last heartbeat (a receipt embeds one whenever the
// health changed) says it is Healthy, whatever index its receipts
// acknowledge.
func (q *quorum) countsLocked(r *replicaRec, now time.Time) (bool, string) {
	switch {
	case !q.members[r.id]:
		// Not registered as far as the latest authoritative Cluster
		// State says (it left, or has not joined yet): a successor's
		// Elector would not count it either (SPEC §5.2).
		return false, "not a member of the latest authoritative Cluster State"
	case r.streams <= 0:
		return false, "no Follow stream"
	case now.Sub(r.heard) > q.window():
		return false, fmt.Sprintf("silent for %s", now.Sub(r.heard).Round(time.Millisecond))
	case r.last == nil:
		return false, "no heartbeat from it yet"
	case r.last.Health == netsyv1.HealthState_DEGRADED:
		// Cut from the Elector, or leaving the cluster (SPEC §5.2: a
		// leaving node's receipts never count).
		return false, "it says it is Degraded"
	case r.last.Health != netsyv1.HealthState_HEALTHY:
		return false, fmt.Sprintf("it says it is %s", r.last.Health)
	case r.missed != 0:
		return false, fmt.Sprintf("missed the quorum deadline of index %d", r.missed)
	}
	return true, ""
}

// evaluateLocked applies the rules: the quorum index is the need-th
// highest durable index of the counted replicas; it is handed to the log
// only while the lease holds; a missed deadline takes the late replicas
// out of the count; too few counted replicas, a lapsed lease or a drain
// make uploads eager (the fallback).
func (q *quorum) evaluateLocked(now time.Time) {
	if !q.active {
		q.wantAppends.Store(false)
		return
	}
	committed := q.p.cfg.Engine.CommittedIndex()
	q.trimLocked(committed, now)
	cfg := q.p.cfg
	need := needed(cfg.Quorum, q.registered)
	counting := need > 0 && (cfg.Quorum > 0 || q.registered > 0)
	if counting && !q.wantAppends.Load() {
		// Receipts decide from now on: the entries appended while they
		// did not get their mark now, as run was not woken for them,
		// and run is woken by every append after this. The flag is set
		// before the read, so an append the read misses sees it and
		// pokes run.
		q.wantAppends.Store(true)
		if last, _, _ := cfg.Engine.LastAppended(); q.markLocked(last, now) {
			q.trimLocked(committed, now)
		}
	}
	q.wantAppends.Store(counting)
	if cfg.Quorum == -1 && q.registered <= 0 {
		// No Cluster State vouched for a count yet: a majority of what
		// is unknown, so object storage acknowledges.
		reason := "no authoritative count of registered nodes yet"
		if q.draining {
			reason = "draining"
		}
		q.setModeLocked(objwal.ModeSync, true, reason)
		return
	}
	if cfg.Quorum == -1 && need == 0 {
		// A node alone with majority quorum is its own majority, while
		// its lease holds: once it lapsed a successor may be elected
		// (SPEC §5.4), so what this node acknowledges must be fenced by
		// object storage, as every Primary's without the lease.
		switch {
		case q.draining:
			q.setModeLocked(objwal.ModeSync, true, "draining")
		case !q.p.LeaseHeld():
			q.setModeLocked(objwal.ModeSync, true, "the Primary's lease lapsed")
		default:
			q.setModeLocked(objwal.ModeAsync, false, "")
			select {
			case q.rearm <- struct{}{}:
			default:
			}
		}
		return
	}
	if cfg.Quorum == 0 {
		q.setModeLocked(objwal.ModeSync, false, "")
		return
	}
	// Deadlines: a replica that has not reported the oldest pending
	// append within the timeout stops counting until it does.
	if len(q.pending) > 0 && now.Sub(q.pending[0].at) > cfg.QuorumTimeout {
		late := q.pending[0].index
		for _, r := range q.reps {
			if ok, _ := q.countsLocked(r, now); ok && r.durable < late {
				r.missed = late
				q.p.log.Warn("a replica missed the quorum deadline; writes fall back to object storage until it catches up",
					"replica", r.id, "index", late, "durable", r.durable, "timeout", cfg.QuorumTimeout)
			}
		}
	}
	// durables reuses q.scratch: this runs on every append and receipt,
	// and a fresh slice (and a reflective sort) per call was most of the
	// quorum's allocations per write (BenchmarkQuorumWrite).
	durables := q.scratch[:0]
	for _, r := range q.reps {
		if ok, _ := q.countsLocked(r, now); ok {
			durables = append(durables, r.durable)
		}
	}
	q.scratch = durables
	lease := q.p.LeaseHeld()
	reason := ""
	switch {
	case q.draining:
		reason = "draining"
	case len(durables) < need:
		reason = fmt.Sprintf("%d of %d replicas needed count", len(durables), need)
	case !lease:
		reason = "the Primary's lease lapsed"
	}
	if len(durables) >= need && lease {
		slices.Sort(durables)
		if idx := durables[len(durables)-need]; idx > q.replicated {
			q.replicated = idx
			q.observeLocked(idx, now)
			cfg.Log.SetReplicated(idx)
		}
	}
	if reason != "" {
		q.setModeLocked(objwal.ModeSync, true, reason)
	} else {
		q.setModeLocked(objwal.ModeQuorum, false, "")
	}
}

// observeLocked reports receipt latency for the marks a quorum now holds.
func (q *quorum) observeLocked(idx uint64, now time.Time) {
	for _, m := range q.pending {
		if m.index > idx {
			break
		}
		if q.receiptLatency != nil {
			q.receiptLatency(now.Sub(m.at))
		}
	}
	q.trimLocked(idx, now)
}

// trimLocked drops pending marks through index: they need no deadline.
func (q *quorum) trimLocked(index uint64, _ time.Time) {
	i := 0
	for i < len(q.pending) && q.pending[i].index <= index {
		i++
	}
	if i > 0 {
		q.pending = slices.Delete(q.pending, 0, i)
	}
}

func (q *quorum) setModeLocked(m objwal.Mode, fallback bool, reason string) {
	if fallback && !q.fallback {
		q.fallbacks++
		q.p.log.Warn("writes fall back to object storage", "reason", reason, "primary_term", q.term)
		if q.onFallback != nil {
			q.onFallback(reason)
		}
	} else if !fallback && q.fallback && m == objwal.ModeQuorum {
		q.p.log.Info("writes are acknowledged by the replica quorum", "primary_term", q.term)
	}
	q.fallback, q.reason = fallback, reason
	if q.modeSet && q.mode == m {
		return
	}
	q.mode, q.modeSet = m, true
	q.p.cfg.Log.SetMode(m)
}

// status is the Primary's account for its heartbeat and cluster-state.
func (q *quorum) status(now time.Time) *netsyv1.Replication {
	q.mu.Lock()
	defer q.mu.Unlock()
	last, _, _ := q.p.cfg.Engine.LastAppended()
	st := &netsyv1.Replication{
		Quorum:         int32(q.p.cfg.Quorum),
		ReplicasNeeded: uint32(needed(q.p.cfg.Quorum, q.registered)),
		Fallback:       q.fallback,
		FallbackReason: q.reason,
		Fallbacks:      q.fallbacks,
	}
	ids := make([]string, 0, len(q.reps))
	for id := range q.reps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := q.reps[id]
		ok, why := q.countsLocked(r, now)
		rs := &netsyv1.ReplicaStatus{
			NodeId: id, DurableIndex: r.durable, Counted: ok, NotCountedReason: why,
			LastHeardMs: now.Sub(r.heard).Milliseconds(),
		}
		if last > r.durable {
			rs.LagEntries = last - r.durable
			rs.LagMs = q.lagLocked(r.durable, now).Milliseconds()
		}
		st.Replicas = append(st.Replicas, rs)
	}
	return st
}

// lagLocked is how long ago the first entry after durable was appended
// (at least as long as the oldest mark kept, if it is older).
func (q *quorum) lagLocked(durable uint64, now time.Time) time.Duration {
	i := sort.Search(len(q.history), func(i int) bool { return q.history[i].index > durable })
	if i == len(q.history) {
		return 0
	}
	return now.Sub(q.history[i].at)
}

// run feeds appends, ticks and the lease's end to q while ctx lives.
// Appends wake it only while q wants them (wantAppends), through one
// channel the engine pokes (WatchAppends: no channel per wake-up); a tick
// records the newest append too, so lag in time stays known to a tick
// when appends do not wake it. A timer set for when the lease ends makes
// a lapse switch writes to object storage then, not at the next tick nor
// the next append: a lone node is woken by neither per write.
func (q *quorum) run(ctx context.Context) {
	eng, clk := q.p.cfg.Engine, q.p.cfg.Clock
	tick := min(q.p.cfg.QuorumTimeout, q.window()) / 4
	tick = max(tick, 5*time.Millisecond)
	t := clk.NewTicker(tick)
	defer t.Stop()
	appends := make(chan struct{}, 1)
	defer eng.WatchAppends(appends, &q.wantAppends)()
	// lapse fires when the lease, as last read (armed), ends. A renewal
	// moves the end later, so a fire may come early: it only makes q
	// judge again, and the timer is set for the new end on that pass.
	lapse := clk.NewTimer(time.Hour)
	lapse.Stop()
	defer lapse.Stop()
	rearm := make(chan struct{}, 1)
	q.mu.Lock()
	q.rearm = rearm
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		if q.rearm == rearm {
			q.rearm = nil
		}
		q.mu.Unlock()
	}()
	var armed time.Time
	for {
		// The read comes before the wait: a poke for an append after
		// it waits in the buffer.
		if last, _, _ := eng.LastAppended(); last > 0 {
			q.appended(last, clk.Now())
		}
		if until := q.p.LeaseUntil(); !until.Equal(armed) {
			armed = until
			if d := until.Sub(clk.Now()); d > 0 {
				lapse.Reset(d)
			} else {
				// Already over (renewed late, read late): judge now;
				// the fire for the end armed before may be lost.
				lapse.Stop()
				q.tick(clk.Now())
			}
		}
		select {
		case <-rearm:
		case <-appends:
		case <-t.C():
			q.tick(clk.Now())
		case <-lapse.C():
			q.tick(clk.Now())
		case <-ctx.Done():
			return
		}
	}
}
