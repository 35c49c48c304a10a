package engine

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/mvcc"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// lessor holds leases and their attached keys. Grants, revokes and key
// attachment change only in the write loop (or replay); renewals and reads
// come from any goroutine, hence the mutex. Expiry deadlines are not logged:
// after a restart or failover every lease gets its full TTL again, as etcd
// does on leader change.
type lessor struct {
	mu     sync.Mutex
	clock  clock.Clock
	leases map[int64]*lease
}

type lease struct {
	id     int64
	ttl    int64
	expiry time.Time
	keys   map[string]struct{}
}

func newLessor(c clock.Clock) *lessor {
	return &lessor{clock: c, leases: make(map[int64]*lease)}
}

func (l *lessor) grant(id, ttl int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases[id] = &lease{id: id, ttl: ttl, expiry: l.clock.Now().Add(time.Duration(ttl) * time.Second), keys: map[string]struct{}{}}
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

// extendAll gives every lease its full TTL again from now: a new Primary
// does not know when the old one last renewed them, so, as etcd on a
// leader change, it never expires a lease early.
func (l *lessor) extendAll() {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, le := range l.leases {
		le.expiry = now.Add(time.Duration(le.ttl) * time.Second)
	}
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

// track keeps key attachments in step with a put or delete event.
func (l *lessor) track(ev *mvccpb.Event) {
	var prev, next int64
	if ev.PrevKv != nil {
		prev = ev.PrevKv.Lease
	}
	if ev.Type == mvccpb.PUT {
		next = ev.Kv.Lease
	}
	if prev == next {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := string(ev.Kv.Key)
	if le := l.leases[prev]; prev != 0 && le != nil {
		delete(le.keys, key)
	}
	if le := l.leases[next]; next != 0 && le != nil {
		le.keys[key] = struct{}{}
	}
}

// reattach rebuilds key attachments from the live keys after a restore.
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
	le := l.leases[id]
	if le == nil || !le.expiry.After(now) {
		return 0, ErrLeaseNotFound
	}
	le.expiry = now.Add(time.Duration(le.ttl) * time.Second)
	return le.ttl, nil
}

func (l *lessor) snapshot() []*netsyv1.SnapshotLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*netsyv1.SnapshotLease, 0, len(l.leases))
	for _, le := range l.leases {
		out = append(out, &netsyv1.SnapshotLease{Id: le.id, Ttl: le.ttl})
	}
	slices.SortFunc(out, func(a, b *netsyv1.SnapshotLease) int { return cmpInt(a.Id, b.Id) })
	return out
}

// LeaseRenew refreshes a lease (keepalive). Renewals are not logged.
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

// LeaseTimeToLive reports a lease's TTLs and optionally its keys.
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
