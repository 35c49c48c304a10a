package crashfs

import (
	"cmp"
	"errors"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/vfs"
)

// ErrPowerLost is wrapped by every error of an FS after Cut.
var ErrPowerLost = errors.New("crashfs: power lost")

var errDirRename = errors.New("crashfs: renaming a directory is not supported")

// FS is the in-memory file system. The zero value is not usable; call New.
type FS struct {
	mu  sync.Mutex
	clk clock.Clock // stamps modification times
	cut bool
	// budget counts down the disk-changing calls left before the cut
	// when counting (see CutAfter).
	budget   int
	counting bool
	changes  int // disk-changing calls so far
	nextID   uint64
	// dirs holds every directory by its cleaned path, "/" and "." included.
	dirs map[string]*dir
}

type dir struct {
	perm    os.FileMode
	cur     map[string]*inode // what lookups see
	durable map[string]*inode // as of the last SyncDir
}

type inode struct {
	id      uint64 // creation order, so Crash draws from rng in a fixed order
	perm    os.FileMode
	cur     content
	durable content
	ops     []op // changes since the last fsync, oldest first
}

var _ vfs.FS = (*FS)(nil)

// New returns an empty file system holding the directories "/" and ".",
// stamping modification times with the real clock.
func New() *FS { return NewWithClock(clock.Real()) }

// NewWithClock is New stamping modification times with clk.
func NewWithClock(clk clock.Clock) *FS {
	return &FS{clk: clk, dirs: map[string]*dir{"/": newDir(0o755), ".": newDir(0o755)}}
}

func newDir(perm os.FileMode) *dir {
	return &dir{perm: perm, cur: map[string]*inode{}, durable: map[string]*inode{}}
}

// Cut pulls the power cord: every later call on fsys or its Files fails
// with ErrPowerLost.
func (fsys *FS) Cut() {
	fsys.mu.Lock()
	fsys.cut = true
	fsys.mu.Unlock()
}

// CutAfter lets n more calls that change the disk or make something
// durable (OpenFile with O_CREATE or O_TRUNC, Write, WriteAt, Truncate,
// Sync, Remove, Rename, MkdirAll, SyncDir) go through and cuts the power
// as the next one starts: it fails and changes nothing. CutAfter(0) is Cut.
func (fsys *FS) CutAfter(n int) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if n <= 0 {
		fsys.cut = true
		return
	}
	fsys.budget, fsys.counting = n, true
}

// Changes is how many calls that change the disk (as CutAfter counts
// them) have gone through or been cut.
func (fsys *FS) Changes() int {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	return fsys.changes
}

// IsCut reports whether the power is off.
func (fsys *FS) IsCut() bool {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	return fsys.cut
}

// Crash cuts the power, if Cut has not, and returns a new FS holding what
// a reboot would find. rng chooses, for each file, how many of its writes
// and truncates since its last fsync reached the disk and whether the
// first one that did not was torn (a prefix of it written); a nil rng
// keeps exactly the durable state. Files are visited in creation order,
// so a seeded rng gives the same result for the same history. fsys itself
// stays cut and unchanged; Crash may be called on it again.
func (fsys *FS) Crash(rng *rand.Rand) *FS {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	fsys.cut = true
	var inodes []*inode
	seen := map[*inode]bool{}
	for _, d := range fsys.dirs {
		for _, ino := range d.durable {
			if !seen[ino] {
				seen[ino] = true
				inodes = append(inodes, ino)
			}
		}
	}
	slices.SortFunc(inodes, func(a, b *inode) int { return cmp.Compare(a.id, b.id) })
	after := make(map[*inode]*inode, len(inodes))
	for _, ino := range inodes {
		c := ino.durable.clone()
		if rng != nil && len(ino.ops) > 0 {
			k := rng.IntN(len(ino.ops) + 1)
			for _, o := range ino.ops[:k] {
				o.apply(&c)
			}
			if k < len(ino.ops) {
				if o := ino.ops[k]; !o.trunc && o.n > 1 && rng.IntN(2) == 0 {
					o.torn(1 + rng.Int64N(o.n-1)).apply(&c)
				}
			}
		}
		after[ino] = &inode{id: ino.id, perm: ino.perm, cur: c, durable: c.clone()}
	}
	out := &FS{clk: fsys.clk, nextID: fsys.nextID, dirs: make(map[string]*dir, len(fsys.dirs))}
	for p, d := range fsys.dirs {
		nd := newDir(d.perm)
		for name, ino := range d.durable {
			nd.cur[name] = after[ino]
			nd.durable[name] = after[ino]
		}
		out.dirs[p] = nd
	}
	return out
}

// check fails a call once the power is off; a call that changes the disk
// also spends one from the CutAfter budget.
func (fsys *FS) check(changes bool) error {
	if !fsys.cut && changes {
		fsys.changes++
	}
	if !fsys.cut && changes && fsys.counting {
		if fsys.budget == 0 {
			fsys.cut = true
		}
		fsys.budget--
	}
	if fsys.cut {
		return ErrPowerLost
	}
	return nil
}

func pathErr(op, path string, err error) error { return &fs.PathError{Op: op, Path: path, Err: err} }

// clean turns a name into a key of dirs, or of a directory's entries under
// its parent's key.
func clean(name string) string { return filepath.Clean(name) }

// parent returns the directory that holds p's entry.
func (fsys *FS) parent(p string) (*dir, error) {
	dp := filepath.Dir(p)
	if d := fsys.dirs[dp]; d != nil {
		return d, nil
	}
	if _, err := fsys.file(dp); err == nil {
		return nil, syscall.ENOTDIR
	}
	return nil, syscall.ENOENT
}

// file returns the file at p, which is not a directory.
func (fsys *FS) file(p string) (*inode, error) {
	d, err := fsys.parent(p)
	if err != nil {
		return nil, err
	}
	if ino := d.cur[filepath.Base(p)]; ino != nil {
		return ino, nil
	}
	return nil, syscall.ENOENT
}

// OpenFile opens name as os.OpenFile does. A directory can be opened
// read-only; syncing that File is SyncDir.
func (fsys *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.check(flag&(os.O_CREATE|os.O_TRUNC) != 0); err != nil {
		return nil, pathErr("open", name, err)
	}
	f, err := fsys.openLocked(name, flag, perm)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return f, nil
}

func (fsys *FS) openLocked(name string, flag int, perm os.FileMode) (*file, error) {
	if name == "" {
		return nil, syscall.ENOENT
	}
	p := clean(name)
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	f := &file{fsys: fsys, name: name,
		read:   acc == os.O_RDONLY || acc == os.O_RDWR,
		write:  acc == os.O_WRONLY || acc == os.O_RDWR,
		append: flag&os.O_APPEND != 0,
		sync:   flag&os.O_SYNC != 0,
	}
	if _, ok := fsys.dirs[p]; ok {
		switch {
		case flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
			return nil, syscall.EEXIST
		case f.write || flag&os.O_TRUNC != 0:
			return nil, syscall.EISDIR
		}
		f.dir = p
		return f, nil
	}
	d, err := fsys.parent(p)
	if err != nil {
		return nil, err
	}
	base := filepath.Base(p)
	ino := d.cur[base]
	switch {
	case ino != nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, syscall.EEXIST
	case ino == nil && flag&os.O_CREATE == 0:
		return nil, syscall.ENOENT
	case ino == nil:
		fsys.nextID++
		ino = &inode{id: fsys.nextID, perm: perm.Perm()}
		// The inode and its times exist as soon as its name does.
		ino.cur.mtime = fsys.clk.Now()
		ino.durable.mtime = ino.cur.mtime
		d.cur[base] = ino
	case flag&os.O_TRUNC != 0 && f.write:
		ino.change(op{trunc: true, off: 0, at: fsys.clk.Now()})
	}
	f.ino = ino
	return f, nil
}

// Open opens name read-only.
func (fsys *FS) Open(name string) (vfs.File, error) { return fsys.OpenFile(name, os.O_RDONLY, 0) }

// ReadFile returns the content of the file name.
func (fsys *FS) ReadFile(name string) ([]byte, error) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.check(false); err != nil {
		return nil, pathErr("open", name, err)
	}
	p := clean(name)
	if _, ok := fsys.dirs[p]; ok {
		return nil, pathErr("read", name, syscall.EISDIR)
	}
	ino, err := fsys.file(p)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	b := make([]byte, ino.cur.size)
	ino.cur.readAt(b, 0)
	return b, nil
}

// Remove removes a file, or an empty directory (durably at once).
func (fsys *FS) Remove(name string) error {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.check(true); err != nil {
		return pathErr("remove", name, err)
	}
	p := clean(name)
	if d, ok := fsys.dirs[p]; ok {
		if p == "/" || p == "." {
			return pathErr("remove", name, syscall.EBUSY)
		}
		if len(d.cur) > 0 || len(fsys.subdirs(p)) > 0 {
			return pathErr("remove", name, syscall.ENOTEMPTY)
		}
		delete(fsys.dirs, p)
		return nil
	}
	d, err := fsys.parent(p)
	if err != nil {
		return pathErr("remove", name, err)
	}
	base := filepath.Base(p)
	if d.cur[base] == nil {
		return pathErr("remove", name, syscall.ENOENT)
	}
	delete(d.cur, base)
	return nil
}

func (fsys *FS) subdirs(p string) []string {
	var out []string
	for q := range fsys.dirs {
		if q != p && filepath.Dir(q) == p {
			out = append(out, q)
		}
	}
	return out
}

// Rename moves a file to a new name, replacing a file there. Directories
// cannot be renamed.
func (fsys *FS) Rename(oldpath, newpath string) error {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	linkErr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err} }
	if err := fsys.check(true); err != nil {
		return linkErr(err)
	}
	op, np := clean(oldpath), clean(newpath)
	if _, ok := fsys.dirs[op]; ok {
		return linkErr(errDirRename)
	}
	od, err := fsys.parent(op)
	if err != nil {
		return linkErr(err)
	}
	ino := od.cur[filepath.Base(op)]
	if ino == nil {
		return linkErr(syscall.ENOENT)
	}
	if _, ok := fsys.dirs[np]; ok {
		// As os.Rename: it refuses an existing directory itself.
		return linkErr(syscall.EEXIST)
	}
	nd, err := fsys.parent(np)
	if err != nil {
		return linkErr(err)
	}
	if op == np {
		return nil
	}
	delete(od.cur, filepath.Base(op))
	nd.cur[filepath.Base(np)] = ino
	return nil
}

// ReadDir lists the directory name sorted by file name.
func (fsys *FS) ReadDir(name string) ([]os.DirEntry, error) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.check(false); err != nil {
		return nil, pathErr("open", name, err)
	}
	p := clean(name)
	d, ok := fsys.dirs[p]
	if !ok {
		if _, err := fsys.file(p); err == nil {
			return nil, pathErr("readdirent", name, syscall.ENOTDIR)
		}
		return nil, pathErr("open", name, syscall.ENOENT)
	}
	var out []os.DirEntry
	for base, ino := range d.cur {
		out = append(out, fs.FileInfoToDirEntry(ino.info(base)))
	}
	for _, q := range fsys.subdirs(p) {
		out = append(out, fs.FileInfoToDirEntry(fsys.dirs[q].info(filepath.Base(q))))
	}
	slices.SortFunc(out, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// MkdirAll creates path and its missing parents. Directories are durable
// as soon as they exist.
func (fsys *FS) MkdirAll(path string, perm os.FileMode) error {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.check(true); err != nil {
		return pathErr("mkdir", path, err)
	}
	p := clean(path)
	var missing []string
	for q := p; fsys.dirs[q] == nil; q = filepath.Dir(q) {
		if _, err := fsys.file(q); err == nil {
			return pathErr("mkdir", q, syscall.ENOTDIR)
		}
		missing = append(missing, q)
	}
	for _, q := range slices.Backward(missing) {
		fsys.dirs[q] = newDir(perm.Perm())
	}
	return nil
}

// Stat describes name.
func (fsys *FS) Stat(name string) (os.FileInfo, error) { return fsys.stat("stat", name) }

// Lstat is Stat: there are no symbolic links.
func (fsys *FS) Lstat(name string) (os.FileInfo, error) { return fsys.stat("lstat", name) }

func (fsys *FS) stat(op, name string) (os.FileInfo, error) {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.check(false); err != nil {
		return nil, pathErr(op, name, err)
	}
	if name == "" {
		return nil, pathErr(op, name, syscall.ENOENT)
	}
	p := clean(name)
	if d, ok := fsys.dirs[p]; ok {
		return d.info(filepath.Base(p)), nil
	}
	ino, err := fsys.file(p)
	if err != nil {
		return nil, pathErr(op, name, err)
	}
	return ino.info(filepath.Base(p)), nil
}

// SyncDir makes the entries of dir durable.
func (fsys *FS) SyncDir(dir string) error {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if err := fsys.check(true); err != nil {
		return pathErr("sync", dir, err)
	}
	return fsys.syncDirLocked(dir)
}

func (fsys *FS) syncDirLocked(dir string) error {
	p := clean(dir)
	d, ok := fsys.dirs[p]
	if !ok {
		if _, err := fsys.file(p); err == nil {
			return pathErr("sync", dir, syscall.ENOTDIR)
		}
		return pathErr("open", dir, syscall.ENOENT)
	}
	d.durable = maps.Clone(d.cur)
	return nil
}

// change records a write or truncate and applies it to what reads see.
func (ino *inode) change(o op) {
	ino.ops = append(ino.ops, o)
	o.apply(&ino.cur)
}

func (ino *inode) fsync() {
	ino.durable = ino.cur.clone()
	ino.ops = nil
}

func (ino *inode) info(name string) os.FileInfo {
	return &fileInfo{name: name, size: ino.cur.size, mode: ino.perm, mtime: ino.cur.mtime}
}

func (d *dir) info(name string) os.FileInfo {
	return &fileInfo{name: name, mode: os.ModeDir | d.perm}
}

type fileInfo struct {
	name  string
	size  int64
	mode  os.FileMode
	mtime time.Time
}

func (i *fileInfo) Name() string       { return i.name }
func (i *fileInfo) Size() int64        { return i.size }
func (i *fileInfo) Mode() os.FileMode  { return i.mode }
func (i *fileInfo) ModTime() time.Time { return i.mtime }
func (i *fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i *fileInfo) Sys() any           { return nil }
