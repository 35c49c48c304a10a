package engine

import (
	"errors"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/mvcc"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// A standing append watch is poked once per publish that follows an add,
// only while it is on, never blocks the loop on a full channel, and keeps
// a poke for a watcher that had not started waiting yet (it reads the log
// first, then waits: an append between the two must not be lost).
func TestAppendWatchPokesOncePerPassWhileOn(t *testing.T) {
	f := newFeed()
	ch := make(chan struct{}, 1)
	var on atomic.Bool
	stop := f.watch(ch, &on)
	poked := func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	f.add(&netsyv1.Entry{Index: 1})
	f.publish()
	if poked() {
		t.Fatal("poked while off")
	}
	on.Store(true)
	f.publish()
	if poked() {
		t.Fatal("poked by a publish with nothing added")
	}
	// The watcher read the log here; two passes append before it waits.
	f.add(&netsyv1.Entry{Index: 2})
	f.publish()
	f.add(&netsyv1.Entry{Index: 3})
	f.publish() // the channel is full: must not block
	if !poked() {
		t.Fatal("an append between the watcher's read and its wait was lost")
	}
	if poked() {
		t.Fatal("two pokes buffered for one watcher")
	}
	stop()
	f.add(&netsyv1.Entry{Index: 4})
	f.publish()
	if poked() {
		t.Fatal("poked after stop")
	}
}

// The engine pokes a watch after a Put's pass, the same channel each time.
func TestWatchAppendsAfterPuts(t *testing.T) {
	h := newHarness(t, nil, nil)
	ch := make(chan struct{}, 1)
	var on atomic.Bool
	on.Store(true)
	defer h.e.WatchAppends(ch, &on)()
	for i := range 3 {
		last, _, _ := h.e.LastAppended()
		h.put("k", "v")
		select {
		case <-ch:
		case <-ctx(t).Done():
			t.Fatalf("put %d (after index %d): no poke", i, last)
		}
	}
}

// The watch streams one commit wakes read the same revisions: they share
// one read of the store (the same events, not a copy each), a later
// commit is read afresh, and a compaction is never hidden by a kept read.
func TestEventsOfOneCommitAreReadOnceForEveryStream(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.put("a", "1")
	h.put("a", "2")
	cur := h.e.CurrentRevision()
	evs1, next1, err := h.e.Events(cur, cur, 1000)
	if err != nil || len(evs1) != 1 || string(evs1[0].Kv.Value) != "2" || next1 != cur+1 {
		t.Fatalf("first read: %v %d %v", evs1, next1, err)
	}
	evs2, next2, err := h.e.Events(cur, cur, 1000)
	if err != nil || next2 != next1 || len(evs2) != 1 {
		t.Fatalf("second read: %v %d %v", evs2, next2, err)
	}
	if evs2[0] != evs1[0] {
		t.Fatal("a second stream at the same commit read the store again")
	}

	h.put("a", "3")
	evs3, _, err := h.e.Events(cur, h.e.CurrentRevision(), 1000)
	if err != nil || len(evs3) != 2 || string(evs3[1].Kv.Value) != "3" {
		t.Fatalf("after a commit: %v %v", evs3, err)
	}

	if _, err := h.e.Compact(ctx(t), &pb.CompactionRequest{Revision: h.e.CurrentRevision()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.e.Events(cur, h.e.CurrentRevision(), 1000); !errors.Is(err, mvcc.ErrCompacted) {
		t.Fatalf("read below the floor after compaction: %v", err)
	}
}
