package fs

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/vfs"
)

const (
	formatFile  = "FORMAT"
	formatLine  = "netsy-objstore-fs 1\n"
	objSuffix   = ".obj"
	dirSuffix   = ".dir"
	stripes     = 256
	headerMagic = "NTSYOBJ\x01"
	headerLen   = len(headerMagic) + md5.Size
)

// Store is an objstore.Store over a local directory.
type Store struct {
	fsys    vfs.FS
	root    string
	objects string
	locks   string
	tmp     string
	lk      locker
	closed  sync.Once
	// dirs holds the directories under objects/ this Store has made
	// durable itself (created if missing, then their parent fsync'd), so
	// it fsyncs a parent once per directory, not once per write.
	dirsMu sync.Mutex
	dirs   map[string]bool
}

var _ objstore.Store = (*Store)(nil)

// Open opens (creating if needed) the store rooted at dir on the real
// disk. A non-empty directory that is not a store is refused, so a
// mistyped path cannot scatter Netsy's files into someone's home
// directory.
func Open(dir string) (*Store, error) { return OpenFS(vfs.OS(), dir) }

// OpenFS is Open on the file system fsys: tests put the store on a disk
// that can lose power (package crashfs). Only on vfs.OS() do writers lock
// each other out with flock, across processes; on any other fsys the
// Stores of one process open on the same fsys and root share in-memory
// locks instead (see the package doc), and fsys must be comparable (a
// pointer, as *crashfs.FS is) so that they can find each other.
func OpenFS(fsys vfs.FS, dir string) (*Store, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fs store %q: %w", dir, err)
	}
	s := &Store{
		fsys:    fsys,
		root:    root,
		objects: filepath.Join(root, "objects"),
		locks:   filepath.Join(root, "locks"),
		tmp:     filepath.Join(root, "tmp"),
		dirs:    map[string]bool{},
	}
	if err := s.open(); err != nil {
		return nil, fmt.Errorf("fs store %q: %w", root, err)
	}
	return s, nil
}

func (s *Store) open() error {
	if err := s.fsys.MkdirAll(s.root, 0o755); err != nil {
		return err
	}
	// The root's own name must survive a power loss before any object in
	// it is acknowledged.
	if err := s.fsys.SyncDir(filepath.Dir(s.root)); err != nil {
		return err
	}
	if err := claimFormat(s.fsys, s.root); err != nil {
		return err
	}
	for _, d := range []string{s.objects, s.locks, s.tmp} {
		if err := s.fsys.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := s.fsys.SyncDir(s.root); err != nil {
		return err
	}
	s.dirs[s.objects] = true
	if s.fsys == vfs.OS() {
		s.lk = newFlockLocker(s.locks)
	} else {
		lk, err := openMemLocker(s.fsys, s.root)
		if err != nil {
			return err
		}
		s.lk = lk
	}
	if err := s.sweepTemps(); err != nil {
		s.lk.close()
		return fmt.Errorf("remove orphaned temp files: %w", err)
	}
	return nil
}

// claimFormat writes the FORMAT marker into an empty root or checks the one
// already there. O_EXCL makes two processes opening a fresh root agree.
// The marker is durable, and its name too, before anything else is made
// under the root: a root that holds more than a marker always has a whole
// one.
func claimFormat(fsys vfs.FS, root string) error {
	marker := filepath.Join(root, formatFile)
	got, err := fsys.ReadFile(marker)
	switch {
	case err == nil && string(got) == formatLine:
		return nil
	case err == nil && strings.HasPrefix(formatLine, string(got)):
		// A claim that has not finished: another process is writing the
		// marker now, or a power loss cut it short (the name survived but
		// not all of the line). No store has opened this root yet, since
		// Open returns only once the marker is durable, so finish the
		// claim; two processes doing so write the same bytes.
		return writeFormat(fsys, marker, os.O_WRONLY)
	case err == nil:
		return fmt.Errorf("unsupported layout %q in %s", strings.TrimSpace(string(got)), formatFile)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	entries, err := fsys.ReadDir(root)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("directory is not empty and has no %s marker; refusing to use it as an object store", formatFile)
	}
	err = writeFormat(fsys, marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if errors.Is(err, fs.ErrExist) {
		return claimFormat(fsys, root) // another process won the race; check its marker
	}
	return err
}

// writeFormat writes the marker line at the start of the file opened with
// flag, and makes it and its name durable.
func writeFormat(fsys vfs.FS, marker string, flag int) error {
	f, err := fsys.OpenFile(marker, flag, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(formatLine), 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return fsys.SyncDir(filepath.Dir(marker))
}

// Root returns the store's absolute root directory.
func (s *Store) Root() string { return s.root }

// objectPath maps a validated key to its file; see the package doc for why
// every segment carries a suffix.
func (s *Store) objectPath(key string) string {
	segs := strings.Split(key, "/")
	parts := make([]string, 0, len(segs)+1)
	parts = append(parts, s.objects)
	for _, seg := range segs[:len(segs)-1] {
		parts = append(parts, seg+dirSuffix)
	}
	parts = append(parts, segs[len(segs)-1]+objSuffix)
	return filepath.Join(parts...)
}

func etagOf(body []byte) string {
	sum := md5.Sum(body)
	return hex.EncodeToString(sum[:])
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := check(ctx, key); err != nil {
		return nil, "", fmt.Errorf("fs get %q: %w", key, err)
	}
	data, err := s.fsys.ReadFile(s.objectPath(key))
	if err != nil {
		return nil, "", fmt.Errorf("fs get %q: %w", key, mapErr(err))
	}
	body, etag, err := unwrap(data)
	if err != nil {
		return nil, "", fmt.Errorf("fs get %q: %w", key, err)
	}
	return body, etag, nil
}

// unwrap checks an object file's header and MD5 and returns its body.
func unwrap(data []byte) (body []byte, etag string, err error) {
	etag, err = parseHeader(data)
	if err != nil {
		return nil, "", err
	}
	body = data[headerLen:]
	if got := etagOf(body); got != etag {
		return nil, "", fmt.Errorf("object is corrupt: body MD5 %s, header says %s", got, etag)
	}
	return body, etag, nil
}

// ObjectBody returns the body of an object file read straight from disk
// (a file under the store's objects/ directory), checked as Get checks it,
// for tools handed a path instead of a key. isObject is false, with no
// error, when data does not begin with the object header: it is not one of
// this store's object files.
func ObjectBody(data []byte) (body []byte, isObject bool, err error) {
	if len(data) < len(headerMagic) || string(data[:len(headerMagic)]) != headerMagic {
		return nil, false, nil
	}
	body, _, err = unwrap(data)
	return body, true, err
}

// GetReader implements objstore.Store. The body's MD5 is checked as it is
// read: a damaged file fails the read that reaches its end instead of
// returning io.EOF, so it is reported, never served whole.
func (s *Store) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	if err := check(ctx, key); err != nil {
		return nil, "", fmt.Errorf("fs get %q: %w", key, err)
	}
	f, err := s.fsys.Open(s.objectPath(key))
	if err != nil {
		return nil, "", fmt.Errorf("fs get %q: %w", key, mapErr(err))
	}
	var hdr [headerLen]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("fs get %q: object is corrupt: short header: %w", key, err)
	}
	etag, err := parseHeader(hdr[:])
	if err != nil {
		f.Close()
		return nil, "", fmt.Errorf("fs get %q: %w", key, err)
	}
	return &verifyingReader{key: key, f: f, h: md5.New(), etag: etag}, etag, nil
}

// verifyingReader streams an object's body and compares its MD5 with the
// header's at the end.
type verifyingReader struct {
	key  string
	f    vfs.File
	h    hash.Hash
	etag string
	err  error
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	switch {
	case err == io.EOF:
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.etag {
			err = fmt.Errorf("fs get %q: object is corrupt: body MD5 %s, header says %s", v.key, got, v.etag)
		}
	case err != nil:
		err = fmt.Errorf("fs get %q: read body: %w", v.key, err)
	}
	v.err = err
	return n, err
}

func (v *verifyingReader) Close() error { return v.f.Close() }

func parseHeader(data []byte) (string, error) {
	if len(data) < headerLen || string(data[:len(headerMagic)]) != headerMagic {
		return "", errors.New("object is corrupt: bad header")
	}
	return hex.EncodeToString(data[len(headerMagic):headerLen]), nil
}

// PutIfAbsent implements objstore.Store.
func (s *Store) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	if err := check(ctx, key); err != nil {
		return "", fmt.Errorf("fs put-if-absent %q: %w", key, err)
	}
	path := s.objectPath(key)
	var etag string
	err := s.withLock(ctx, key, func() error {
		if err := s.absent(path); err != nil {
			return err
		}
		var err error
		etag, err = s.write(path, body)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("fs put-if-absent %q: %w", key, err)
	}
	return etag, nil
}

// absent returns nil if no object is at path, ErrPreconditionFailed if
// one is, or the error that keeps it from telling.
func (s *Store) absent(path string) error {
	switch _, err := s.fsys.Lstat(path); {
	case err == nil:
		return objstore.ErrPreconditionFailed
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return nil
}

// PutIfAbsentFrom implements objstore.Store. The body is streamed into a
// temp file before the key's lock is taken, so a large body never holds up
// writers of other keys in its stripe; the lock covers only the check and
// the rename.
func (s *Store) PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (string, error) {
	if err := check(ctx, key); err != nil {
		return "", fmt.Errorf("fs put-if-absent %q: %w", key, err)
	}
	path := s.objectPath(key)
	// A cheap early refusal, before the body is copied; checked again
	// under the lock.
	if err := s.absent(path); err != nil {
		return "", fmt.Errorf("fs put-if-absent %q: %w", key, err)
	}
	if err := objstore.CheckBody(r, size); err != nil {
		return "", fmt.Errorf("fs put-if-absent %q: %w", key, err)
	}
	tmp, etag, err := s.writeTemp(ctx, r, size)
	if err != nil {
		return "", fmt.Errorf("fs put-if-absent %q: %w", key, err)
	}
	defer tmp.close()
	err = s.withLock(ctx, key, func() error {
		if err := s.absent(path); err != nil {
			return err
		}
		return s.install(tmp, path)
	})
	if err != nil {
		tmp.remove() // a no-op once installed
		return "", fmt.Errorf("fs put-if-absent %q: %w", key, err)
	}
	return etag, nil
}

// PutIfMatch implements objstore.Store.
func (s *Store) PutIfMatch(ctx context.Context, key string, body []byte, etag string) (string, error) {
	if err := check(ctx, key); err != nil {
		return "", fmt.Errorf("fs put-if-match %q: %w", key, err)
	}
	if err := objstore.ValidateETag(etag); err != nil {
		return "", fmt.Errorf("fs put-if-match %q: %w", key, err)
	}
	path := s.objectPath(key)
	var newETag string
	err := s.withLock(ctx, key, func() error {
		cur, err := readInfo(s.fsys, path)
		if errors.Is(err, fs.ErrNotExist) {
			return objstore.ErrPreconditionFailed // contract: missing key fails the precondition
		}
		if err != nil {
			return err
		}
		if cur.etag != etag {
			return objstore.ErrPreconditionFailed
		}
		newETag, err = s.write(path, body)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("fs put-if-match %q: %w", key, err)
	}
	return newETag, nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return fmt.Errorf("fs delete %q: %w", key, err)
	}
	path := s.objectPath(key)
	err := s.withLock(ctx, key, func() error {
		err := s.fsys.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return s.fsys.SyncDir(filepath.Dir(path))
	})
	if err != nil {
		return fmt.Errorf("fs delete %q: %w", key, err)
	}
	return nil
}

// write replaces path with body atomically and durably; the caller holds the key's lock.
func (s *Store) write(path string, body []byte) (string, error) {
	tmp, etag, err := s.writeTemp(context.Background(), bytes.NewReader(body), int64(len(body)))
	if err != nil {
		return "", err
	}
	defer tmp.close()
	if err := s.install(tmp, path); err != nil {
		return "", err
	}
	return etag, nil
}

// tempFile is a body being written under tmp/. Its descriptor stays open
// and claimed (flock'd on the real disk) until it is installed or removed,
// which is how a sweep at Open tells a live writer's file (of this or
// another process) from an orphan left by a crash.
type tempFile struct {
	fsys    vfs.FS
	f       vfs.File
	path    string
	release func()
}

// close releases the descriptor and the claim; the file stays where it is.
func (t *tempFile) close() {
	t.f.Close()
	t.release()
}

// remove deletes the file if it is still a temp file.
func (t *tempFile) remove() { t.fsys.Remove(t.path) }

// createTemp creates a new empty file under tmp/, as os.CreateTemp does.
func (s *Store) createTemp() (vfs.File, error) {
	for {
		name := filepath.Join(s.tmp, "put-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err := s.fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// writeTemp writes an object file holding the size bytes of r to a new
// durable temp file and returns it, still open and locked, with the body's
// ETag. It takes no key lock: only install makes the file an object. The
// header, which holds the MD5, is written last, so the body is read once.
func (s *Store) writeTemp(ctx context.Context, r io.Reader, size int64) (_ *tempFile, etag string, err error) {
	f, release, err := s.lk.createTemp(s.createTemp)
	if err != nil {
		return nil, "", err
	}
	tmp := &tempFile{fsys: s.fsys, f: f, path: f.Name(), release: release}
	defer func() {
		if err != nil {
			tmp.close()
			tmp.remove()
		}
	}()
	if _, err := f.Seek(int64(headerLen), io.SeekStart); err != nil {
		return nil, "", err
	}
	h := md5.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, r}, size))
	if err != nil {
		return nil, "", fmt.Errorf("read body: %w", err)
	}
	if n != size {
		return nil, "", fmt.Errorf("read body: %w after %d of %d bytes", io.ErrUnexpectedEOF, n, size)
	}
	var sum [md5.Size]byte
	h.Sum(sum[:0])
	header := make([]byte, 0, headerLen)
	header = append(append(header, headerMagic...), sum[:]...)
	if _, err := f.WriteAt(header, 0); err != nil {
		return nil, "", err
	}
	if err := f.Sync(); err != nil {
		return nil, "", err
	}
	return tmp, hex.EncodeToString(sum[:]), nil
}

// install renames the temp file over path and makes the rename durable;
// the caller holds the key's lock and closes tmp afterwards. tmp is removed
// if it does not become the object.
func (s *Store) install(tmp *tempFile, path string) error {
	dir := filepath.Dir(path)
	if err := s.mkdirs(dir); err != nil {
		tmp.remove()
		return err
	}
	if err := s.fsys.Rename(tmp.path, path); err != nil {
		tmp.remove()
		s.forgetDir(dir) // it may have been removed behind the store's back
		return err
	}
	return s.fsys.SyncDir(dir)
}

// sweepTemps removes the temp files no writer holds: bodies a crashed
// process left half-written or never installed. A writer claims its temp
// file as it creates it, and keeps it claimed until it is installed or
// removed, so a file nobody claims is an orphan.
func (s *Store) sweepTemps() error {
	entries, err := s.fsys.ReadDir(s.tmp)
	if err != nil {
		return err
	}
	var paths []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "put-") {
			paths = append(paths, filepath.Join(s.tmp, e.Name()))
		}
	}
	if len(paths) == 0 {
		return nil
	}
	return s.lk.sweep(paths)
}

// ctxReader fails reads once ctx ends, so a canceled streamed write stops
// reading its body.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// mkdirs creates dir and any missing parents below the objects root, and
// fsyncs the parent of each one this Store has not made durable yet, so
// the new object's path itself survives a crash, not just its content. It
// fsyncs a parent even when the directory was there already: the writer
// that made it a moment ago (of this process or another) may not have
// fsync'd the parent yet, and an object acknowledged under a name the
// disk may still lose would be lost with it.
func (s *Store) mkdirs(dir string) error {
	if s.knownDir(dir) {
		return nil
	}
	rel, err := filepath.Rel(s.objects, dir)
	if err != nil || rel == "." {
		return err
	}
	cur := s.objects
	for seg := range strings.SplitSeq(rel, string(filepath.Separator)) {
		next := filepath.Join(cur, seg)
		if !s.knownDir(next) {
			if err := s.fsys.MkdirAll(next, 0o755); err != nil {
				return err
			}
			if err := s.fsys.SyncDir(cur); err != nil {
				return err
			}
			s.dirsMu.Lock()
			s.dirs[next] = true
			s.dirsMu.Unlock()
		}
		cur = next
	}
	return nil
}

func (s *Store) knownDir(dir string) bool {
	s.dirsMu.Lock()
	defer s.dirsMu.Unlock()
	return s.dirs[dir]
}

func (s *Store) forgetDir(dir string) {
	s.dirsMu.Lock()
	defer s.dirsMu.Unlock()
	if dir != s.objects {
		delete(s.dirs, dir)
	}
}

// withLock runs fn holding key's stripe lock in this process and across processes.
func (s *Store) withLock(ctx context.Context, key string, fn func() error) error {
	unlock, err := s.lk.lock(ctx, stripeOf(key))
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

func stripeOf(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % stripes)
}

// objInfo is what an object file's header and inode say about it.
type objInfo struct {
	etag    string
	size    int64
	modTime time.Time
}

// readInfo reads the header of the object file at path; header and stat come
// from one descriptor so they describe the same version of the object.
func readInfo(fsys vfs.FS, path string) (objInfo, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return objInfo{}, err
	}
	defer f.Close()
	var hdr [headerLen]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return objInfo{}, fmt.Errorf("object %s is corrupt: short header: %w", path, err)
	}
	etag, err := parseHeader(hdr[:])
	if err != nil {
		return objInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return objInfo{}, err
	}
	return objInfo{etag: etag, size: st.Size() - int64(headerLen), modTime: st.ModTime()}, nil
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	l := lister{fsys: s.fsys, ctx: ctx, prefix: prefix, startAfter: startAfter, limit: limit}
	if _, err := l.walk(s.objects, ""); err != nil {
		return nil, fmt.Errorf("fs list %q after %q: %w", prefix, startAfter, err)
	}
	return l.out, nil
}

type lister struct {
	fsys               vfs.FS
	ctx                context.Context
	prefix, startAfter string
	limit              int
	out                []objstore.ObjectInfo
}

type entry struct {
	sortKey string // the key (object) or key prefix ending in '/' (directory)
	name    string
	dir     bool
}

// walk appends dir's matching objects in key order and reports whether the
// limit has been reached.
func (l *lister) walk(dir, keyPrefix string) (bool, error) {
	if err := l.ctx.Err(); err != nil {
		return false, err
	}
	des, err := l.fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	entries := make([]entry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		switch {
		case de.IsDir() && strings.HasSuffix(name, dirSuffix):
			entries = append(entries, entry{sortKey: keyPrefix + strings.TrimSuffix(name, dirSuffix) + "/", name: name, dir: true})
		case de.Type().IsRegular() && strings.HasSuffix(name, objSuffix):
			entries = append(entries, entry{sortKey: keyPrefix + strings.TrimSuffix(name, objSuffix), name: name})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.sortKey, b.sortKey) })
	for _, e := range entries {
		path := filepath.Join(dir, e.name)
		if e.dir {
			d := e.sortKey
			if !strings.HasPrefix(d, l.prefix) && !strings.HasPrefix(l.prefix, d) {
				continue
			}
			// Every key below d is longer than d and starts with it, so the
			// whole subtree is <= startAfter exactly when startAfter is past d
			// without being inside it.
			if l.startAfter > d && !strings.HasPrefix(l.startAfter, d) {
				continue
			}
			if done, err := l.walk(path, d); done || err != nil {
				return done, err
			}
			continue
		}
		key := e.sortKey
		if !strings.HasPrefix(key, l.prefix) || key <= l.startAfter {
			continue
		}
		info, err := readInfo(l.fsys, path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since ReadDir; it is simply not part of this listing
		}
		if err != nil {
			return false, err
		}
		l.out = append(l.out, objstore.ObjectInfo{Key: key, Size: info.size, ETag: info.etag, LastModified: info.modTime})
		if l.limit > 0 && len(l.out) >= l.limit {
			return true, nil
		}
	}
	return false, nil
}

// Close implements objstore.Store. The store holds no descriptors between
// calls; off the real disk, Close lets go of the shared in-memory locks.
func (s *Store) Close() error {
	s.closed.Do(s.lk.close)
	return nil
}

func check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return objstore.ValidateKey(key)
}

// mapErr is the one place OS errors become objstore errors.
func mapErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	}
	return err
}
