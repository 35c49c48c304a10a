package mvcc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// spill keeps large values out of the Go heap: the store writes them to
// append-only files in a directory of their own and holds only a spillRef.
// Reads pread them back, so they live in the kernel's page cache, which the
// kernel can drop under memory pressure and which does not count against
// the process's RSS, as bbolt's pages do for etcd.
//
// The files are a cache, not a record: the WAL and the object store hold
// every value, so the files are deleted at open and at close, and nothing
// is ever fsync'd. A file that cannot be written stops taking values (they
// stay in memory instead); one that cannot be read makes the store fail
// (see Store.Err).
//
// Compaction and rollback turn values into garbage. Once garbage outweighs
// the live values (and a floor), Compact copies the live values into a new
// file and deletes the old ones when nothing reads them any more.
//
// spill is owned by its Store: appends, drops and file switches happen
// under the store's write lock, reads under its read lock, except reads
// through a Capture, which pins the files it may read.
type spill struct {
	dir string
	gen int
	cur *spillFile
	// files are the files holding live values, cur included.
	files []*spillFile
	// live and garbage count value bytes over all files.
	live, garbage int64
	// err is set once cur cannot be written; nothing is spilled after.
	err error
	// rewriteMin is the least garbage worth a rewrite.
	rewriteMin int64
	// maxOff is the most bytes a file takes (spillMaxOff; tests lower
	// it).
	maxOff int64
}

// errSpillTooLong refuses a value longer than a spillRef can locate; it
// stays in memory, and the spill files go on taking shorter ones.
var errSpillTooLong = errors.New("mvcc: value too long to spill")

// spillRef locates one spilled value: its file, and its offset and
// length packed into one word. It is part of every spilled version (see
// spilledVersion), so its size is paid once per key: 16 bytes instead of
// 24 brought a new key's keyIndex from 192 to 160 bytes (with its key no
// longer held twice; issue 22 item 5). The packing bounds a spilled value
// to spillMaxLen bytes (larger ones stay in memory) and a file to
// spillMaxOff (past it the spill files take no more values).
type spillRef struct {
	f   *spillFile
	pos uint64 // offset<<spillLenBits | length
}

const (
	spillLenBits = 24
	// spillMaxLen is the longest value spilled: 16 MiB - 1, ten times
	// etcd's default request limit.
	spillMaxLen = 1<<spillLenBits - 1
	// spillMaxOff bounds a file's size: 1 TiB.
	spillMaxOff = 1 << (64 - spillLenBits)
)

func makeSpillRef(f *spillFile, off int64, n int) spillRef {
	return spillRef{f: f, pos: uint64(off)<<spillLenBits | uint64(n)}
}

// off is where the value starts in its file.
func (r spillRef) off() int64 { return int64(r.pos >> spillLenBits) }

// n is the value's length.
func (r spillRef) n() int { return int(r.pos & spillMaxLen) }

// spillFile is one append-only file. Its newest bytes wait in buf until a
// whole buffer is written with one syscall; the buffer written last stays
// in prev, so the values watchers read just after they were written come
// from memory either way.
type spillFile struct {
	path    string
	f       *os.File
	size    int64 // bytes appended, buffered ones included
	flushed int64 // bytes on file; buf holds size-flushed more
	buf     []byte
	prev    []byte // the file's bytes [flushed-len(prev), flushed)
	live    int64

	// mu guards pins and retired: a Capture releases its pins from the
	// goroutine that saves it.
	mu      sync.Mutex
	pins    int
	retired bool
	closed  bool
}

const (
	spillBuf        = 256 << 10
	spillRewriteMin = 64 << 20
	spillPrefix     = "values-"
)

// openSpill clears dir of files an earlier process left and opens the
// first file.
func openSpill(dir string) (*spill, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mvcc: value spill directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("mvcc: value spill directory: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), spillPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return nil, fmt.Errorf("mvcc: remove stale value file: %w", err)
			}
		}
	}
	sp := &spill{dir: dir, rewriteMin: spillRewriteMin, maxOff: spillMaxOff}
	if sp.cur, err = sp.newFile(); err != nil {
		return nil, err
	}
	return sp, nil
}

func (sp *spill) newFile() (*spillFile, error) {
	sp.gen++
	path := filepath.Join(sp.dir, fmt.Sprintf("%s%06d", spillPrefix, sp.gen))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("mvcc: create value file: %w", err)
	}
	sf := &spillFile{path: path, f: f}
	sp.files = append(sp.files, sf)
	return sf, nil
}

// put appends v to the current file. It fails once the file could not be
// written; the caller then keeps v in memory.
func (sp *spill) put(v []byte) (spillRef, error) {
	if sp.err != nil {
		return spillRef{}, sp.err
	}
	if len(v) > spillMaxLen {
		return spillRef{}, errSpillTooLong
	}
	f := sp.cur
	if f.size+int64(len(v)) > sp.maxOff {
		sp.err = fmt.Errorf("mvcc: value file %s: full at %d bytes", f.path, f.size)
		return spillRef{}, sp.err
	}
	r := makeSpillRef(f, f.size, len(v))
	f.buf = append(f.buf, v...)
	f.size += int64(len(v))
	f.live += int64(len(v))
	sp.live += int64(len(v))
	if len(f.buf) >= spillBuf {
		sp.err = f.flush()
	}
	return r, nil
}

// flush writes buf to the file. On failure buf is kept: the values in it
// stay readable from memory.
func (f *spillFile) flush() error {
	if len(f.buf) == 0 {
		return nil
	}
	if _, err := f.f.WriteAt(f.buf, f.flushed); err != nil {
		return fmt.Errorf("mvcc: write value file %s: %w", f.path, err)
	}
	f.flushed = f.size
	next := f.prev[:0]
	if cap(f.buf) > 2*spillBuf {
		// One huge value: do not keep its buffer around.
		f.prev, next = nil, nil
	} else {
		f.prev = f.buf
	}
	f.buf = next
	return nil
}

// read returns the value r locates in a new slice.
func (r spillRef) read() ([]byte, error) {
	return r.readInto(make([]byte, r.n()))
}

// readInto fills dst (len r.n()) with the value.
func (r spillRef) readInto(dst []byte) ([]byte, error) {
	f := r.f
	if r.off() >= f.flushed {
		copy(dst, f.buf[r.off()-f.flushed:])
		return dst, nil
	}
	if p := f.flushed - int64(len(f.prev)); r.off() >= p {
		copy(dst, f.prev[r.off()-p:])
		return dst, nil
	}
	if _, err := f.readAt(dst, r.off(), len(dst)); err != nil {
		return nil, err
	}
	return dst, nil
}

// readAt reads the file at off into dst; fewer than need bytes is an
// error.
func (f *spillFile) readAt(dst []byte, off int64, need int) (int, error) {
	n, err := f.f.ReadAt(dst, off)
	if n >= need {
		return n, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, fmt.Errorf("mvcc: read value file %s at %d: %w", f.path, off, err)
}

// drop records that the value r locates is no longer referenced; a file
// other than the current one is deleted once it holds nothing live.
func (sp *spill) drop(r spillRef) {
	f := r.f
	f.live -= int64(r.n())
	sp.live -= int64(r.n())
	sp.garbage += int64(r.n())
	if f.live == 0 && f != sp.cur {
		sp.retire(f)
	}
}

// retire forgets f, whose values are all dropped or moved.
func (sp *spill) retire(f *spillFile) {
	for i, x := range sp.files {
		if x == f {
			sp.files = append(sp.files[:i], sp.files[i+1:]...)
			break
		}
	}
	sp.garbage -= f.size
	f.retire()
}

// retire closes and deletes f now, or when the last Capture that pinned
// it lets go.
func (f *spillFile) retire() {
	f.mu.Lock()
	f.retired = true
	done := f.pins == 0
	f.mu.Unlock()
	if done {
		f.close()
	}
}

func (f *spillFile) pin() {
	f.mu.Lock()
	f.pins++
	f.mu.Unlock()
}

func (f *spillFile) unpin() {
	f.mu.Lock()
	f.pins--
	done := f.pins == 0 && f.retired
	f.mu.Unlock()
	if done {
		f.close()
	}
}

// close closes and deletes f; a second call does nothing. The files are a
// cache, so errors have no one to go to.
func (f *spillFile) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	_ = f.f.Close()
	_ = os.Remove(f.path)
}

// needsRewrite reports whether the garbage is worth copying the live values
// into a new file.
func (sp *spill) needsRewrite() bool {
	return sp.garbage >= sp.rewriteMin && sp.garbage > sp.live
}

// close closes and deletes every file, or for a file a Capture still
// reads, lets the Capture's Release do it.
func (sp *spill) close() {
	for _, f := range sp.files {
		f.retire()
	}
	sp.files, sp.cur = nil, nil
}
