package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/internal/mvcc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type harness struct {
	t     *testing.T
	st    *enginetest.MemStorage
	clk   *clock.Fake
	e     *Engine
	extra func(*Config)
}

func newHarness(t *testing.T, st *enginetest.MemStorage, extra func(*Config)) *harness {
	t.Helper()
	if st == nil {
		st = &enginetest.MemStorage{}
	}
	h := &harness{t: t, st: st, clk: clock.NewFake(time.Unix(1_700_000_000, 0)), extra: extra}
	h.open()
	t.Cleanup(func() { h.e.Close() })
	return h
}

func (h *harness) open() {
	cfg := Config{Storage: h.st, Clock: h.clk, ClusterID: 1, MemberID: 2}
	if h.extra != nil {
		h.extra(&cfg)
	}
	e, err := Open(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.e = e
}

// reopen simulates a restart on the same storage.
func (h *harness) reopen() {
	h.e.Close()
	h.open()
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func (h *harness) put(k, v string, opts ...func(*pb.PutRequest)) *pb.PutResponse {
	h.t.Helper()
	r := &pb.PutRequest{Key: []byte(k), Value: []byte(v)}
	for _, o := range opts {
		o(r)
	}
	resp, err := h.e.Put(ctx(h.t), r)
	if err != nil {
		h.t.Fatalf("put %s: %v", k, err)
	}
	return resp
}

func (h *harness) get(k string, rev int64) *pb.RangeResponse {
	h.t.Helper()
	resp, err := h.e.Range(ctx(h.t), &pb.RangeRequest{Key: []byte(k), Revision: rev})
	if err != nil {
		h.t.Fatalf("get %s@%d: %v", k, rev, err)
	}
	return resp
}

func (h *harness) value(k string) string {
	h.t.Helper()
	r := h.get(k, 0)
	if len(r.Kvs) == 0 {
		return "<none>"
	}
	return string(r.Kvs[0].Value)
}

func TestPutGetRevisions(t *testing.T) {
	h := newHarness(t, nil, nil)
	for i := 1; i <= 3; i++ {
		resp := h.put("a", fmt.Sprint(i))
		if resp.Header.Revision != int64(i)+1 {
			t.Fatalf("put %d: header rev %d", i, resp.Header.Revision)
		}
	}
	r := h.get("a", 0)
	kv := r.Kvs[0]
	// A fresh store is at revision 1, as etcd's: the first write gets 2.
	if string(kv.Value) != "3" || kv.CreateRevision != 2 || kv.ModRevision != 4 || kv.Version != 3 || r.Header.Revision != 4 {
		t.Fatalf("unexpected kv %+v header %d", kv, r.Header.Revision)
	}
	if got := string(h.get("a", 3).Kvs[0].Value); got != "2" {
		t.Fatalf("historic read = %q", got)
	}
	if _, err := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte("a"), Revision: 5}); !errors.Is(err, mvcc.ErrFutureRev) {
		t.Fatalf("future rev err = %v", err)
	}
}

func TestWritesInvisibleUntilDurable(t *testing.T) {
	st := &enginetest.MemStorage{Manual: true}
	h := newHarness(t, st, nil)
	done := make(chan *pb.PutResponse, 1)
	go func() {
		resp, err := h.e.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	// Wait until the entry reached storage, then check it is not visible.
	waitFor(t, func() bool { return st.Len() == 1 })
	if v := h.value("k"); v != "<none>" {
		t.Fatalf("undurable write visible: %q", v)
	}
	if h.e.CurrentRevision() != 1 {
		t.Fatalf("committed rev moved before sync")
	}
	select {
	case <-done:
		t.Fatal("acknowledged before durable")
	default:
	}
	st.SyncAll()
	resp := <-done
	if resp.Header.Revision != 2 || h.value("k") != "v" {
		t.Fatalf("after sync: rev %d value %q", resp.Header.Revision, h.value("k"))
	}
}

func TestDeleteAndNoopDelete(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.put("a/1", "x")
	h.put("a/2", "y")
	h.put("b", "z")
	resp, err := h.e.DeleteRange(ctx(t), &pb.DeleteRangeRequest{Key: []byte("a/"), RangeEnd: []byte("a0"), PrevKv: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted != 2 || len(resp.PrevKvs) != 2 || resp.Header.Revision != 5 {
		t.Fatalf("delete resp %+v", resp)
	}
	resp, err = h.e.DeleteRange(ctx(t), &pb.DeleteRangeRequest{Key: []byte("nope")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted != 0 || resp.Header.Revision != 5 {
		t.Fatalf("no-op delete bumped revision: %+v", resp)
	}
	evs, _, err := h.e.Events(5, 5, 0)
	if err != nil || len(evs) != 2 || evs[0].Type != mvccpb.DELETE {
		t.Fatalf("delete events %v %v", evs, err)
	}
}

func TestPutIgnoreValueAndLeaseErrors(t *testing.T) {
	h := newHarness(t, nil, nil)
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("k"), IgnoreValue: true}); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("ignore_value on missing key: %v", err)
	}
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("k"), Lease: 99}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("unknown lease: %v", err)
	}
	h.put("k", "v1")
	h.put("k", "", func(r *pb.PutRequest) { r.IgnoreValue = true; r.PrevKv = true })
	if h.value("k") != "v1" {
		t.Fatalf("ignore_value changed the value: %q", h.value("k"))
	}
	if h.e.CurrentRevision() != 3 {
		t.Fatalf("rev = %d", h.e.CurrentRevision())
	}
}

func txnPut(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func txnGet(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
}

func TestTxnCompareBranchesAndOwnWrites(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.put("x", "1")
	cmpVal := &pb.Compare{Key: []byte("x"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("1")}}
	resp, err := h.e.Txn(ctx(t), &pb.TxnRequest{
		Compare: []*pb.Compare{cmpVal},
		Success: []*pb.RequestOp{txnPut("x", "2"), txnPut("y", "2"), txnGet("x"),
			{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{txnPut("z", "3")}}}}},
		Failure: []*pb.RequestOp{txnGet("x")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Succeeded || resp.Header.Revision != 3 {
		t.Fatalf("txn resp %+v", resp)
	}
	if got := resp.Responses[2].GetResponseRange().Kvs[0]; string(got.Value) != "2" || got.ModRevision != 3 {
		t.Fatalf("txn read did not see its own write: %+v", got)
	}
	evs, _, _ := h.e.Events(3, 3, 0)
	if len(evs) != 3 {
		t.Fatalf("one revision should carry all three puts, got %d events", len(evs))
	}
	// The compare now fails: the failure branch is read-only and must not
	// move the revision.
	resp, err = h.e.Txn(ctx(t), &pb.TxnRequest{Compare: []*pb.Compare{cmpVal}, Success: []*pb.RequestOp{txnPut("x", "9")}, Failure: []*pb.RequestOp{txnGet("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded || resp.Header.Revision != 3 || h.e.CurrentRevision() != 3 {
		t.Fatalf("failed compare: %+v rev %d", resp, h.e.CurrentRevision())
	}
	// Missing key: version compares as 0, value compare is false.
	missingVer := &pb.Compare{Key: []byte("nope"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 0}}
	missingVal := &pb.Compare{Key: []byte("nope"), Target: pb.Compare_VALUE, Result: pb.Compare_NOT_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("a")}}
	resp, _ = h.e.Txn(ctx(t), &pb.TxnRequest{Compare: []*pb.Compare{missingVer}})
	if !resp.Succeeded {
		t.Fatal("version == 0 on a missing key should hold")
	}
	resp, _ = h.e.Txn(ctx(t), &pb.TxnRequest{Compare: []*pb.Compare{missingVal}})
	if resp.Succeeded {
		t.Fatal("value compare on a missing key should be false")
	}
}

func TestTxnErrorLeavesNoTrace(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.put("a", "1")
	_, err := h.e.Txn(ctx(t), &pb.TxnRequest{Success: []*pb.RequestOp{
		txnPut("a", "2"),
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Lease: 12345}}},
	}})
	if !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("err = %v", err)
	}
	if h.value("a") != "1" || h.e.CurrentRevision() != 2 {
		t.Fatalf("failed txn left a trace: a=%q rev=%d", h.value("a"), h.e.CurrentRevision())
	}
	h.put("c", "3")
	if h.e.CurrentRevision() != 3 {
		t.Fatalf("revision after a failed txn = %d, want 3 (dense)", h.e.CurrentRevision())
	}
}

func TestCompact(t *testing.T) {
	h := newHarness(t, nil, nil)
	for i := 0; i < 5; i++ {
		h.put("k", fmt.Sprint(i))
	}
	if _, err := h.e.Compact(ctx(t), &pb.CompactionRequest{Revision: 10}); !errors.Is(err, mvcc.ErrFutureRev) {
		t.Fatalf("future compact: %v", err)
	}
	if _, err := h.e.Compact(ctx(t), &pb.CompactionRequest{Revision: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Compact(ctx(t), &pb.CompactionRequest{Revision: 3}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Fatalf("repeat compact: %v", err)
	}
	if _, err := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte("k"), Revision: 2}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Fatalf("read below floor: %v", err)
	}
	if h.e.CompactRevision() != 3 || h.e.CurrentRevision() != 6 {
		t.Fatalf("compact rev %d current %d", h.e.CompactRevision(), h.e.CurrentRevision())
	}
	h.reopen()
	if h.e.CompactRevision() != 3 {
		t.Fatalf("compaction lost on restart: %d", h.e.CompactRevision())
	}
	if _, err := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte("k"), Revision: 2}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Fatalf("read below floor after restart: %v", err)
	}
}

func TestLeaseLifecycle(t *testing.T) {
	h := newHarness(t, nil, nil)
	g, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 2 || g.ID == 0 {
		t.Fatalf("grant %+v: want TTL raised to the 2 s minimum", g)
	}
	if g.Header.Revision != 1 {
		t.Fatalf("grant moved the revision to %d", g.Header.Revision)
	}
	if _, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{ID: g.ID, TTL: 5}); !errors.Is(err, ErrLeaseExist) {
		t.Fatalf("duplicate grant: %v", err)
	}
	h.put("l1", "v", func(r *pb.PutRequest) { r.Lease = g.ID })
	h.put("l2", "v", func(r *pb.PutRequest) { r.Lease = g.ID })
	ttl, err := h.e.LeaseTimeToLive(ctx(t), &pb.LeaseTimeToLiveRequest{ID: g.ID, Keys: true})
	if err != nil || len(ttl.Keys) != 2 || ttl.GrantedTTL != 2 {
		t.Fatalf("ttl %+v %v", ttl, err)
	}
	// Keep it alive past its TTL, then let it expire.
	h.clk.Advance(1500 * time.Millisecond)
	if _, err := h.e.LeaseRenew(ctx(t), g.ID); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(1500 * time.Millisecond)
	if h.value("l1") != "v" {
		t.Fatal("renewed lease's key vanished")
	}
	h.clk.Advance(time.Second)
	waitFor(t, func() bool { return h.value("l1") == "<none>" && h.value("l2") == "<none>" })
	if _, err := h.e.LeaseRenew(ctx(t), g.ID); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("renew after expiry: %v", err)
	}
	evs, _, _ := h.e.Events(h.e.CurrentRevision(), h.e.CurrentRevision(), 0)
	if len(evs) != 2 || evs[0].Type != mvccpb.DELETE {
		t.Fatalf("expiry should delete both keys in one revision: %v", evs)
	}
}

func TestLeaseRevokeAndRestart(t *testing.T) {
	h := newHarness(t, nil, nil)
	g1, _ := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{ID: 7, TTL: 60})
	g2, _ := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{ID: 8, TTL: 60})
	h.put("a", "1", func(r *pb.PutRequest) { r.Lease = g1.ID })
	h.put("b", "1", func(r *pb.PutRequest) { r.Lease = g2.ID })
	// Moving a key to another lease detaches it from the first.
	h.put("a", "2", func(r *pb.PutRequest) { r.Lease = g2.ID })
	h.reopen()
	ls, _ := h.e.LeaseLeases(ctx(t), &pb.LeaseLeasesRequest{})
	if len(ls.Leases) != 2 {
		t.Fatalf("leases after restart: %v", ls.Leases)
	}
	if _, err := h.e.LeaseRevoke(ctx(t), &pb.LeaseRevokeRequest{ID: g1.ID}); err != nil {
		t.Fatal(err)
	}
	if h.value("a") != "2" {
		t.Fatal("revoking the old lease deleted a key that moved away from it")
	}
	if _, err := h.e.LeaseRevoke(ctx(t), &pb.LeaseRevokeRequest{ID: g2.ID}); err != nil {
		t.Fatal(err)
	}
	if h.value("a") != "<none>" || h.value("b") != "<none>" {
		t.Fatal("revoke left keys behind")
	}
	if _, err := h.e.LeaseRevoke(ctx(t), &pb.LeaseRevokeRequest{ID: g2.ID}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("double revoke: %v", err)
	}
}

func TestRestartFromSnapshotAndLog(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testRestartFromSnapshotAndLog(t, "") })
	t.Run("spill", func(t *testing.T) { testRestartFromSnapshotAndLog(t, t.TempDir()) })
}

func testRestartFromSnapshotAndLog(t *testing.T, spillDir string) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, func(c *Config) { c.SnapshotEntries, c.SpillDir, c.SpillMin = 10, spillDir, 1 })
	for i := 0; i < 25; i++ {
		h.put(fmt.Sprintf("k%02d", i%7), fmt.Sprint(i))
	}
	h.e.Compact(ctx(t), &pb.CompactionRequest{Revision: 5})
	waitFor(t, st.HasSnapshot)
	before, _ := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	hashBefore, _ := h.e.HashKV(ctx(t), 0)
	h.reopen()
	after, _ := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	hashAfter, _ := h.e.HashKV(ctx(t), 0)
	if !sameMessage(t, before, after) {
		t.Fatalf("state differs after restart:\n%v\n%v", before, after)
	}
	if hashBefore.Hash != hashAfter.Hash {
		t.Fatalf("history hash differs after restart")
	}
	if h.e.CurrentRevision() != 26 {
		t.Fatalf("rev after restart %d", h.e.CurrentRevision())
	}
	h.put("new", "x")
	if h.e.CurrentRevision() != 27 {
		t.Fatalf("rev after restart+put %d", h.e.CurrentRevision())
	}
}

// Values the store keeps in its spill files reach every reader: ranges,
// prev_kv, watch replay and the snapshot a client downloads.
func TestSpilledValues(t *testing.T) {
	h := newHarness(t, nil, func(c *Config) { c.SpillDir, c.SpillMin = t.TempDir(), 4 })
	h.put("a", "first")
	h.put("b", "in")
	resp := h.put("a", "second", func(r *pb.PutRequest) { r.PrevKv = true })
	if resp.PrevKv == nil || string(resp.PrevKv.Value) != "first" {
		t.Fatalf("prev_kv %v", resp.PrevKv)
	}
	if h.value("a") != "second" || h.value("b") != "in" || string(h.get("a", 2).Kvs[0].Value) != "first" {
		t.Fatal("range lost a value")
	}
	evs, _, err := h.e.Events(2, 100, 0)
	if err != nil || len(evs) != 3 || evs[2].PrevKv == nil || string(evs[2].PrevKv.Value) != "first" || string(evs[2].Kv.Value) != "second" {
		t.Fatalf("events %v %v", evs, err)
	}
	tr, err := h.e.Txn(ctx(t), &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE,
		Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("second")}}}})
	if err != nil || !tr.Succeeded {
		t.Fatalf("value compare: %v %v", tr, err)
	}
	var buf bytes.Buffer
	if _, err := h.e.Snapshot(ctx(t), &buf); err != nil {
		t.Fatal(err)
	}
	snap, err := datafile.DecodeSnapshot("snapshot", &buf)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, kv := range snap.KVs {
		vals = append(vals, string(kv.Value))
	}
	if !slices.Equal(vals, []string{"first", "in", "second"}) {
		t.Fatalf("snapshot values %q", vals)
	}
	// A delete with prev_kv answers with the deleted value, read back.
	h.put("d", "spilled")
	dr, err := h.e.DeleteRange(ctx(t), &pb.DeleteRangeRequest{Key: []byte("d"), PrevKv: true})
	if err != nil || dr.Deleted != 1 || len(dr.PrevKvs) != 1 || string(dr.PrevKvs[0].Value) != "spilled" {
		t.Fatalf("delete with prev_kv: %v %v", dr, err)
	}
	// A value that can no longer be read back fails the engine's writes.
	if err := h.e.store.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("a"), Value: []byte("third")}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write after losing a spilled value: %v", err)
	}
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("c")}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("later write: %v", err)
	}
}

func TestStorageFailureRefusesWrites(t *testing.T) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, nil)
	h.put("a", "1")
	st.Fail(errors.New("disk full"))
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("a"), Value: []byte("2")}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put on failed storage: %v", err)
	}
	if h.value("a") != "1" {
		t.Fatal("failed write became visible")
	}
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("b")}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write after a storage failure: %v, want ErrUnavailable", err)
	}
	st.Fail(nil)
}

func TestConcurrentWritersDenseRevisions(t *testing.T) {
	h := newHarness(t, nil, nil)
	var wg sync.WaitGroup
	const writers, each = 8, 50
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := h.e.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("w%d", w)), Value: []byte(fmt.Sprint(i))}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if h.e.CurrentRevision() != writers*each+1 {
		t.Fatalf("rev %d, want %d", h.e.CurrentRevision(), writers*each+1)
	}
	evs, next, err := h.e.Events(1, h.e.CurrentRevision(), 0)
	if err != nil || len(evs) != writers*each || next != writers*each+2 {
		t.Fatalf("events %d next %d err %v", len(evs), next, err)
	}
	for i, ev := range evs {
		if ev.Kv.ModRevision != int64(i+2) {
			t.Fatalf("event %d at rev %d", i, ev.Kv.ModRevision)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sameMessage compares two etcd (gogo) messages by their encoding.
func sameMessage(t *testing.T, a, b interface{ Marshal() ([]byte, error) }) bool {
	t.Helper()
	ab, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	bb, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(ab) == string(bb)
}

// pressuredStorage refuses writes while busy is set.
type pressuredStorage struct {
	enginetest.MemStorage
	mu   sync.Mutex
	busy error
}

func (p *pressuredStorage) Backpressure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busy
}

func TestBackpressureRefusesWithoutApplying(t *testing.T) {
	st := &pressuredStorage{}
	clk := clock.NewFake(time.Unix(0, 0))
	e, err := Open(Config{Storage: st, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st.mu.Lock()
	st.busy = errors.New("object storage unreachable")
	st.mu.Unlock()
	if _, err := e.Put(ctx(t), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put under backpressure: %v", err)
	}
	st.mu.Lock()
	st.busy = nil
	st.mu.Unlock()
	resp, err := e.Put(ctx(t), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	if err != nil || resp.Header.Revision != 2 {
		t.Fatalf("put after backpressure cleared: %v %v", resp, err)
	}
}

func TestWriteTimeoutWhenNeverDurable(t *testing.T) {
	st := &enginetest.MemStorage{Manual: true}
	h := newHarness(t, st, func(c *Config) { c.WriteTimeout = time.Second })
	errc := make(chan error, 1)
	go func() {
		_, err := h.e.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		errc <- err
	}()
	// The write is appended but never synced; the loop's ticker (its only
	// timer) finds it past its deadline.
	waitFor(t, func() bool { return st.Len() == 1 })
	if err := h.clk.BlockUntil(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(time.Second - time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("writer answered before its deadline: %v", err)
	default:
	}
	h.clk.Advance(time.Millisecond)
	if err := <-errc; !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	// Durability arriving later still commits the write, as with etcd.
	st.SyncAll()
	waitFor(t, func() bool { return h.value("k") == "v" })
}

func TestNestedTxnComparesSeeStateBeforeTxn(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.put("b", "2")
	nested := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("b"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("2")}}},
		Success: []*pb.RequestOp{txnPut("then", "1")},
		Failure: []*pb.RequestOp{txnPut("else", "1")},
	}
	_, err := h.e.Txn(ctx(t), &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("b")}}},
		{Request: &pb.RequestOp_RequestTxn{RequestTxn: nested}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if h.value("then") != "1" || h.value("else") != "<none>" {
		t.Fatalf("nested compare judged after the outer delete: then=%q else=%q", h.value("then"), h.value("else"))
	}
}

// deposedErr is a storage failure that says another writer took over, as
// objwal's fence reports it.
type deposedErr struct{}

func (deposedErr) Error() string {
	return "fenced: wal/00000000000000000007 holds another writer's chunk"
}
func (deposedErr) Deposed() bool { return true }

// A deposed engine refuses writes, linearizable reads, watches (Events)
// and lease renewals at once, keeps serving serializable reads, and says
// why; an ordinary storage failure refuses only writes.
func TestDeposedStopsLinearizableService(t *testing.T) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, nil)
	h.put("a", "1")
	grant, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	notify := h.e.CommitNotify()
	st.Fail(fmt.Errorf("upload: %w", deposedErr{}))
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("b")}); !errors.Is(err, ErrDeposed) {
		t.Fatalf("write on a deposed engine: %v, want ErrDeposed", err)
	}
	select {
	case <-notify:
	default:
		t.Fatal("watchers waiting for a commit were not woken when the engine was deposed")
	}
	if _, err := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte("a")}); !errors.Is(err, ErrDeposed) {
		t.Fatalf("linearizable read: %v, want ErrDeposed", err)
	}
	resp, err := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte("a"), Serializable: true})
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("serializable read: %v, %v", resp, err)
	}
	rtxn := &pb.TxnRequest{Success: []*pb.RequestOp{txnGet("a")}}
	if _, err := h.e.Txn(ctx(t), rtxn); !errors.Is(err, ErrDeposed) {
		t.Fatalf("linearizable read-only txn: %v, want ErrDeposed", err)
	}
	rtxn.Success[0].GetRequestRange().Serializable = true
	if _, err := h.e.Txn(ctx(t), rtxn); err != nil {
		t.Fatalf("serializable read-only txn: %v", err)
	}
	if _, _, err := h.e.Events(1, 100, 0); !errors.Is(err, ErrDeposed) {
		t.Fatalf("watch read: %v, want ErrDeposed", err)
	}
	if _, err := h.e.LeaseRenew(ctx(t), grant.ID); !errors.Is(err, ErrDeposed) {
		t.Fatalf("lease renewal: %v, want ErrDeposed", err)
	}
	if err := h.e.Deposed(); err == nil || !strings.Contains(err.Error(), "wal/00000000000000000007") {
		t.Fatalf("Deposed() = %v, want the storage's reason", err)
	}
	st.Fail(nil)
}

func TestStorageFailureIsNotDeposed(t *testing.T) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, nil)
	h.put("a", "1")
	st.Fail(errors.New("disk full"))
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("b")}); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrDeposed) {
		t.Fatalf("write: %v", err)
	}
	if h.e.Deposed() != nil || h.e.Failed() == nil {
		t.Fatalf("Deposed %v, Failed %v", h.e.Deposed(), h.e.Failed())
	}
	if h.value("a") != "1" {
		t.Fatal("linearizable read after an ordinary storage failure")
	}
	st.Fail(nil)
}

// Writes racing Close and writes after it are answered (ErrStopped, or
// success for one taken before), never left waiting: the writer waits on
// its own proposal only, so a proposal queued after the loop left must be
// answered by the drain.
func TestWritesRacingCloseAreAnswered(t *testing.T) {
	h := newHarness(t, nil, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.e.Put(ctx(t), &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
			errs <- err
		}()
	}
	h.e.Close()
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.e.Put(ctx(t), &pb.PutRequest{Key: fmt.Appendf(nil, "late%d", i), Value: []byte("v")})
			if err == nil {
				err = errors.New("a put after Close succeeded")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, ErrStopped) {
			t.Errorf("put: %v, want nil or ErrStopped", err)
		}
	}
}

// bpStorage is a MemStorage whose backpressure a test sets.
type bpStorage struct {
	*enginetest.MemStorage
	mu  sync.Mutex
	err error
}

func (s *bpStorage) Backpressure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *bpStorage) set(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// The storage's backpressure refuses writes (ErrUnavailable) while it
// lasts and is asked again for the next batch the loop takes, so writes
// go through as soon as it lifts.
func TestBackpressureRefusesWritesUntilItLifts(t *testing.T) {
	st := &bpStorage{MemStorage: &enginetest.MemStorage{}}
	e, err := Open(Config{Storage: st, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)), ClusterID: 1, MemberID: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	put := func() error {
		_, err := e.Put(ctx(t), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		return err
	}
	if err := put(); err != nil {
		t.Fatal(err)
	}
	st.set(errors.New("backlog too large"))
	for range 3 {
		if err := put(); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("put under backpressure: %v, want ErrUnavailable", err)
		}
	}
	st.set(nil)
	if err := put(); err != nil {
		t.Fatalf("put once backpressure lifted: %v", err)
	}
}

// A writer that stops waiting (its context ended) leaves its answer
// channel behind: the answer still comes when the write commits, and must
// never reach a later writer, which would then return before its own
// write is durable (the channels are recycled, see doneChans).
func TestLateAnswerOfAnAbandonedWriteReachesNoOtherWriter(t *testing.T) {
	st := &enginetest.MemStorage{Manual: true}
	h := newHarness(t, st, nil)
	put := func(c context.Context) chan error {
		res := make(chan error, 1)
		go func() {
			_, err := h.e.Put(c, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
			res <- err
		}()
		return res
	}
	for round := range 20 {
		// A write whose writer gives up while it is pending.
		c, cancel := context.WithCancel(context.Background())
		abandoned := put(c)
		waitFor(t, func() bool { return st.Len() == 2*round+1 })
		cancel()
		if err := <-abandoned; !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: abandoned write: %v", round, err)
		}
		// Its answer comes now, with nobody waiting for it.
		st.SyncAll()
		waitFor(t, func() bool { return h.e.CommittedIndex() == uint64(2*round+1) })
		// The next write waits for its own durability.
		next := put(ctx(t))
		waitFor(t, func() bool { return st.Len() == 2*round+2 || len(next) > 0 })
		select {
		case err := <-next:
			t.Fatalf("round %d: a write answered (%v) before it was durable", round, err)
		default:
		}
		st.SyncAll()
		if err := <-next; err != nil {
			t.Fatal(err)
		}
	}
}
