package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/engine/enginetest"
)

// etcd_server_proposals_pending and etcd_debugging_mvcc_keys_total: an
// entry appended but not durable is pending until durable; the key counts
// once the write is evaluated (the store holds it, invisible to readers
// until committed).
func TestPendingAndKeysFollowDurability(t *testing.T) {
	st := &enginetest.MemStorage{Manual: true}
	h := newHarness(t, st, nil)
	if p, k := h.e.Pending(), h.e.Keys(); p != 0 || k != 0 {
		t.Fatalf("fresh engine: pending %d keys %d, want 0 0", p, k)
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.e.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		done <- err
	}()
	waitFor(t, func() bool { return st.Len() == 1 })
	waitFor(t, func() bool { return h.e.Pending() == 1 })
	committed := h.e.KnownCommitted()
	st.SyncAll()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p, k := h.e.Pending(), h.e.Keys(); p != 0 || k != 1 {
		t.Fatalf("after sync: pending %d keys %d, want 0 1", p, k)
	}
	if c := h.e.KnownCommitted(); c != committed+1 || c != h.e.CommittedIndex() {
		t.Fatalf("known committed %d (was %d, applied %d), want one more, equal to applied", c, committed, h.e.CommittedIndex())
	}
}

// etcd_server_proposals_failed_total counts writes that failed after the
// loop took them (timeout, storage failure), not writes answered with an
// error about their content.
func TestWritesFailedCountsFailuresNotAnswers(t *testing.T) {
	st := &enginetest.MemStorage{Manual: true}
	h := newHarness(t, st, func(c *Config) { c.WriteTimeout = time.Second })

	// A content error: put with IgnoreValue on a missing key.
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("missing"), IgnoreValue: true}); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("ignore_value on a missing key: %v, want ErrKeyNotFound", err)
	}
	if n := h.e.WritesFailed(); n != 0 {
		t.Fatalf("failed = %d after a content error, want 0", n)
	}

	// A timeout: appended, never durable.
	errc := make(chan error, 1)
	go func() {
		_, err := h.e.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		errc <- err
	}()
	waitFor(t, func() bool { return st.Len() == 1 })
	if err := h.clk.BlockUntil(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(time.Second)
	if err := <-errc; !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if n := h.e.WritesFailed(); n != 1 {
		t.Fatalf("failed = %d after a timeout, want 1", n)
	}
	st.SyncAll()

	// A storage failure refuses the writes that follow.
	st.Fail(errors.New("disk full"))
	defer st.Fail(nil)
	for range 2 {
		if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("a"), Value: []byte("2")}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("put on failed storage: %v", err)
		}
	}
	if n := h.e.WritesFailed(); n != 3 {
		t.Fatalf("failed = %d after two writes on failed storage, want 3", n)
	}
	// Reads never count.
	if _, err := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if n := h.e.WritesFailed(); n != 3 {
		t.Fatalf("failed = %d after a read, want 3", n)
	}
}
