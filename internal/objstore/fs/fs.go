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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/netsy-io/netsy/internal/objstore"
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
	root    string
	objects string
	locks   string
	tmp     string
	// sems serialize writers of one stripe inside this process so waiting
	// honours context cancellation; flock alone would block uninterruptibly.
	sems [stripes]chan struct{}
}

var _ objstore.Store = (*Store)(nil)

// Open opens (creating if needed) the store rooted at dir. A non-empty
// directory that is not a store is refused, so a mistyped path cannot
// scatter Netsy's files into someone's home directory.
func Open(dir string) (*Store, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fs store %q: %w", dir, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("fs store %q: %w", root, err)
	}
	if err := claimFormat(root); err != nil {
		return nil, fmt.Errorf("fs store %q: %w", root, err)
	}
	s := &Store{
		root:    root,
		objects: filepath.Join(root, "objects"),
		locks:   filepath.Join(root, "locks"),
		tmp:     filepath.Join(root, "tmp"),
	}
	for _, d := range []string{s.objects, s.locks, s.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("fs store %q: %w", root, err)
		}
	}
	if err := syncDir(root); err != nil {
		return nil, fmt.Errorf("fs store %q: %w", root, err)
	}
	if err := sweepTemps(s.tmp); err != nil {
		return nil, fmt.Errorf("fs store %q: remove orphaned temp files: %w", root, err)
	}
	for i := range s.sems {
		s.sems[i] = make(chan struct{}, 1)
	}
	return s, nil
}

// claimFormat writes the FORMAT marker into an empty root or checks the one
// already there. O_EXCL makes two processes opening a fresh root agree.
func claimFormat(root string) error {
	marker := filepath.Join(root, formatFile)
	got, err := os.ReadFile(marker)
	if err == nil {
		if string(got) != formatLine {
			return fmt.Errorf("unsupported layout %q in %s", strings.TrimSpace(string(got)), formatFile)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("directory is not empty and has no %s marker; refusing to use it as an object store", formatFile)
	}
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return claimFormat(root) // another process won the race; check its marker
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(formatLine); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
	data, err := os.ReadFile(s.objectPath(key))
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
	f, err := os.Open(s.objectPath(key))
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
	f    *os.File
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
		if err := absent(path); err != nil {
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
func absent(path string) error {
	switch _, err := os.Lstat(path); {
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
	if err := absent(path); err != nil {
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
		if err := absent(path); err != nil {
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
		cur, err := readInfo(path)
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
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return syncDir(filepath.Dir(path))
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
// and flock'd until it is installed or removed, which is how a sweep at Open
// tells a live writer's file (of this or another process) from an orphan
// left by a crash.
type tempFile struct {
	f    *os.File
	path string
}

// close releases the descriptor and its lock; the file stays where it is.
func (t *tempFile) close() { t.f.Close() }

// remove deletes the file if it is still a temp file.
func (t *tempFile) remove() { os.Remove(t.path) }

// writeTemp writes an object file holding the size bytes of r to a new
// durable temp file and returns it, still open and locked, with the body's
// ETag. It takes no key lock: only install makes the file an object. The
// header, which holds the MD5, is written last, so the body is read once.
func (s *Store) writeTemp(ctx context.Context, r io.Reader, size int64) (_ *tempFile, etag string, err error) {
	f, err := os.CreateTemp(s.tmp, "put-*")
	if err != nil {
		return nil, "", err
	}
	tmp := &tempFile{f: f, path: f.Name()}
	defer func() {
		if err != nil {
			tmp.close()
			tmp.remove()
		}
	}()
	if err := tryFlock(f); err != nil {
		return nil, "", fmt.Errorf("lock temp file: %w", err)
	}
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
	if err := s.mkdirs(filepath.Dir(path)); err != nil {
		tmp.remove()
		return err
	}
	if err := os.Rename(tmp.path, path); err != nil {
		tmp.remove()
		return err
	}
	return syncDir(filepath.Dir(path))
}

// sweepTemps removes the temp files no writer holds: bodies a crashed
// process left half-written or never installed. A writer keeps its temp
// file flock'd from creation until it is installed or removed, so a file
// whose lock can be taken is an orphan. (A file created a moment ago and
// not yet locked can be swept too; its writer then fails that one write,
// which the caller retries.)
func sweepTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "put-") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // installed or removed meanwhile
		}
		if err != nil {
			return err
		}
		if tryFlock(f) == nil {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				f.Close()
				return err
			}
		}
		f.Close()
	}
	return nil
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

// mkdirs creates dir and any missing parents below the objects root,
// fsyncing each parent that gained an entry so the new object's path itself
// survives a crash, not just its content.
func (s *Store) mkdirs(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	rel, err := filepath.Rel(s.objects, dir)
	if err != nil || rel == "." {
		return err
	}
	cur := s.objects
	for seg := range strings.SplitSeq(rel, string(filepath.Separator)) {
		next := filepath.Join(cur, seg)
		err := os.Mkdir(next, 0o755)
		switch {
		case err == nil:
			if err := syncDir(cur); err != nil {
				return err
			}
		case !errors.Is(err, fs.ErrExist):
			return err
		}
		cur = next
	}
	return nil
}

// withLock runs fn holding key's stripe lock in this process and across processes.
func (s *Store) withLock(ctx context.Context, key string, fn func() error) error {
	h := fnv.New32a()
	h.Write([]byte(key))
	stripe := h.Sum32() % stripes
	select {
	case s.sems[stripe] <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.sems[stripe] }()
	// Checked again after waiting: a caller that gave up must not write.
	if err := ctx.Err(); err != nil {
		return err
	}
	lf, err := os.OpenFile(filepath.Join(s.locks, fmt.Sprintf("%03d.lock", stripe)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close() // closing the descriptor releases the flock
	if err := flock(lf); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	return fn()
}

// tryFlock takes f's exclusive flock if no descriptor holds it, without
// waiting: how temp files tell a live writer from an orphan.
func tryFlock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// objInfo is what an object file's header and inode say about it.
type objInfo struct {
	etag    string
	size    int64
	modTime time.Time
}

// readInfo reads the header of the object file at path; header and stat come
// from one descriptor so they describe the same version of the object.
func readInfo(path string) (objInfo, error) {
	f, err := os.Open(path)
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
	l := lister{ctx: ctx, prefix: prefix, startAfter: startAfter, limit: limit}
	if _, err := l.walk(s.objects, ""); err != nil {
		return nil, fmt.Errorf("fs list %q after %q: %w", prefix, startAfter, err)
	}
	return l.out, nil
}

type lister struct {
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
	des, err := os.ReadDir(dir)
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
		info, err := readInfo(path)
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

// Close implements objstore.Store; the store holds no descriptors between calls.
func (s *Store) Close() error { return nil }

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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return d.Close()
}
