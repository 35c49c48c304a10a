package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// A forwarded write's entry carries its request id, the committed entry is
// found by it (with its index, revision, ops and txn branches), and after
// a restart the replayed log answers the same.
func TestForwardedRequestIDIsLoggedAndFound(t *testing.T) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, nil)
	h.put("a", "0")
	id := RequestID{Member: 7, Seq: 41}
	resp, err := h.e.Put(WithRequestID(ctx(t), id), &pb.PutRequest{Key: []byte("a"), Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	tid := RequestID{Member: 7, Seq: 42}
	tx := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("nope")}}},
		Success: []*pb.RequestOp{txnPut("b", "x")},
		Failure: []*pb.RequestOp{txnPut("c", "y")},
	}
	if _, err := h.e.Txn(WithRequestID(ctx(t), tid), tx); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		got, ok, from := h.e.LookupRequest(id)
		if !ok || got.Revision != resp.Header.Revision || got.Puts != 1 || got.Deletes != 0 || got.Before() != resp.Header.Revision-1 {
			t.Fatalf("%s: lookup = %+v, %v", when, got, ok)
		}
		if from != 1 {
			t.Fatalf("%s: complete from %d, want 1", when, from)
		}
		tg, ok, _ := h.e.LookupRequest(tid)
		if !ok || tg.TxnPath != "\x00" || tg.Puts != 1 {
			t.Fatalf("%s: txn lookup = %+v, %v", when, tg, ok)
		}
		if _, ok, _ := h.e.LookupRequest(RequestID{Member: 7, Seq: 43}); ok {
			t.Fatalf("%s: an id never sent was found", when)
		}
	}
	check("live")
	h.reopen()
	check("after restart")
}

// A request sent again whose first sending is logged is refused without
// being applied: the revision does not move.
func TestDuplicateForwardedRequestNotAppliedTwice(t *testing.T) {
	h := newHarness(t, nil, nil)
	id := RequestID{Member: 7, Seq: 1}
	r := &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}
	if _, err := h.e.Put(WithRequestID(ctx(t), id), r); err != nil {
		t.Fatal(err)
	}
	rev := h.e.CurrentRevision()
	if _, err := h.e.Put(WithRequestID(ctx(t), id), r); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("second sending: err = %v, want ErrDuplicateRequest", err)
	}
	if got := h.e.CurrentRevision(); got != rev {
		t.Fatalf("revision moved from %d to %d: applied twice", rev, got)
	}
}

// Ids past the count or age bound are dropped, and the index then says its
// answer is complete only after the dropped ones.
func TestRequestIndexBoundsReportCompleteness(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.e.reqs.mu.Lock()
	h.e.reqs.maxCount, h.e.reqs.maxAge = 2, time.Minute
	h.e.reqs.mu.Unlock()
	for i := uint64(1); i <= 3; i++ {
		if _, err := h.e.Put(WithRequestID(ctx(t), RequestID{Member: 1, Seq: i}), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, from := h.e.LookupRequest(RequestID{Member: 1, Seq: 1}); ok || from != 2 {
		t.Fatalf("count bound: found=%v complete from %d, want dropped and complete from 2", ok, from)
	}
	if _, ok, _ := h.e.LookupRequest(RequestID{Member: 1, Seq: 3}); !ok {
		t.Fatal("newest id dropped")
	}
	h.clk.Advance(2 * time.Minute)
	if _, ok, from := h.e.LookupRequest(RequestID{Member: 1, Seq: 3}); ok || from != 4 {
		t.Fatalf("age bound: found=%v complete from %d, want dropped and complete from 4", ok, from)
	}
}

// A request sent again while its first sending is appended but not yet
// durable is refused too: the first may still commit.
func TestDuplicateOfPendingForwardedRequestRefused(t *testing.T) {
	st := &enginetest.MemStorage{Manual: true}
	h := newHarness(t, st, nil)
	id := RequestID{Member: 7, Seq: 1}
	r := &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}
	first := make(chan error, 1)
	go func() {
		_, err := h.e.Put(WithRequestID(context.Background(), id), r)
		first <- err
	}()
	waitFor(t, func() bool { return st.Len() == 1 })
	if _, err := h.e.Put(WithRequestID(ctx(t), id), r); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("second sending while the first is pending: err = %v, want ErrDuplicateRequest", err)
	}
	if st.Len() != 1 {
		t.Fatalf("the log holds %d entries, want the first sending's only", st.Len())
	}
	st.SyncAll()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := h.e.LookupRequest(id); !ok {
		t.Fatal("the committed first sending is not indexed")
	}
}

// The ring keeps the newest maxCount ids through growth and wrap-around.
func TestRequestIndexRingKeepsNewest(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	x := newReqIndex(clk)
	x.maxCount = 1500
	x.reset(0)
	for i := uint64(1); i <= 4000; i++ {
		x.observe(&netsyv1.Entry{Index: i, Revision: int64(i) + 1, RequestId: &netsyv1.RequestID{Member: 1, Seq: i}})
	}
	for i := uint64(1); i <= 4000; i++ {
		lr, ok, from := x.lookup(RequestID{Member: 1, Seq: i})
		if want := i > 2500; ok != want || (ok && lr.Index != i) || from != 2501 {
			t.Fatalf("id %d: found=%v at %d, complete from %d; want found=%v, complete from 2501", i, ok, lr.Index, from, want)
		}
	}
}

// Ids are mapped when a lookup asks, not when observed: lookups between
// observations find every kept id, dropped ones leave the map with the
// ring, so the map never holds more than the ring.
func TestRequestIndexMapsOnLookupAndStaysBounded(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	x := newReqIndex(clk)
	x.maxCount = 100
	x.reset(0)
	for i := uint64(1); i <= 1000; i++ {
		x.observe(&netsyv1.Entry{Index: i, Revision: int64(i) + 1, RequestId: &netsyv1.RequestID{Member: 1, Seq: i}})
		if i%7 == 0 {
			if lr, ok, _ := x.lookup(RequestID{Member: 1, Seq: i - 3}); !ok || lr.Index != i-3 {
				t.Fatalf("after %d: id %d found=%v at %d", i, i-3, ok, lr.Index)
			}
		}
		if len(x.ids) > x.n {
			t.Fatalf("after %d: the map holds %d ids, the ring %d", i, len(x.ids), x.n)
		}
	}
	for i := uint64(1); i <= 1000; i++ {
		if _, ok, _ := x.lookup(RequestID{Member: 1, Seq: i}); ok != (i > 900) {
			t.Fatalf("id %d: found=%v, want %v", i, ok, i > 900)
		}
	}
}

// A first sending (WithNewRequestID) is logged and indexed as any forwarded
// write, but not looked up: the index's map stays empty until someone
// asks, and a later sending of the same id (WithRequestID) is refused.
func TestNewRequestIDSkipsTheDuplicateLookup(t *testing.T) {
	h := newHarness(t, nil, nil)
	r := &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}
	for i := uint64(1); i <= 3; i++ {
		if _, err := h.e.Put(WithNewRequestID(ctx(t), RequestID{Member: 7, Seq: i}), r); err != nil {
			t.Fatal(err)
		}
	}
	h.e.reqs.mu.Lock()
	mapped, ids := h.e.reqs.mapped, len(h.e.reqs.ids)
	h.e.reqs.mu.Unlock()
	if mapped != 0 || ids != 0 {
		t.Fatalf("request index mapped %d ids (up to %d): a new id was looked up", ids, mapped)
	}
	rev := h.e.CurrentRevision()
	if _, err := h.e.Put(WithRequestID(ctx(t), RequestID{Member: 7, Seq: 2}), r); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("second sending: err = %v, want ErrDuplicateRequest", err)
	}
	if got, ok, _ := h.e.LookupRequest(RequestID{Member: 7, Seq: 3}); !ok || got.Revision != rev {
		t.Fatalf("lookup = %+v, %v; want the entry at %d", got, ok, rev)
	}
}

// The request id's context is its parent's: cancelling the parent cancels
// a context made from it, and other values pass through.
func TestRequestIDContextFollowsItsParent(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	c := WithNewRequestID(parent, RequestID{Member: 1, Seq: 2})
	child, stop := context.WithTimeout(c, time.Hour)
	defer stop()
	if c.Value(key{}) != "v" {
		t.Fatal("parent's value lost")
	}
	if id, fresh := requestIDFrom(child); id != (RequestID{Member: 1, Seq: 2}) || !fresh {
		t.Fatalf("id %v fresh %v", id, fresh)
	}
	// Cancelled at once, not by a goroutine the context package starts
	// for a parent it does not know.
	cancel()
	if child.Err() == nil {
		t.Fatal("child not cancelled with the parent")
	}
}

// A first sending's new id (WithNewRequestID) is kept out of the pending
// ids' map, yet a sending again of it (WithRequestID) while the first is
// appended but not durable is still refused: pending entries with new
// ids are counted, all of one member's, and scanned when that member asks.
// A new id of another member meanwhile, and forwarded ids, go to the map
// as before; nothing is refused that is not logged.
func TestResentNewRequestRefusedWhileItsFirstSendingIsPending(t *testing.T) {
	st := &enginetest.MemStorage{Manual: true}
	h := newHarness(t, st, nil)
	r := &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}
	mine, other, fwd := RequestID{Member: 7, Seq: 1}, RequestID{Member: 8, Seq: 1}, RequestID{Member: 9, Seq: 1}
	var sent []chan error
	send := func(c context.Context) {
		ch := make(chan error, 1)
		sent = append(sent, ch)
		go func() {
			_, err := h.e.Put(c, r)
			ch <- err
		}()
		waitFor(t, func() bool { return st.Len() == len(sent) })
	}
	send(WithNewRequestID(context.Background(), mine))
	send(WithNewRequestID(context.Background(), other))
	send(WithRequestID(context.Background(), fwd))
	loopInt := func(f func() int) (n int) {
		if err := h.e.inLoop(ctx(t), func() { n = f() }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got, want := loopInt(func() int { return len(h.e.pendingIDs) }), 2; got != want {
		t.Fatalf("%d ids in the pending map, want %d (the other member's new id and the forwarded one)", got, want)
	}
	for _, id := range []RequestID{mine, other, fwd} {
		if _, err := h.e.Put(WithRequestID(ctx(t), id), r); !errors.Is(err, ErrDuplicateRequest) {
			t.Fatalf("%+v sent again while pending: err = %v, want ErrDuplicateRequest", id, err)
		}
	}
	// The same member's next request is no duplicate.
	send(WithRequestID(context.Background(), RequestID{Member: 7, Seq: 2}))
	st.SyncAll()
	for i, ch := range sent {
		if err := <-ch; err != nil {
			t.Fatalf("sending %d: %v", i, err)
		}
	}
	if _, err := h.e.Put(WithRequestID(ctx(t), mine), r); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("sent again once committed: err = %v, want ErrDuplicateRequest", err)
	}
	if n := loopInt(func() int { return h.e.freshN + len(h.e.pendingIDs) }); n != 0 {
		t.Fatalf("%d pending ids left after every entry committed", n)
	}
}
