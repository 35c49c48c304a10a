package fs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/fs"
	"github.com/netsy-io/netsy/internal/objstore/storetest"
	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/internal/vfs/crashfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string) *fs.Store {
	t.Helper()
	s, err := fs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openFS(t *testing.T, fsys vfs.FS, dir string) *fs.Store {
	t.Helper()
	s, err := fs.OpenFS(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store { return open(t, t.TempDir()) })
}

// TestConformanceTwoInstances runs the suite with every call alternating
// between two Stores over one directory: they share no memory, so only the
// on-disk locking can keep the racing tests honest.
func TestConformanceTwoInstances(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store {
		dir := t.TempDir()
		return &alternating{stores: [2]objstore.Store{open(t, dir), open(t, dir)}}
	})
}

// TestConformanceCrashFS runs the suite with the store on crashfs, the
// disk the power-loss tests put under it.
func TestConformanceCrashFS(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store { return openFS(t, crashfs.New(), "/data/objects") })
}

// TestConformanceTwoInstancesCrashFS is TestConformanceTwoInstances on
// crashfs: the two Stores share no flock, only the in-memory locks of
// their file system and root.
func TestConformanceTwoInstancesCrashFS(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store {
		disk := crashfs.New()
		return &alternating{stores: [2]objstore.Store{openFS(t, disk, "/data/objects"), openFS(t, disk, "/data/objects")}}
	})
}

type alternating struct {
	mu     sync.Mutex
	n      int
	stores [2]objstore.Store
}

func (a *alternating) next() objstore.Store {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	return a.stores[a.n%2]
}

func (a *alternating) Get(ctx context.Context, key string) ([]byte, string, error) {
	return a.next().Get(ctx, key)
}
func (a *alternating) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	return a.next().GetReader(ctx, key)
}
func (a *alternating) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	return a.next().PutIfAbsent(ctx, key, body)
}
func (a *alternating) PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (string, error) {
	return a.next().PutIfAbsentFrom(ctx, key, r, size)
}
func (a *alternating) PutIfMatch(ctx context.Context, key string, body []byte, etag string) (string, error) {
	return a.next().PutIfMatch(ctx, key, body, etag)
}
func (a *alternating) Delete(ctx context.Context, key string) error {
	return a.next().Delete(ctx, key)
}
func (a *alternating) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	return a.next().List(ctx, prefix, startAfter, limit)
}
func (a *alternating) Close() error {
	return errors.Join(a.stores[0].Close(), a.stores[1].Close())
}

func TestOpenRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Open(dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Open(non-empty dir) = %v, want refusal", err)
	}
	// A store directory reopens fine, and a missing one is created.
	store := filepath.Join(dir, "store", "nested")
	open(t, store)
	open(t, store)
	if err := os.WriteFile(filepath.Join(store, "FORMAT"), []byte("netsy-objstore-fs 99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Open(store); err == nil || !strings.Contains(err.Error(), "unsupported layout") {
		t.Fatalf("Open(future layout) = %v", err)
	}
}

func TestCorruptObjectIsReported(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	etag, err := s.PutIfAbsent(ctx, "wal/00000000000000000001", []byte("precious entries"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "objects", "wal.dir", "00000000000000000001.obj")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("object not at the documented path: %v", err)
	}
	data[len(data)-1] ^= 0xff
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Get(ctx, "wal/00000000000000000001")
	if err == nil || !strings.Contains(err.Error(), "corrupt") || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get(corrupt) = %v, want a corruption error", err)
	}
	// A stream of it fails at the end instead of ending cleanly.
	rc, _, err := s.GetReader(ctx, "wal/00000000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("GetReader(corrupt) read = %v, want a corruption error", err)
	}
	rc.Close()
	// The header still names the ETag of what was written, so a CAS against
	// the acknowledged version is not confused by the damage.
	infos, err := s.List(ctx, "wal/", "", 0)
	if err != nil || len(infos) != 1 || infos[0].ETag != etag {
		t.Fatalf("List = %+v, %v", infos, err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "wal/00000000000000000001"); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Get(truncated) = %v", err)
	}
}

func TestNoStrayFilesAfterWrites(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	e, err := s.PutIfAbsent(ctx, "a/b", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIfMatch(ctx, "a/b", []byte("2"), e); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIfMatch(ctx, "a/b", []byte("3"), e); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatal(err)
	}
	if _, err := s.PutIfAbsentFrom(ctx, "a/b", bytes.NewReader([]byte("4")), 1); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatal(err)
	}
	if _, err := s.PutIfAbsentFrom(ctx, "a/c", io.NewSectionReader(failingReaderAt{}, 0, 1<<20), 1<<20); err == nil {
		t.Fatal("PutIfAbsentFrom with a failing body succeeded")
	}
	tmp, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil || len(tmp) != 0 {
		t.Fatalf("tmp/ = %v, %v; want empty", tmp, err)
	}
}

// failingReaderAt fails every read.
type failingReaderAt struct{}

func (failingReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errors.New("disk on fire") }

// Cross-process race. The parent starts helper processes (this test binary
// re-executed with NETSY_FS_HELPER_DIR set), releases them together through
// their stdin, and checks the outcome: no lost CAS increment and exactly one
// winner per create-only key.

const (
	helperIncrements = 25
	helperClaims     = 20
	helperProcs      = 3
)

func TestCrossProcessHelper(t *testing.T) {
	dir := os.Getenv("NETSY_FS_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process for TestCrossProcessRace")
	}
	id := os.Getenv("NETSY_FS_HELPER_ID")
	s, err := fs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the parent's go signal so all processes contend at once.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range helperClaims {
		key := fmt.Sprintf("claim/%02d", i)
		_, err := s.PutIfAbsent(ctx, key, []byte(id))
		switch {
		case err == nil:
			fmt.Printf("won %s\n", key)
		case !errors.Is(err, objstore.ErrPreconditionFailed):
			t.Fatal(err)
		}
	}
	for i := range helperIncrements {
		if err := increment(ctx, s, fmt.Sprintf("%s/%d", id, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// increment adds one to the counter object with a CAS retry loop; tag makes
// every body unique, as the objstore contract asks of CAS callers.
func increment(ctx context.Context, s objstore.Store, tag string) error {
	for {
		body, etag, err := s.Get(ctx, "counter")
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(strings.Fields(string(body))[0])
		if err != nil {
			return fmt.Errorf("counter body %q: %w", body, err)
		}
		_, err = s.PutIfMatch(ctx, "counter", fmt.Appendf(nil, "%d %s", n+1, tag), etag)
		if err == nil {
			return nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return err
		}
	}
}

func TestCrossProcessRace(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	if _, err := s.PutIfAbsent(ctx, "counter", []byte("0 init")); err != nil {
		t.Fatal(err)
	}
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   bytes.Buffer
	}
	procs := make([]*proc, helperProcs)
	for i := range procs {
		p := &proc{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrossProcessHelper$", "-test.count=1")}
		p.cmd.Env = append(os.Environ(), "NETSY_FS_HELPER_DIR="+dir, fmt.Sprintf("NETSY_FS_HELPER_ID=p%d", i))
		p.cmd.Stdout = &p.out
		p.cmd.Stderr = &p.out
		w, err := p.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdin = w
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Logf("helper p%d pid %d", i, p.cmd.Process.Pid)
		procs[i] = p
		defer func() {
			// Normally a no-op: the helper has exited and been waited for.
			if p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}()
	}
	for _, p := range procs {
		if _, err := fmt.Fprintln(p.stdin, "go"); err != nil {
			t.Fatal(err)
		}
		p.stdin.Close()
	}
	wins := map[string][]int{}
	for i, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("helper p%d: %v\n%s", i, err, p.out.String())
		}
		for line := range strings.Lines(p.out.String()) {
			if key, ok := strings.CutPrefix(strings.TrimSpace(line), "won "); ok {
				wins[key] = append(wins[key], i)
			}
		}
	}
	for i := range helperClaims {
		key := fmt.Sprintf("claim/%02d", i)
		w := wins[key]
		if len(w) != 1 {
			t.Fatalf("%s won by processes %v, want exactly one", key, w)
		}
		body, _, err := s.Get(ctx, key)
		if err != nil || string(body) != fmt.Sprintf("p%d", w[0]) {
			t.Fatalf("%s = %q, %v; winner was p%d", key, body, err, w[0])
		}
	}
	body, _, err := s.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(string(body))[0], strconv.Itoa(helperProcs*helperIncrements); got != want {
		t.Fatalf("counter = %s, want %s: a CAS increment was lost across processes", got, want)
	}
}

func TestObjectBodyReadsFilesOnDisk(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	body := []byte("a chunk as uploaded")
	if _, err := s.PutIfAbsent(t.Context(), "wal/00000000000000000007", body); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "objects", "wal.dir", "00000000000000000007.obj")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, isObject, err := fs.ObjectBody(data)
	if err != nil || !isObject || !bytes.Equal(got, body) {
		t.Fatalf("ObjectBody = %q, %v, %v; want the body", got, isObject, err)
	}
	data[len(data)-1] ^= 0xff
	if _, isObject, err := fs.ObjectBody(data); !isObject || err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("ObjectBody(damaged) = %v, %v; want a corruption error", isObject, err)
	}
	if _, isObject, err := fs.ObjectBody([]byte("NSDF not an object file")); isObject || err != nil {
		t.Fatalf("ObjectBody(foreign) = %v, %v; want not an object, no error", isObject, err)
	}
}

// TestOpenAfterPowerLossInFirstOpen: a power loss at any point of the
// first Open of a root leaves a root the next Open accepts. The marker
// once became durable only with the directories made after it, so a crash
// could keep objects/, locks/ and tmp/ and lose FORMAT, and the root was
// then refused as a foreign non-empty directory for good.
func TestOpenAfterPowerLossInFirstOpen(t *testing.T) {
	clean := crashfs.New()
	openFS(t, clean, "/data/objects")
	changes := clean.Changes()
	for n := range changes + 1 {
		disk := crashfs.New()
		disk.CutAfter(n)
		if _, err := fs.OpenFS(disk, "/data/objects"); err != nil && !errors.Is(err, crashfs.ErrPowerLost) {
			t.Fatalf("cut after %d changes: %v", n, err)
		}
		for seed := range uint64(10) {
			var rng *rand.Rand
			if seed > 0 {
				rng = rand.New(rand.NewPCG(seed, 0))
			}
			after := disk.Crash(rng)
			s := openFS(t, after, "/data/objects")
			if _, err := s.PutIfAbsent(t.Context(), "k", []byte("v")); err != nil {
				t.Fatalf("cut after %d changes, crash seed %d: %v", n, seed, err)
			}
			s.Close()
		}
	}
}

// TestOpenFinishesACutShortMarker: a FORMAT whose name survived a power
// loss but not all of its line (a real disk may commit a new name before
// its data; ext4 does) is a claim that never finished, since no Open
// returned before the marker was durable: Open finishes it. It was
// refused as an unsupported layout "", for good.
func TestOpenFinishesACutShortMarker(t *testing.T) {
	for _, torn := range []string{"", "netsy-obj", "netsy-objstore-fs 1"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "FORMAT"), []byte(torn), 0o644); err != nil {
			t.Fatal(err)
		}
		open(t, dir)
		got, err := os.ReadFile(filepath.Join(dir, "FORMAT"))
		if err != nil || string(got) != "netsy-objstore-fs 1\n" {
			t.Fatalf("FORMAT %q after Open: %q, %v", torn, got, err)
		}
	}
	// Anything else is still someone else's.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "FORMAT"), []byte("netsy-objstore-fs 12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Open(dir); err == nil || !strings.Contains(err.Error(), "unsupported layout") {
		t.Fatalf("Open(FORMAT of another version) = %v", err)
	}
}

// TestNamesAreDurableBeforeTheAck: the directories an object's name runs
// through are fsync'd into their parents before the object is
// acknowledged, even when another writer made the directory a moment ago
// and has not fsync'd its parent yet (the second writer saw the directory
// there, fsync'd nothing above it, and acknowledged an object the disk
// could still lose with the directory's name); and Open fsyncs the
// root's parent, which holds the root's name. crashfs keeps directories
// at once, so this is checked on the calls, not by a crash.
func TestNamesAreDurableBeforeTheAck(t *testing.T) {
	disk := &syncCounter{FS: crashfs.New(), hold: "/data/objects/objects/d.dir", held: make(chan struct{}), release: make(chan struct{})}
	a := openFS(t, disk, "/data/objects")
	if n := disk.syncs("/data"); n == 0 {
		t.Fatal("Open did not fsync the root's parent")
	}
	b := openFS(t, disk, "/data/objects") // as another process; d/a and d/b lie in different stripes
	done := make(chan error, 1)
	go func() {
		_, err := a.PutIfAbsent(t.Context(), "d/a", []byte("a"))
		done <- err
	}()
	<-disk.held // a made objects/d.dir and has not fsync'd objects/
	before := disk.syncs("/data/objects/objects")
	if _, err := b.PutIfAbsent(t.Context(), "d/b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if disk.syncs("/data/objects/objects") == before {
		t.Fatal("d/b was acknowledged before the name of objects/d.dir was durable")
	}
	close(disk.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Each Store fsyncs a directory's parent once, not once per write.
	before = disk.syncs("/data/objects/objects")
	if _, err := b.PutIfAbsent(t.Context(), "d/c", []byte("c")); err != nil {
		t.Fatal(err)
	}
	if n := disk.syncs("/data/objects/objects") - before; n != 0 {
		t.Fatalf("a write into a known directory fsync'd its parent %d times", n)
	}
}

// syncCounter counts SyncDir calls by directory, and holds the first
// MkdirAll of hold until release is closed.
type syncCounter struct {
	*crashfs.FS
	hold          string
	held, release chan struct{}
	holding       atomic.Bool
	mu            sync.Mutex
	n             map[string]int
}

func (c *syncCounter) MkdirAll(path string, perm os.FileMode) error {
	err := c.FS.MkdirAll(path, perm)
	if path == c.hold && c.holding.CompareAndSwap(false, true) {
		close(c.held)
		<-c.release
	}
	return err
}

func (c *syncCounter) SyncDir(dir string) error {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[dir]++
	c.mu.Unlock()
	return c.FS.SyncDir(dir)
}

func (c *syncCounter) syncs(dir string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[dir]
}
