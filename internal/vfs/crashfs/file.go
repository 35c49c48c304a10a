package crashfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// file is an open File: a regular file (ino) or a directory (dir).
type file struct {
	fsys   *FS
	name   string
	ino    *inode
	dir    string
	read   bool
	write  bool
	append bool
	sync   bool
	off    int64
	closed bool
}

var (
	errNegative = errors.New("negative offset")
	errAppendAt = errors.New("os: invalid use of WriteAt on file opened with O_APPEND")
)

// begin locks the FS and checks that the call may go ahead; the caller
// unlocks.
func (f *file) begin(op string, changes bool) error {
	f.fsys.mu.Lock()
	if err := f.fsys.check(changes); err != nil {
		return pathErr(op, f.name, err)
	}
	if f.closed {
		return pathErr(op, f.name, os.ErrClosed)
	}
	return nil
}

func (f *file) end() { f.fsys.mu.Unlock() }

func (f *file) Name() string { return f.name }

func (f *file) Read(p []byte) (int, error) {
	defer f.end()
	if err := f.begin("read", false); err != nil {
		return 0, err
	}
	if err := f.readable("read"); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := f.ino.cur.readAt(p, f.off)
	f.off += int64(n)
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	defer f.end()
	if err := f.begin("read", false); err != nil {
		return 0, err
	}
	if err := f.readable("read"); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("readat", f.name, errNegative)
	}
	n := f.ino.cur.readAt(p, off)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) readable(op string) error {
	switch {
	case f.ino == nil:
		return pathErr(op, f.name, syscall.EISDIR)
	case !f.read:
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

func (f *file) Write(p []byte) (int, error) {
	defer f.end()
	if err := f.begin("write", true); err != nil {
		return 0, err
	}
	if !f.write {
		return 0, pathErr("write", f.name, syscall.EBADF)
	}
	if f.append {
		f.off = f.ino.cur.size
	}
	f.writeAt(p, f.off)
	f.off += int64(len(p))
	return len(p), nil
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	defer f.end()
	if err := f.begin("write", true); err != nil {
		return 0, err
	}
	switch {
	case f.append:
		return 0, errAppendAt
	case off < 0:
		return 0, pathErr("writeat", f.name, errNegative)
	case !f.write:
		return 0, pathErr("write", f.name, syscall.EBADF)
	}
	f.writeAt(p, off)
	return len(p), nil
}

func (f *file) writeAt(p []byte, off int64) {
	if len(p) == 0 {
		return
	}
	o := op{off: off, n: int64(len(p)), at: f.fsys.clk.Now()}
	if !allZero(p) {
		o.data = append([]byte(nil), p...)
	}
	f.ino.change(o)
	if f.sync {
		f.ino.fsync()
	}
}

func (f *file) Seek(offset int64, whence int) (int64, error) {
	defer f.end()
	if err := f.begin("seek", false); err != nil {
		return 0, err
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.off
	case io.SeekEnd:
		if f.ino != nil {
			base = f.ino.cur.size
		}
	default:
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	if base+offset < 0 {
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	f.off = base + offset
	return f.off, nil
}

func (f *file) Truncate(size int64) error {
	defer f.end()
	if err := f.begin("truncate", true); err != nil {
		return err
	}
	if f.ino == nil || !f.write || size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	f.ino.change(op{trunc: true, off: size, at: f.fsys.clk.Now()})
	if f.sync {
		f.ino.fsync()
	}
	return nil
}

// Sync makes the file's content durable; for a directory, its entries.
func (f *file) Sync() error {
	defer f.end()
	if err := f.begin("sync", true); err != nil {
		return err
	}
	if f.ino == nil {
		return f.fsys.syncDirLocked(f.dir)
	}
	f.ino.fsync()
	return nil
}

func (f *file) Stat() (os.FileInfo, error) {
	defer f.end()
	if err := f.begin("stat", false); err != nil {
		return nil, err
	}
	base := filepath.Base(clean(f.name))
	if f.ino == nil {
		if d := f.fsys.dirs[f.dir]; d != nil {
			return d.info(base), nil
		}
		return &fileInfo{name: base, mode: os.ModeDir}, nil
	}
	return f.ino.info(base), nil
}

// Close releases the File; after a Cut it still does, and reports the cut.
func (f *file) Close() error {
	defer f.end()
	err := f.begin("close", false)
	f.closed = true
	return err
}
