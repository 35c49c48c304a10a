package vfs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/internal/vfs/crashfs"
)

// TestConformance runs one script of calls on the real file system and on
// crashfs (without crashing) and wants the same transcript from both.
func TestConformance(t *testing.T) {
	want := script(t, vfs.OS(), t.TempDir())
	got := script(t, crashfs.New(), "/data/root")
	if len(want) < 50 {
		t.Fatalf("script stopped early on the real file system:\n%s", strings.Join(want, "\n"))
	}
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("step %d: os %q, crashfs %q", i, w, g)
		}
	}
}

// class names an error by what callers test it for.
func class(err error) string {
	switch {
	case err == nil:
		return "ok"
	case err == io.EOF:
		return "EOF"
	case errors.As(err, new(syscall.Errno)):
		var errno syscall.Errno
		errors.As(err, &errno)
		return errno.Error()
	case errors.Is(err, os.ErrNotExist):
		return "not-exist"
	case errors.Is(err, os.ErrExist):
		return "exist"
	case errors.Is(err, os.ErrClosed):
		return "closed"
	}
	return "error"
}

func script(t *testing.T, fsys vfs.FS, root string) []string {
	var out []string
	rec := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	p := func(name string) string { return filepath.Join(root, name) }
	must := func(err error) bool {
		if err != nil {
			rec("unexpected: %v", err)
			return false
		}
		return true
	}
	// Creates a file holding b, closed.
	put := func(name string, b []byte) {
		f, err := fsys.OpenFile(p(name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if !must(err) {
			return
		}
		_, err = f.Write(b)
		must(err)
		must(f.Close())
	}
	get := func(name string) string {
		b, err := fsys.ReadFile(p(name))
		return fmt.Sprintf("%s %q", class(err), b)
	}

	rec("mkdirall %s", class(fsys.MkdirAll(p("a/b"), 0o700)))
	rec("mkdirall again %s", class(fsys.MkdirAll(p("a/b"), 0o700)))
	_, err := fsys.Open(p("a/missing"))
	rec("open missing %s", class(err))
	_, err = fsys.OpenFile(p("nodir/f"), os.O_CREATE|os.O_RDWR, 0o600)
	rec("create in missing dir %s", class(err))
	_, err = fsys.Stat(p("a/missing"))
	rec("stat missing %s", class(err))
	_, err = fsys.Lstat(p("a/missing"))
	rec("lstat missing %s", class(err))
	_, err = fsys.ReadFile(p("a/missing"))
	rec("readfile missing %s", class(err))
	rec("remove missing %s", class(fsys.Remove(p("a/missing"))))
	rec("rename missing %s", class(fsys.Rename(p("a/missing"), p("a/x"))))
	_, err = fsys.ReadDir(p("missing"))
	rec("readdir missing %s", class(err))
	rec("syncdir missing %s", class(fsys.SyncDir(p("missing"))))

	// Read, write, seek, offsets.
	f, err := fsys.OpenFile(p("a/f"), os.O_CREATE|os.O_RDWR, 0o600)
	if !must(err) {
		return out
	}
	rec("name %v", f.Name() == p("a/f"))
	n, err := f.Write([]byte("hello"))
	rec("write %d %s", n, class(err))
	off, err := f.Seek(1, io.SeekStart)
	rec("seek %d %s", off, class(err))
	buf := make([]byte, 3)
	n, err = f.Read(buf)
	rec("read %d %s %q", n, class(err), buf[:n])
	off, err = f.Seek(0, io.SeekCurrent)
	rec("seek current %d %s", off, class(err))
	n, err = f.Read(make([]byte, 10))
	rec("read to end %d %s", n, class(err))
	n, err = f.Read(make([]byte, 10))
	rec("read at end %d %s", n, class(err))
	n, err = f.ReadAt(buf, 3)
	rec("readat short %d %s %q", n, class(err), buf[:n])
	n, err = f.WriteAt([]byte("x"), 10)
	rec("writeat past end %d %s", n, class(err))
	st, err := f.Stat()
	rec("stat %s size %d regular %v dir %v name %s", class(err), st.Size(), st.Mode().IsRegular(), st.IsDir(), st.Name())
	rec("content %s", get("a/f"))
	rec("truncate grow %s", class(f.Truncate(14)))
	rec("content %s", get("a/f"))
	rec("truncate shrink %s", class(f.Truncate(2)))
	rec("content %s", get("a/f"))
	off, err = f.Seek(0, io.SeekEnd)
	rec("seek end %d %s", off, class(err))
	_, err = f.Seek(-1, io.SeekStart)
	rec("seek negative %s", class(err))
	rec("sync %s", class(f.Sync()))
	rec("close %s", class(f.Close()))
	_, err = f.Write([]byte("y"))
	rec("write closed %s", class(err))
	_, err = f.Read(buf)
	rec("read closed %s", class(err))
	rec("close again %s", class(f.Close()))

	// Creation flags.
	_, err = fsys.OpenFile(p("a/f"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	rec("create excl existing %s", class(err))
	f, err = fsys.OpenFile(p("a/new"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	rec("create excl new %s", class(err))
	if err == nil {
		f.Close()
	}
	f, err = fsys.Open(p("a/f"))
	if must(err) {
		_, err = f.Write([]byte("z"))
		rec("write read-only %s", class(err))
		f.Close()
	}
	f, err = fsys.OpenFile(p("a/f"), os.O_TRUNC|os.O_WRONLY, 0)
	if must(err) {
		st, _ := f.Stat()
		rec("after O_TRUNC size %d", st.Size())
		_, err = f.Read(buf)
		rec("read write-only %s", class(err))
		f.Close()
	}
	f, err = fsys.OpenFile(p("a/app"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if must(err) {
		f.Write([]byte("one"))
		f.Seek(0, io.SeekStart)
		f.Write([]byte("two"))
		_, err = f.WriteAt([]byte("x"), 0)
		rec("writeat append %s", class(err))
		f.Close()
		rec("append %s", get("a/app"))
	}

	// Rename, over an existing file too.
	put("a/g", []byte("gee"))
	rec("rename over existing %s", class(fsys.Rename(p("a/g"), p("a/f"))))
	rec("renamed %s", get("a/f"))
	rec("old name %s", get("a/g"))
	rec("rename into subdir %s", class(fsys.Rename(p("a/f"), p("a/b/f"))))
	rec("moved %s", get("a/b/f"))
	rec("rename onto dir %s", class(fsys.Rename(p("a/b/f"), p("a/b"))))

	// Directories.
	for _, name := range []string{"a/zz", "a/m", "a/0", "a/M"} {
		put(name, []byte(name))
	}
	rec("mkdirall under file %s", class(fsys.MkdirAll(p("a/zz/sub"), 0o700)))
	ents, err := fsys.ReadDir(p("a"))
	rec("readdir %s", class(err))
	for _, e := range ents {
		rec("  %s dir %v regular %v", e.Name(), e.IsDir(), e.Type().IsRegular())
	}
	_, err = fsys.ReadDir(p("a/zz"))
	rec("readdir file %s", class(err))
	st, err = fsys.Stat(p("a/b"))
	rec("stat dir %s dir %v", class(err), err == nil && st.IsDir())
	st, err = fsys.Lstat(p("a/zz"))
	rec("lstat file %s size %d", class(err), st.Size())
	_, err = fsys.ReadFile(p("a"))
	rec("readfile dir %s", class(err))
	_, err = fsys.OpenFile(p("a"), os.O_RDWR, 0)
	rec("open dir for writing %s", class(err))
	rec("syncdir %s", class(fsys.SyncDir(p("a"))))
	d, err := fsys.Open(p("a"))
	if must(err) {
		rec("sync opened dir %s", class(d.Sync()))
		_, err = d.Read(buf)
		rec("read dir %s", class(err))
		d.Close()
	}
	rec("remove non-empty dir %s", class(fsys.Remove(p("a/b"))))
	rec("remove file %s", class(fsys.Remove(p("a/b/f"))))
	rec("remove empty dir %s", class(fsys.Remove(p("a/b"))))
	_, err = fsys.Stat(p("a/b"))
	rec("stat removed dir %s", class(err))

	// A file still open after its name is removed stays readable.
	put("a/gone", []byte("still here"))
	f, err = fsys.Open(p("a/gone"))
	if must(err) {
		rec("remove open file %s", class(fsys.Remove(p("a/gone"))))
		b, err := io.ReadAll(f)
		rec("read removed %s %q", class(err), b)
		f.Close()
	}

	// Larger writes across page boundaries, zeros over data, holes.
	big := make([]byte, 10000)
	for i := range big {
		big[i] = byte(i*7 + 1)
	}
	f, err = fsys.OpenFile(p("a/big"), os.O_CREATE|os.O_RDWR, 0o600)
	if must(err) {
		f.WriteAt(big, 3000)
		f.WriteAt(make([]byte, 5000), 4000)
		f.WriteAt([]byte{9}, 20000)
		f.Truncate(12000)
		f.Truncate(16000)
		b, err := fsys.ReadFile(p("a/big"))
		want := make([]byte, 16000)
		copy(want[3000:], big)
		clear(want[4000:9000])
		clear(want[12000:])
		rec("big %s %d %v", class(err), len(b), bytes.Equal(b, want))
		got := make([]byte, 6000)
		n, err := f.ReadAt(got, 2500)
		rec("big readat %d %s %v", n, class(err), bytes.Equal(got, want[2500:8500]))
		f.Close()
	}
	return out
}
