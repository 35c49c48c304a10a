package etcdapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/mvcc"
)

// fakeBackend is a small in-memory Backend: a map of current values, a
// revision counter and the list of every event. Enough MVCC to exercise the
// API layer; no historic reads.
type fakeBackend struct {
	mu        sync.Mutex
	rev       int64
	compact   int64
	kvs       map[string]*mvccpb.KeyValue
	events    []*mvccpb.Event
	notify    chan struct{}
	leases    map[int64]int64
	nextLease int64
	snap      []byte

	// err, when set, is returned by every request method.
	err error
	// eventsHook runs at the start of every Events call, unlocked.
	eventsHook func(from, to int64)
	// eventsCalls counts Events calls.
	eventsCalls int
	// watchErr is what WatchErr returns.
	watchErr error
	// moved and removed record MoveLeader and MemberRemove targets;
	// memberErr, when set, is what both return.
	moved, removed []uint64
	memberErr      error
}

const (
	testClusterID = 0xc1
	testMemberID  = 0xa1
	testTerm      = 7
)

func newFakeBackend() *fakeBackend {
	return &fakeBackend{
		kvs:    make(map[string]*mvccpb.KeyValue),
		notify: make(chan struct{}),
		leases: make(map[int64]int64),
	}
}

var _ Backend = (*fakeBackend)(nil)

func (f *fakeBackend) failing() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeBackend) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// stopWatches makes WatchErr return err and wakes the watch loops.
func (f *fakeBackend) stopWatches(err error) {
	f.mu.Lock()
	f.watchErr = err
	f.commitLocked()
	f.mu.Unlock()
}

func (f *fakeBackend) WatchErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watchErr
}

// commitLocked publishes the current revision to watchers.
func (f *fakeBackend) commitLocked() {
	close(f.notify)
	f.notify = make(chan struct{})
}

func inRange(k, key, end []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(k, key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(k, key) >= 0
	default:
		return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
	}
}

func (f *fakeBackend) matchLocked(key, end []byte) []*mvccpb.KeyValue {
	var out []*mvccpb.KeyValue
	for _, kv := range f.kvs {
		if inRange(kv.Key, key, end) {
			out = append(out, kv)
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Key, out[j].Key) < 0 })
	return out
}

func (f *fakeBackend) Range(_ context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rangeLocked(r)
}

func (f *fakeBackend) rangeLocked(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if r.Revision > f.rev {
		return nil, mvcc.ErrFutureRev
	}
	if r.Revision > 0 && r.Revision < f.compact {
		return nil, mvcc.ErrCompacted
	}
	kvs := f.matchLocked(r.Key, r.RangeEnd)
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: f.rev}, Count: int64(len(kvs))}
	if r.CountOnly {
		return resp, nil
	}
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs = kvs[:r.Limit]
		resp.More = true
	}
	resp.Kvs = kvs
	return resp, nil
}

// writer accumulates the events of one write at revision rev.
type writer struct {
	f   *fakeBackend
	rev int64
	evs []*mvccpb.Event
}

func (w *writer) put(r *pb.PutRequest) (*pb.PutResponse, error) {
	f := w.f
	if r.Lease != 0 {
		if _, ok := f.leases[r.Lease]; !ok {
			return nil, engine.ErrLeaseNotFound
		}
	}
	prev := f.kvs[string(r.Key)]
	kv := &mvccpb.KeyValue{Key: r.Key, Value: r.Value, Lease: r.Lease, ModRevision: w.rev, CreateRevision: w.rev, Version: 1}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
		if r.IgnoreValue {
			kv.Value = prev.Value
		}
		if r.IgnoreLease {
			kv.Lease = prev.Lease
		}
	}
	f.kvs[string(r.Key)] = kv
	w.evs = append(w.evs, &mvccpb.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev})
	resp := &pb.PutResponse{}
	if r.PrevKv {
		resp.PrevKv = prev
	}
	return resp, nil
}

func (w *writer) del(r *pb.DeleteRangeRequest) *pb.DeleteRangeResponse {
	f := w.f
	kvs := f.matchLocked(r.Key, r.RangeEnd)
	resp := &pb.DeleteRangeResponse{Deleted: int64(len(kvs))}
	for _, kv := range kvs {
		delete(f.kvs, string(kv.Key))
		w.evs = append(w.evs, &mvccpb.Event{
			Type:   mvccpb.DELETE,
			Kv:     &mvccpb.KeyValue{Key: kv.Key, ModRevision: w.rev},
			PrevKv: kv,
		})
	}
	if r.PrevKv {
		resp.PrevKvs = kvs
	}
	return resp
}

func (w *writer) done() {
	if len(w.evs) == 0 {
		return
	}
	w.f.rev = w.rev
	w.f.events = append(w.f.events, w.evs...)
	w.f.commitLocked()
}

func (f *fakeBackend) newWriter() *writer { return &writer{f: f, rev: f.rev + 1} }

func (f *fakeBackend) Put(_ context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.newWriter()
	resp, err := w.put(r)
	if err != nil {
		return nil, err
	}
	w.done()
	resp.Header = &pb.ResponseHeader{Revision: f.rev}
	return resp, nil
}

func (f *fakeBackend) DeleteRange(_ context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.newWriter()
	resp := w.del(r)
	w.done()
	resp.Header = &pb.ResponseHeader{Revision: f.rev}
	return resp, nil
}

func (f *fakeBackend) compare(c *pb.Compare) bool {
	kv := f.kvs[string(c.Key)]
	var cmp int
	switch c.Target {
	case pb.Compare_VALUE:
		var v []byte
		if kv != nil {
			v = kv.Value
		}
		cmp = bytes.Compare(v, c.GetValue())
	default:
		var have, want int64
		if kv != nil {
			switch c.Target {
			case pb.Compare_VERSION:
				have = kv.Version
			case pb.Compare_CREATE:
				have = kv.CreateRevision
			case pb.Compare_MOD:
				have = kv.ModRevision
			case pb.Compare_LEASE:
				have = kv.Lease
			}
		}
		switch c.Target {
		case pb.Compare_VERSION:
			want = c.GetVersion()
		case pb.Compare_CREATE:
			want = c.GetCreateRevision()
		case pb.Compare_MOD:
			want = c.GetModRevision()
		case pb.Compare_LEASE:
			want = c.GetLease()
		}
		switch {
		case have < want:
			cmp = -1
		case have > want:
			cmp = 1
		}
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return cmp == 0
	case pb.Compare_NOT_EQUAL:
		return cmp != 0
	case pb.Compare_GREATER:
		return cmp > 0
	default:
		return cmp < 0
	}
}

func (f *fakeBackend) txnLocked(w *writer, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	ok := true
	for _, c := range r.Compare {
		ok = ok && f.compare(c)
	}
	ops := r.Success
	if !ok {
		ops = r.Failure
	}
	resp := &pb.TxnResponse{Succeeded: ok}
	for _, op := range ops {
		switch {
		case op.GetRequestRange() != nil:
			rr, err := f.rangeLocked(op.GetRequestRange())
			if err != nil {
				return nil, err
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}})
		case op.GetRequestPut() != nil:
			pr, err := w.put(op.GetRequestPut())
			if err != nil {
				return nil, err
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: pr}})
		case op.GetRequestDeleteRange() != nil:
			dr := w.del(op.GetRequestDeleteRange())
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}})
		case op.GetRequestTxn() != nil:
			tr, err := f.txnLocked(w, op.GetRequestTxn())
			if err != nil {
				return nil, err
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}})
		}
	}
	return resp, nil
}

func (f *fakeBackend) Txn(_ context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.newWriter()
	resp, err := f.txnLocked(w, r)
	if err != nil {
		return nil, err
	}
	w.done()
	resp.Header = &pb.ResponseHeader{Revision: f.rev}
	return resp, nil
}

func (f *fakeBackend) Compact(_ context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Revision <= f.compact {
		return nil, mvcc.ErrCompacted
	}
	if r.Revision > f.rev {
		return nil, mvcc.ErrFutureRev
	}
	f.compact = r.Revision
	f.commitLocked()
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: f.rev}}, nil
}

func (f *fakeBackend) LeaseGrant(_ context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.ID
	if id == 0 {
		f.nextLease++
		id = 1000 + f.nextLease
	}
	if _, ok := f.leases[id]; ok {
		return nil, engine.ErrLeaseExist
	}
	f.leases[id] = r.TTL
	return &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: f.rev}, ID: id, TTL: r.TTL}, nil
}

func (f *fakeBackend) LeaseRevoke(_ context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.leases[r.ID]; !ok {
		return nil, engine.ErrLeaseNotFound
	}
	delete(f.leases, r.ID)
	return &pb.LeaseRevokeResponse{Header: &pb.ResponseHeader{Revision: f.rev}}, nil
}

func (f *fakeBackend) LeaseRenew(_ context.Context, id int64) (int64, error) {
	if err := f.failing(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ttl, ok := f.leases[id]
	if !ok {
		return 0, engine.ErrLeaseNotFound
	}
	return ttl, nil
}

func (f *fakeBackend) LeaseTimeToLive(_ context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ttl, ok := f.leases[r.ID]
	if !ok {
		return nil, engine.ErrLeaseNotFound
	}
	return &pb.LeaseTimeToLiveResponse{Header: &pb.ResponseHeader{Revision: f.rev}, ID: r.ID, TTL: ttl, GrantedTTL: ttl}, nil
}

func (f *fakeBackend) LeaseLeases(context.Context, *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &pb.LeaseLeasesResponse{Header: &pb.ResponseHeader{Revision: f.rev}}
	for id := range f.leases {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	return resp, nil
}

func (f *fakeBackend) CurrentRevision() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev
}

func (f *fakeBackend) CompactRevision() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.compact
}

func (f *fakeBackend) CommitNotify() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notify
}

func (f *fakeBackend) Events(from, to int64, limit int) ([]*mvccpb.Event, int64, error) {
	f.mu.Lock()
	hook := f.eventsHook
	f.eventsCalls++
	f.mu.Unlock()
	if hook != nil {
		hook(from, to)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if from < f.compact {
		return nil, 0, mvcc.ErrCompacted
	}
	i := sort.Search(len(f.events), func(i int) bool { return f.events[i].Kv.ModRevision >= from })
	var out []*mvccpb.Event
	for ; i < len(f.events); i++ {
		ev := f.events[i]
		rev := ev.Kv.ModRevision
		if rev > to {
			break
		}
		if limit > 0 && len(out) >= limit && rev != out[len(out)-1].Kv.ModRevision {
			return out, rev, nil
		}
		out = append(out, ev)
	}
	return out, to + 1, nil
}

func (f *fakeBackend) Status(context.Context) (*pb.StatusResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &pb.StatusResponse{
		Header:         &pb.ResponseHeader{Revision: f.rev},
		Version:        "3.6.10",
		StorageVersion: "3.6.0",
		DbSize:         4096,
		Leader:         testMemberID,
		RaftIndex:      uint64(f.rev),
		RaftTerm:       testTerm,
	}, nil
}

func (f *fakeBackend) Alarm(_ context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	if r.Action == pb.AlarmRequest_ACTIVATE && r.Alarm == pb.AlarmType_CORRUPT {
		return nil, fmt.Errorf("%w: only NOSPACE", engine.ErrAlarmNotSupported)
	}
	return &pb.AlarmResponse{}, nil
}

func (f *fakeBackend) Hash(context.Context) (*pb.HashResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	return &pb.HashResponse{Hash: 42}, nil
}

func (f *fakeBackend) HashKV(_ context.Context, rev int64) (*pb.HashKVResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	return &pb.HashKVResponse{Hash: uint32(rev), CompactRevision: f.CompactRevision()}, nil
}

func (f *fakeBackend) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	if err := f.failing(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	data := f.snap
	f.mu.Unlock()
	n, err := w.Write(data)
	return int64(n), err
}

func (f *fakeBackend) MemberList(context.Context) (*pb.MemberListResponse, error) {
	if err := f.failing(); err != nil {
		return nil, err
	}
	return &pb.MemberListResponse{Members: []*pb.Member{{
		ID: testMemberID, Name: "n1",
		PeerURLs: []string{"https://127.0.0.1:2380"}, ClientURLs: []string{"http://127.0.0.1:2379"},
	}}}, nil
}

func (f *fakeBackend) MemberRemove(_ context.Context, id uint64) (*pb.MemberRemoveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
	if f.memberErr != nil {
		return nil, f.memberErr
	}
	return &pb.MemberRemoveResponse{Members: []*pb.Member{{ID: testMemberID, Name: "n1"}}}, nil
}

func (f *fakeBackend) MoveLeader(_ context.Context, id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moved = append(f.moved, id)
	return f.memberErr
}

func (f *fakeBackend) Identity() (uint64, uint64, uint64) {
	return testClusterID, testMemberID, testTerm
}
