package fs

import (
	"bytes"
	"context"
	"errors"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
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

// TestOpenSweepsOrphanedTemps: Open removes temp files nobody holds (a
// crashed writer's) and leaves a live writer's, which keeps its lock.
func TestOpenSweepsOrphanedTemps(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(s.tmp, "put-orphan")
	if err := os.WriteFile(orphan, []byte("half a body"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, _, err := s.writeTemp(t.Context(), bytes.NewReader([]byte("body")), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer live.close()

	s2, err := Open(dir) // as another process starting on the same root
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("orphaned temp file survived Open: %v", err)
	}
	if _, err := os.Stat(live.path); err != nil {
		t.Fatalf("a live writer's temp file was swept: %v", err)
	}
	if err := s2.install(live, s2.objectPath("k")); err != nil {
		t.Fatalf("installing the live temp file after the sweep: %v", err)
	}
	got, _, err := s2.Get(t.Context(), "k")
	if err != nil || string(got) != "body" {
		t.Fatalf("Get = %q, %v", got, err)
	}
}
