package fs

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/internal/vfs/crashfs"
)

// disks are the file systems the internal tests run on: the real disk,
// where writers lock with flock, and crashfs, where they share in-memory
// locks.
func disks() map[string]func(t *testing.T) (vfs.FS, string) {
	return map[string]func(t *testing.T) (vfs.FS, string){
		"os":      func(t *testing.T) (vfs.FS, string) { return vfs.OS(), t.TempDir() },
		"crashfs": func(t *testing.T) (vfs.FS, string) { return crashfs.New(), "/data/objects" },
	}
}

func mustOpenFS(t *testing.T, fsys vfs.FS, dir string) *Store {
	t.Helper()
	s, err := OpenFS(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestLockWaitHonoursContext: a writer queued behind another writer of the
// same stripe gives up when its context ends and writes nothing.
func TestLockWaitHonoursContext(t *testing.T) {
	for name, disk := range disks() {
		t.Run(name, func(t *testing.T) {
			fsys, dir := disk(t)
			s := mustOpenFS(t, fsys, dir)
			unlock, err := s.lk.lock(t.Context(), stripeOf("busy")) // another writer holds the stripe
			if err != nil {
				t.Fatal(err)
			}
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
			unlock()
			if _, _, err := s.Get(t.Context(), "busy"); err == nil {
				t.Fatal("canceled writer wrote anyway")
			}
		})
	}
}

// TestOpenSweepsOrphanedTemps: Open removes temp files nobody holds (a
// crashed writer's) and leaves a live writer's, which keeps its claim.
func TestOpenSweepsOrphanedTemps(t *testing.T) {
	for name, disk := range disks() {
		t.Run(name, func(t *testing.T) {
			fsys, dir := disk(t)
			s := mustOpenFS(t, fsys, dir)
			orphan := s.tmp + "/put-orphan"
			f, err := s.fsys.OpenFile(orphan, os.O_WRONLY|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("half a body"))
			f.Close()
			live, _, err := s.writeTemp(t.Context(), bytes.NewReader([]byte("body")), 4)
			if err != nil {
				t.Fatal(err)
			}
			defer live.close()

			s2 := mustOpenFS(t, s.fsys, s.root) // as another process starting on the same root
			if _, err := s.fsys.Stat(orphan); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("orphaned temp file survived Open: %v", err)
			}
			if _, err := s.fsys.Stat(live.path); err != nil {
				t.Fatalf("a live writer's temp file was swept: %v", err)
			}
			if err := s2.install(live, s2.objectPath("k")); err != nil {
				t.Fatalf("installing the live temp file after the sweep: %v", err)
			}
			got, _, err := s2.Get(t.Context(), "k")
			if err != nil || string(got) != "body" {
				t.Fatalf("Get = %q, %v", got, err)
			}
		})
	}
}

// TestSweepSparesATempFileBeingCreated: a sweep that starts after a writer
// has created its temp file but before it has claimed it leaves the file
// alone (it once took such a file for an orphan and failed the write, as
// TestCrossProcessRace did about once in 60 runs when a helper process
// opened the store while another was already writing).
func TestSweepSparesATempFileBeingCreated(t *testing.T) {
	for name, disk := range disks() {
		t.Run(name, func(t *testing.T) {
			fsys, dir := disk(t)
			s := mustOpenFS(t, fsys, dir)
			created, resume := make(chan struct{}), make(chan struct{})
			type result struct {
				f       vfs.File
				release func()
				err     error
			}
			res := make(chan result, 1)
			go func() {
				f, release, err := s.lk.createTemp(func() (vfs.File, error) {
					f, err := s.createTemp()
					close(created)
					<-resume
					return f, err
				})
				res <- result{f, release, err}
			}()
			<-created
			opened := make(chan error, 1)
			go func() {
				s2, err := OpenFS(fsys, dir) // as another process starting now
				if err == nil {
					s2.Close()
				}
				opened <- err
			}()
			// The sweep must wait for the claim; if it does not, it is
			// done long before this.
			select {
			case err := <-opened:
				opened <- err
			case <-time.After(200 * time.Millisecond):
			}
			close(resume)
			r := <-res
			if r.err != nil {
				t.Fatal(r.err)
			}
			if err := <-opened; err != nil {
				t.Fatal(err)
			}
			path := r.f.Name()
			tmp := &tempFile{fsys: fsys, f: r.f, path: path, release: r.release}
			defer tmp.close()
			if _, err := fsys.Stat(path); err != nil {
				t.Fatalf("the sweep removed a temp file being created: %v", err)
			}
			if err := s.install(tmp, s.objectPath("k")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
