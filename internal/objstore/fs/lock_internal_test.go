package fs

import (
	"context"
	"errors"
	"hash/fnv"
	"testing"
)

// TestLockWaitHonoursContext: a writer queued behind another writer of the
// same stripe gives up when its context ends and writes nothing.
func TestLockWaitHonoursContext(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := fnv.New32a()
	h.Write([]byte("busy"))
	stripe := h.Sum32() % stripes
	s.sems[stripe] <- struct{}{} // another writer holds the stripe

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := s.PutIfAbsent(ctx, "busy", []byte("x"))
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("PutIfAbsent while stripe busy: %v, want context.Canceled", err)
	}
	<-s.sems[stripe]
	if _, _, err := s.Get(t.Context(), "busy"); err == nil {
		t.Fatal("canceled writer wrote anyway")
	}
}
