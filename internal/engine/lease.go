package engine

import (
	"bytes"
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/mvcc"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// lessor holds leases and their attached keys. Grants, revokes, key
// attachment and checkpoints change only in the write loop (or replay);
// renewals and reads come from any goroutine, hence the mutex.
//
// Every node counts each lease's deadline down on its own monotonic clock.
// The writer moves it on a renewal; the other nodes learn renewals only
// from the checkpoints the writer logs (see due), and a checkpoint, a grant
// or a snapshot sets the deadline to "now + the remaining time it carries"
// on the node that applies it. A new Primary therefore starts from the
// deadline it tracked as a replica, and a restarted node from the last
// checkpoint it replays, never from the whole TTL again.
type lessor struct {
	mu     sync.Mutex
	clock  clock.Clock
	leases map[int64]*lease
	// renewing is true while this node's writer accepts renewals: from
	// its promotion (or opening as the writer) until it starts draining
	// or steps down, so no renewal lands after the last checkpoint a
	// handoff logs.
	renewing bool
	// minDrift is how far a renewal must move a lease's deadline past
	// its last checkpoint's before it is worth logging again; ageFloor
	// and ageCap bound how old a lease's last checkpoint may grow (see
	// ageLimit).
	minDrift, ageFloor, ageCap time.Duration
}

type lease struct {
	id     int64
	ttl    int64
	expiry time.Time
	// ckptExpiry is the deadline a node computed when it applied this
	// lease's last checkpoint (or grant, or snapshot), as this node
	// measures it, and ckptAt is when that was: the writer compares its
	// own deadline with ckptExpiry to know whether replicas need a new
	// checkpoint, and ckptAt to bound what a restart would believe.
	ckptExpiry time.Time
	ckptAt     time.Time
	keys       map[string]struct{}
}

func newLessor(c clock.Clock) *lessor {
	return &lessor{clock: c, leases: make(map[int64]*lease)}
}

// reset drops every lease (the state is being replaced by a snapshot).
// The lessor itself stays: other goroutines hold it.
func (l *lessor) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.leases)
}

func (l *lessor) grant(id, ttl int64) {
	l.restore(id, ttl, 0)
}

// restore adds a lease with remainingMs left (0: its whole TTL, as for a
// grant or a snapshot written before remaining times were recorded). The
// remaining time never exceeds the TTL.
func (l *lessor) restore(id, ttl, remainingMs int64) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	le := &lease{id: id, ttl: ttl, keys: map[string]struct{}{}}
	le.setCheckpoint(now, clampRemaining(remainingMs, ttl))
	l.leases[id] = le
}

// applyCheckpoint sets a lease's deadline from a logged checkpoint: what
// the writer had left when it logged it, counted from now.
func (l *lessor) applyCheckpoint(id, remainingMs int64) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if le := l.leases[id]; le != nil {
		le.setCheckpoint(now, clampRemaining(remainingMs, le.ttl))
	}
}

// clampRemaining turns a logged remaining time into a duration of at
// most ttl seconds; 0 or less (not recorded) is the whole TTL.
func clampRemaining(remainingMs, ttl int64) time.Duration {
	full := time.Duration(ttl) * time.Second
	if remainingMs <= 0 {
		return full
	}
	return min(time.Duration(remainingMs)*time.Millisecond, full)
}

func (le *lease) setCheckpoint(now time.Time, remaining time.Duration) {
	le.expiry = now.Add(remaining)
	le.ckptExpiry, le.ckptAt = le.expiry, now
}

// remainingMs is what a checkpoint or a snapshot records for le at now:
// at least 1, since 0 means "not recorded".
func (le *lease) remainingMs(now time.Time) int64 {
	return max(le.expiry.Sub(now).Milliseconds(), 1)
}

// ageLimit is how old a lease's last checkpoint may grow before it is
// logged again although nobody renewed it: a tenth of its TTL, at least
// ageFloor and at most ageCap. A node that restarts believes the last
// checkpoint it replays, so this bounds how much longer than its TTL a
// lease can live across a restart (besides the downtime), at the cost of
// at most ten checkpoints per TTL for a lease nobody renews.
func (l *lessor) ageLimit(ttl int64) time.Duration {
	return max(l.ageFloor, min(time.Duration(ttl)*time.Second/10, l.ageCap))
}

// due returns the checkpoints to log now, at most limit of them, and
// records them as logged: leases a renewal moved at least minDrift past
// their last checkpoint (replicas would otherwise count down from the old
// one), and leases whose last checkpoint is older than ageLimit. Leases
// past their deadline are left to expiry. The periodic pass passes the
// lessor's minDrift; a drain passes the least drift there is, so every
// renewal its writer took reaches the next Primary.
func (l *lessor) due(limit int, minDrift time.Duration) []*netsyv1.LeaseCheckpoint {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*netsyv1.LeaseCheckpoint
	for _, le := range l.leases {
		if len(out) >= limit {
			break
		}
		if !le.expiry.After(now) {
			continue
		}
		if le.expiry.Sub(le.ckptExpiry) < minDrift && now.Sub(le.ckptAt) < l.ageLimit(le.ttl) {
			continue
		}
		out = append(out, &netsyv1.LeaseCheckpoint{Id: le.id, RemainingMs: le.remainingMs(now)})
		le.ckptExpiry, le.ckptAt = le.expiry, now
	}
	slices.SortFunc(out, func(a, b *netsyv1.LeaseCheckpoint) int { return cmp.Compare(a.Id, b.Id) })
	return out
}

// setRenewing starts or stops accepting renewals.
func (l *lessor) setRenewing(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewing = on
}

// promote readies the lessor of a new writer: every lease keeps the
// deadline this node tracked from the checkpoints it applied, except that
// none ends sooner than grace from now, so a client whose renewal the old
// Primary took but had not yet checkpointed has a moment to reach the new
// one. Renewals are accepted from here on.
func (l *lessor) promote(grace time.Duration) {
	floor := l.clock.Now().Add(grace)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, le := range l.leases {
		if le.expiry.Before(floor) {
			le.expiry = floor
		}
	}
	l.renewing = true
}

func (l *lessor) revoke(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.leases, id)
}

// ttl returns a lease's granted TTL.
func (l *lessor) ttl(id int64) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	le, ok := l.leases[id]
	if !ok {
		return 0, false
	}
	return le.ttl, true
}

// reattachAll rebuilds every lease's key set from the store at rev.
func (l *lessor) reattachAll(s *mvcc.Store, rev int64) {
	l.mu.Lock()
	for _, le := range l.leases {
		clear(le.keys)
	}
	l.mu.Unlock()
	l.reattach(s, rev)
}

func (l *lessor) exists(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.leases[id]
	return ok
}

func (l *lessor) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.leases)
}

// newID picks an unused positive lease id.
func (l *lessor) newID() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		id := rand.Int64N(math.MaxInt64-1) + 1
		if _, ok := l.leases[id]; !ok {
			return id
		}
	}
}

// move moves key's attachment from lease prev to lease next (0: none).
func (l *lessor) move(k []byte, prev, next int64) {
	if prev == next {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := string(k)
	if le := l.leases[prev]; prev != 0 && le != nil {
		delete(le.keys, key)
	}
	if le := l.leases[next]; next != 0 && le != nil {
		le.keys[key] = struct{}{}
	}
}

// attach moves key from lease prev to lease next (0: none) as a version
// of it loads (mvcc.Load.OnLease): applied in load order, the moves
// leave each key attached as its latest live version says.
func (l *lessor) attach(key []byte, prev, next int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if le := l.leases[prev]; prev != 0 && le != nil {
		delete(le.keys, string(key))
	}
	if le := l.leases[next]; next != 0 && le != nil {
		le.keys[string(key)] = struct{}{}
	}
}

// reattach rebuilds key attachments from the live keys at rev, after a
// rollback changed them.
func (l *lessor) reattach(s *mvcc.Store, rev int64) {
	if rev <= 0 {
		return
	}
	res, err := s.Range([]byte{0}, []byte{0}, mvcc.RangeOptions{Rev: rev, KeysOnly: true})
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, kv := range res.KVs {
		if le := l.leases[kv.Lease]; kv.Lease != 0 && le != nil {
			le.keys[string(kv.Key)] = struct{}{}
		}
	}
}

func (l *lessor) keys(id int64) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	le := l.leases[id]
	if le == nil {
		return nil
	}
	out := make([][]byte, 0, len(le.keys))
	for k := range le.keys {
		out = append(out, []byte(k))
	}
	slices.SortFunc(out, bytes.Compare)
	return out
}

// expired returns up to max leases whose deadline has passed, oldest first.
func (l *lessor) expired(max int) []int64 {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*lease
	for _, le := range l.leases {
		if !le.expiry.After(now) {
			out = append(out, le)
		}
	}
	slices.SortFunc(out, func(a, b *lease) int { return a.expiry.Compare(b.expiry) })
	if len(out) > max {
		out = out[:max]
	}
	ids := make([]int64, len(out))
	for i, le := range out {
		ids[i] = le.id
	}
	return ids
}

func (l *lessor) renew(id int64) (int64, error) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.renewing {
		// Draining or stepped down: the next Primary renews it.
		return 0, ErrNotPrimary
	}
	le := l.leases[id]
	if le == nil || !le.expiry.After(now) {
		return 0, ErrLeaseNotFound
	}
	le.expiry = now.Add(time.Duration(le.ttl) * time.Second)
	return le.ttl, nil
}

// snapshot lists every lease with the time it has left now, so a node
// that restores the snapshot counts down from there.
func (l *lessor) snapshot() []*netsyv1.SnapshotLease {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*netsyv1.SnapshotLease, 0, len(l.leases))
	for _, le := range l.leases {
		out = append(out, &netsyv1.SnapshotLease{Id: le.id, Ttl: le.ttl, RemainingMs: le.remainingMs(now)})
	}
	slices.SortFunc(out, func(a, b *netsyv1.SnapshotLease) int { return cmp.Compare(a.Id, b.Id) })
	return out
}

// LeaseRenew refreshes a lease (keepalive). A renewal is not logged by
// itself: the next checkpoint carries it to the other nodes (see
// lessor.due).
func (e *Engine) LeaseRenew(_ context.Context, id int64) (int64, error) {
	if !e.writer.Load() {
		// Only the writer decides expiry, so only it renews.
		return 0, ErrNotPrimary
	}
	// Expiry is decided by the writer; a deposed node's renewal would
	// keep a lease alive that the new writer may expire.
	if err := e.Deposed(); err != nil {
		return 0, err
	}
	return e.lease.renew(id)
}

// LeaseTimeToLive reports a lease's TTLs and optionally its keys. On a
// follower the remaining time is counted down from the last checkpoint it
// applied, so it trails the Primary's by at most what renewals moved since
// (about one checkpoint interval) plus the replication delay.
func (e *Engine) LeaseTimeToLive(_ context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := e.Deposed(); err != nil {
		return nil, err
	}
	now := e.cfg.Clock.Now()
	e.lease.mu.Lock()
	le := e.lease.leases[r.ID]
	if le == nil {
		e.lease.mu.Unlock()
		return nil, ErrLeaseNotFound
	}
	remaining := int64(math.Ceil(le.expiry.Sub(now).Seconds()))
	if remaining < 0 {
		remaining = 0
	}
	resp := &pb.LeaseTimeToLiveResponse{ID: r.ID, TTL: remaining, GrantedTTL: le.ttl}
	if r.Keys {
		for k := range le.keys {
			resp.Keys = append(resp.Keys, []byte(k))
		}
	}
	e.lease.mu.Unlock()
	slices.SortFunc(resp.Keys, bytes.Compare)
	resp.Header = &pb.ResponseHeader{Revision: e.committedRev.Load()}
	return resp, nil
}

// LeaseLeases lists every lease.
func (e *Engine) LeaseLeases(context.Context, *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	if err := e.Deposed(); err != nil {
		return nil, err
	}
	resp := &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{Revision: e.committedRev.Load()}}
	for _, l := range e.lease.snapshot() {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: l.Id})
	}
	return resp, nil
}

// restoreLeases adds a snapshot's leases, each with the time it had left
// when the snapshot was captured.
func (e *Engine) restoreLeases(ls []*netsyv1.SnapshotLease) {
	for _, l := range ls {
		e.lease.restore(l.Id, l.Ttl, l.RemainingMs)
	}
}
