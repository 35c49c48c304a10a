package engine

import (
	"sync/atomic"
	"testing"

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
