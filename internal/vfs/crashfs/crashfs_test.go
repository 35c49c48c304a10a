package crashfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/vfs"
)

func mustOpen(t *testing.T, fsys *FS, name string, flag int) vfs.File {
	t.Helper()
	f, err := fsys.OpenFile(name, flag, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustWrite(t *testing.T, f vfs.File, off int64, s string) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// read returns the file's content, or "<absent>".
func read(t *testing.T, fsys *FS, name string) string {
	t.Helper()
	b, err := fsys.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	ok(t, err)
	return string(b)
}

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// durableFile makes /d/f hold s, synced, with its name synced too.
func durableFile(t *testing.T, s string) (*FS, vfs.File) {
	fsys := New()
	ok(t, fsys.MkdirAll("/d", 0o700))
	f := mustOpen(t, fsys, "/d/f", os.O_CREATE|os.O_RDWR)
	mustWrite(t, f, 0, s)
	ok(t, f.Sync())
	ok(t, fsys.SyncDir("/d"))
	return fsys, f
}

func TestSyncedWritesSurviveUnsyncedMayNot(t *testing.T) {
	fsys, f := durableFile(t, "synced")
	mustWrite(t, f, 6, "+unsynced")
	if got := read(t, fsys.Crash(nil), "/d/f"); got != "synced" {
		t.Fatalf("durable state after crash: %q", got)
	}
	seen := map[string]bool{}
	for seed := range uint64(200) {
		got := read(t, fsys.Crash(seeded(seed)), "/d/f")
		if !strings.HasPrefix(got, "synced") || !strings.HasPrefix("synced+unsynced", got) {
			t.Fatalf("seed %d: %q is not the synced content plus a prefix of the write", seed, got)
		}
		seen[got] = true
	}
	if !seen["synced"] || !seen["synced+unsynced"] || len(seen) < 4 {
		t.Fatalf("200 crashes kept only %v: the write should be lost, kept and torn", seen)
	}
	// Syncing again makes it durable for every crash.
	fsys, f = durableFile(t, "synced")
	mustWrite(t, f, 6, "+unsynced")
	ok(t, f.Sync())
	for seed := range uint64(20) {
		if got := read(t, fsys.Crash(seeded(seed)), "/d/f"); got != "synced+unsynced" {
			t.Fatalf("seed %d: synced write lost: %q", seed, got)
		}
	}
}

// TestCrashKeepsAPrefixOfTheWrites: the writes since the last fsync
// survive in order; only the first missing one may be partly there.
func TestCrashKeepsAPrefixOfTheWrites(t *testing.T) {
	fsys, f := durableFile(t, "AAAA")
	writes := []struct {
		off int64
		s   string
	}{{4, "BBBBBBBB"}, {2, "cc"}, {12, "DDDD"}, {0, "ee"}}
	// What the file holds after each whole write.
	states := []string{"AAAA"}
	cur := []byte("AAAA")
	for _, w := range writes {
		mustWrite(t, f, w.off, w.s)
		cur = append(cur, make([]byte, max(0, int(w.off)+len(w.s)-len(cur)))...)
		copy(cur[w.off:], w.s)
		states = append(states, string(cur))
	}
	// Every state that is states[k] plus a torn prefix of write k.
	valid := map[string]int{}
	for k, st := range states {
		valid[st] = k
		if k == len(writes) {
			break
		}
		w := writes[k]
		for m := 1; m < len(w.s); m++ {
			b := []byte(st)
			b = append(b, make([]byte, max(0, int(w.off)+m-len(b)))...)
			copy(b[w.off:], w.s[:m])
			if _, dup := valid[string(b)]; !dup {
				valid[string(b)] = -1
			}
		}
	}
	whole, torn := map[int]bool{}, 0
	for seed := range uint64(500) {
		got := read(t, fsys.Crash(seeded(seed)), "/d/f")
		k, isValid := valid[got]
		if !isValid {
			t.Fatalf("seed %d: %q is no prefix of the writes", seed, got)
		}
		if k < 0 {
			torn++
		} else {
			whole[k] = true
		}
	}
	if len(whole) != len(states) || torn == 0 {
		t.Fatalf("500 crashes reached prefixes %v and %d torn writes: every prefix should occur", whole, torn)
	}
	// The same seed and history give the same disk.
	for seed := range uint64(20) {
		if a, b := read(t, fsys.Crash(seeded(seed)), "/d/f"), read(t, fsys.Crash(seeded(seed)), "/d/f"); a != b {
			t.Fatalf("seed %d: %q then %q", seed, a, b)
		}
	}
}

func TestUnsyncedTruncate(t *testing.T) {
	fsys, f := durableFile(t, "0123456789")
	ok(t, f.Truncate(3))
	mustWrite(t, f, 5, "x")
	if got := read(t, fsys, "/d/f"); got != "012\x00\x00x" {
		t.Fatalf("before crash: %q", got)
	}
	if got := read(t, fsys.Crash(nil), "/d/f"); got != "0123456789" {
		t.Fatalf("durable state: %q", got)
	}
	valid := map[string]bool{"0123456789": true, "012": true, "012\x00\x00x": true}
	for seed := range uint64(50) {
		if got := read(t, fsys.Crash(seeded(seed)), "/d/f"); !valid[got] {
			t.Fatalf("seed %d: %q", seed, got)
		}
	}
}

// TestModTime: a file's modification time is when it was created or last
// written or truncated, and a crash keeps the time of the last change that
// survived, as it keeps the content.
func TestModTime(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewFake(t0)
	fsys := NewWithClock(clk)
	ok(t, fsys.MkdirAll("/d", 0o700))
	mtime := func(fsys *FS, name string) time.Time {
		t.Helper()
		st, err := fsys.Stat(name)
		ok(t, err)
		return st.ModTime()
	}
	f := mustOpen(t, fsys, "/d/f", os.O_CREATE|os.O_RDWR)
	ok(t, fsys.SyncDir("/d"))
	if got := mtime(fsys, "/d/f"); !got.Equal(t0) {
		t.Fatalf("created at %v: mtime %v", t0, got)
	}
	clk.Advance(time.Second)
	mustWrite(t, f, 0, "synced")
	ok(t, f.Sync())
	clk.Advance(time.Second)
	if got := mtime(fsys, "/d/f"); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("written at +1s: mtime %v", got)
	}
	mustWrite(t, f, 6, "+unsynced")
	clk.Advance(time.Second)
	ok(t, f.Truncate(3))
	if st, err := f.Stat(); err != nil || !st.ModTime().Equal(t0.Add(3*time.Second)) {
		t.Fatalf("truncated at +3s: File.Stat = %v, %v", st, err)
	}
	if got := mtime(fsys.Crash(nil), "/d/f"); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("durable state: mtime %v, want the synced write's", got)
	}
	want := map[string]time.Time{
		"synced":          t0.Add(time.Second),
		"synced+unsynced": t0.Add(2 * time.Second),
		"syn":             t0.Add(3 * time.Second),
	}
	for seed := range uint64(100) {
		after := fsys.Crash(seeded(seed))
		got, content := mtime(after, "/d/f"), read(t, after, "/d/f")
		if w, whole := want[content]; whole && !got.Equal(w) {
			t.Fatalf("seed %d: %q with mtime %v, want %v", seed, content, got, w)
		}
		if _, whole := want[content]; !whole && !got.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("seed %d: torn %q with mtime %v, want the torn write's", seed, content, got)
		}
	}
	st, err := fsys.Crash(nil).Stat("/d")
	if err != nil || !st.ModTime().IsZero() {
		t.Fatalf("directory: %v, %v; want the zero time", st, err)
	}
}

func TestDirectoryEntriesNeedSyncDir(t *testing.T) {
	fsys := New()
	ok(t, fsys.MkdirAll("/d/sub", 0o700))
	f := mustOpen(t, fsys, "/d/new", os.O_CREATE|os.O_RDWR)
	mustWrite(t, f, 0, "data")
	ok(t, f.Sync())
	after := fsys.Crash(nil)
	if got := read(t, after, "/d/new"); got != "<absent>" {
		t.Fatalf("a new file whose directory was never synced: %q", got)
	}
	if _, err := after.Stat("/d/sub"); err != nil {
		t.Fatalf("directories are durable at once: %v", err)
	}

	// Atomic replace: the rename is lost without SyncDir.
	replace := func(syncDir bool) *FS {
		fsys, _ := durableFile(t, "old")
		tmp := mustOpen(t, fsys, "/d/f.tmp", os.O_CREATE|os.O_RDWR)
		mustWrite(t, tmp, 0, "new")
		ok(t, tmp.Sync())
		ok(t, fsys.Rename("/d/f.tmp", "/d/f"))
		if got := read(t, fsys, "/d/f"); got != "new" {
			t.Fatalf("before crash: %q", got)
		}
		if syncDir {
			ok(t, fsys.SyncDir("/d"))
		}
		return fsys
	}
	fsys = replace(false)
	for seed := range uint64(20) {
		after := fsys.Crash(seeded(seed))
		if got := read(t, after, "/d/f"); got != "old" {
			t.Fatalf("seed %d: rename survived without SyncDir: %q", seed, got)
		}
		if got := read(t, after, "/d/f.tmp"); got != "<absent>" {
			t.Fatalf("seed %d: unsynced create survived: %q", seed, got)
		}
	}
	after = replace(true).Crash(nil)
	if got := read(t, after, "/d/f"); got != "new" {
		t.Fatalf("rename after SyncDir: %q", got)
	}
	if got := read(t, after, "/d/f.tmp"); got != "<absent>" {
		t.Fatalf("old name after a synced rename: %q", got)
	}

	// Remove needs SyncDir too, and the file comes back as it was durable.
	remove := func(syncDir bool) *FS {
		fsys, f := durableFile(t, "kept")
		mustWrite(t, f, 0, "XXXX")
		ok(t, fsys.Remove("/d/f"))
		if syncDir {
			ok(t, fsys.SyncDir("/d"))
		}
		return fsys
	}
	if got := read(t, remove(false).Crash(nil), "/d/f"); got != "kept" {
		t.Fatalf("unsynced remove: %q", got)
	}
	if got := read(t, remove(true).Crash(nil), "/d/f"); got != "<absent>" {
		t.Fatalf("synced remove: %q", got)
	}

	// A directory opened and synced is SyncDir.
	fsys, _ = durableFile(t, "x")
	mustOpen(t, fsys, "/d/g", os.O_CREATE|os.O_RDWR).Close()
	d, err := fsys.Open("/d")
	ok(t, err)
	ok(t, d.Sync())
	if got := read(t, fsys.Crash(nil), "/d/g"); got != "" {
		t.Fatalf("created then directory synced: %q", got)
	}
}

// TestRenameBetweenDirectories: each directory's entries are durable on
// their own, so a half-synced move can leave the file under both names.
func TestRenameBetweenDirectories(t *testing.T) {
	fsys, _ := durableFile(t, "moved")
	ok(t, fsys.MkdirAll("/e", 0o700))
	ok(t, fsys.Rename("/d/f", "/e/f"))
	ok(t, fsys.SyncDir("/e"))
	after := fsys.Crash(nil)
	if a, b := read(t, after, "/d/f"), read(t, after, "/e/f"); a != "moved" || b != "moved" {
		t.Fatalf("target synced, source not: %q %q", a, b)
	}
	// Both names are the same file after the crash too.
	f := mustOpen(t, after, "/e/f", os.O_RDWR)
	mustWrite(t, f, 0, "M")
	if got := read(t, after, "/d/f"); got != "Moved" {
		t.Fatalf("the two names are not one file: %q", got)
	}
}

func TestCut(t *testing.T) {
	fsys, f := durableFile(t, "before")
	g := mustOpen(t, fsys, "/d/g", os.O_CREATE|os.O_RDWR)
	fsys.Cut()
	if !fsys.IsCut() {
		t.Fatal("IsCut after Cut")
	}
	lost := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrPowerLost) {
			t.Errorf("%s after Cut: %v", what, err)
		}
	}
	buf := make([]byte, 4)
	_, err := f.Write([]byte("x"))
	lost("Write", err)
	_, err = f.WriteAt([]byte("x"), 0)
	lost("WriteAt", err)
	_, err = f.Read(buf)
	lost("Read", err)
	_, err = f.ReadAt(buf, 0)
	lost("ReadAt", err)
	_, err = f.Seek(0, io.SeekStart)
	lost("Seek", err)
	lost("Truncate", f.Truncate(0))
	lost("Sync", f.Sync())
	_, err = f.Stat()
	lost("Stat", err)
	lost("Close", f.Close())
	lost("Close of a closed file", f.Close())
	_, err = fsys.Open("/d/f")
	lost("Open", err)
	_, err = fsys.OpenFile("/d/h", os.O_CREATE|os.O_RDWR, 0o600)
	lost("OpenFile", err)
	_, err = fsys.ReadFile("/d/f")
	lost("ReadFile", err)
	lost("Remove", fsys.Remove("/d/f"))
	lost("Rename", fsys.Rename("/d/f", "/d/x"))
	_, err = fsys.ReadDir("/d")
	lost("ReadDir", err)
	lost("MkdirAll", fsys.MkdirAll("/x", 0o700))
	_, err = fsys.Stat("/d/f")
	lost("Stat", err)
	_, err = fsys.Lstat("/d/f")
	lost("Lstat", err)
	lost("SyncDir", fsys.SyncDir("/d"))
	lost("Sync of g", g.Sync())

	// Nothing tried after the cut reached the disk.
	for seed := range uint64(10) {
		after := fsys.Crash(seeded(seed))
		if got := read(t, after, "/d/f"); got != "before" {
			t.Fatalf("seed %d: %q", seed, got)
		}
		if got := read(t, after, "/d/g"); got != "<absent>" {
			t.Fatalf("seed %d: g %q", seed, got)
		}
		if after.IsCut() {
			t.Fatal("the rebooted disk has no power")
		}
	}
	if !fsys.IsCut() {
		t.Fatal("Crash restored the old disk's power")
	}
}

func TestCutAfter(t *testing.T) {
	fsys, f := durableFile(t, "")
	fsys.CutAfter(3)
	for i := range 3 {
		mustWrite(t, f, int64(i), "x")
		_, err := f.ReadAt(make([]byte, 1), 0) // reads do not count
		ok(t, err)
	}
	if _, err := f.WriteAt([]byte("y"), 3); !errors.Is(err, ErrPowerLost) {
		t.Fatalf("fourth write: %v", err)
	}
	// durableFile made five changes (mkdir, create, write, sync, syncdir),
	// then three writes and the one that was cut.
	if n := fsys.Changes(); n != 9 {
		t.Fatalf("Changes() = %d, want 9", n)
	}
	if got := read(t, fsys.Crash(nil), "/d/f"); got != "" {
		t.Fatalf("durable %q", got)
	}
	if got := read(t, fsys.Crash(seeded(1)), "/d/f"); !strings.HasPrefix("xxx", got) {
		t.Fatalf("after the cut: %q", got)
	}
}

// TestZeroFilledFileIsCheap: a preallocated 64 MiB segment of zeros is
// stored as a table of nil pages, in every copy a crash makes.
func TestZeroFilledFileIsCheap(t *testing.T) {
	fsys := New()
	ok(t, fsys.MkdirAll("/d", 0o700))
	f := mustOpen(t, fsys, "/d/seg", os.O_CREATE|os.O_RDWR)
	mustWrite(t, f, 0, "header")
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < 64<<20; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, max(off, 6)); err != nil {
			t.Fatal(err)
		}
		ok(t, f.Sync())
	}
	ok(t, fsys.SyncDir("/d"))
	mustWrite(t, f, 6, "entry")
	stored := func(fsys *FS) (pages, nonNil int) {
		ino := fsys.dirs["/d"].cur["seg"]
		for _, p := range ino.cur.pages {
			if p != nil {
				nonNil++
			}
		}
		for _, o := range ino.ops {
			nonNil += len(o.data) / pageSize
		}
		return len(ino.cur.pages), nonNil
	}
	if n, stored := stored(fsys); n != 64<<20/pageSize || stored != 1 {
		t.Fatalf("%d pages, %d stored", n, stored)
	}
	after := fsys.Crash(seeded(3))
	if _, stored := stored(after); stored != 1 {
		t.Fatalf("after the crash %d pages stored", stored)
	}
	st, err := after.Stat("/d/seg")
	ok(t, err)
	if st.Size() != 64<<20 {
		t.Fatalf("size %d", st.Size())
	}
	g := mustOpen(t, after, "/d/seg", os.O_RDONLY)
	head := make([]byte, 16)
	_, err = g.ReadAt(head, 0)
	ok(t, err)
	if !bytes.HasPrefix(head, []byte("header")) {
		t.Fatalf("head %q", head)
	}
}

// TestConcurrentUse crashes the disk under concurrent writers (for
// -race): each writer appends the bytes 0, 1, 2, ... to its own file and
// stops at the cut, and every file after the crash holds a prefix of that.
func TestConcurrentUse(t *testing.T) {
	fsys := New()
	ok(t, fsys.MkdirAll("/d", 0o700))
	const writers, bytesEach = 4, 200
	files := make([]vfs.File, writers)
	for w := range files {
		files[w] = mustOpen(t, fsys, fmt.Sprintf("/d/f%d", w), os.O_CREATE|os.O_RDWR)
	}
	ok(t, fsys.SyncDir("/d"))
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			f := files[w]
			defer f.Close()
			for i := range bytesEach {
				if _, err := f.Write([]byte{byte(i)}); err != nil {
					if !errors.Is(err, ErrPowerLost) {
						t.Error(err)
					}
					return
				}
				if i%10 == 0 {
					if err := f.Sync(); err != nil {
						if !errors.Is(err, ErrPowerLost) {
							t.Error(err)
						}
						return
					}
				}
			}
		})
	}
	var crashed *FS
	wg.Go(func() {
		runtime.Gosched()
		crashed = fsys.Crash(seeded(7))
	})
	wg.Wait()
	all := make([]byte, bytesEach)
	for i := range all {
		all[i] = byte(i)
	}
	for w := range writers {
		got := read(t, crashed, fmt.Sprintf("/d/f%d", w))
		if !bytes.HasPrefix(all, []byte(got)) {
			t.Fatalf("writer %d: %v", w, []byte(got))
		}
	}
}
