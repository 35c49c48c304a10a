package mem

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
)

// Store is an in-memory objstore.Store.
type Store struct {
	clk clock.Clock

	mu      sync.Mutex
	objects map[string]object
}

type object struct {
	body    []byte
	etag    string
	modTime time.Time
}

var _ objstore.Store = (*Store)(nil)

// New returns an empty store whose LastModified times come from clk
// (clock.Real() if nil).
func New(clk clock.Clock) *Store {
	if clk == nil {
		clk = clock.Real()
	}
	return &Store{clk: clk, objects: make(map[string]object)}
}

func etagOf(body []byte) string {
	sum := md5.Sum(body)
	return hex.EncodeToString(sum[:])
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, string, error) {
	o, err := s.lookup(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return slices.Clone(o.body), o.etag, nil
}

// GetReader implements objstore.Store. Stored bodies are never modified
// (writes replace them), so the stream reads the stored body directly.
func (s *Store) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	o, err := s.lookup(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return io.NopCloser(bytes.NewReader(o.body)), o.etag, nil
}

// lookup returns the object at key for Get and GetReader.
func (s *Store) lookup(ctx context.Context, key string) (object, error) {
	if err := check(ctx, key); err != nil {
		return object{}, fmt.Errorf("mem get %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return object{}, fmt.Errorf("mem get %q: %w", key, objstore.ErrNotFound)
	}
	return o, nil
}

// PutIfAbsent implements objstore.Store.
func (s *Store) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	if err := check(ctx, key); err != nil {
		return "", fmt.Errorf("mem put-if-absent %q: %w", key, err)
	}
	etag, err := s.create(key, slices.Clone(body))
	if err != nil {
		return "", fmt.Errorf("mem put-if-absent %q: %w", key, err)
	}
	return etag, nil
}

// PutIfAbsentFrom implements objstore.Store.
func (s *Store) PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (string, error) {
	if err := check(ctx, key); err != nil {
		return "", fmt.Errorf("mem put-if-absent %q: %w", key, err)
	}
	if err := objstore.CheckBody(r, size); err != nil {
		return "", fmt.Errorf("mem put-if-absent %q: %w", key, err)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", fmt.Errorf("mem put-if-absent %q: read body: %w", key, err)
	}
	etag, err := s.create(key, body)
	if err != nil {
		return "", fmt.Errorf("mem put-if-absent %q: %w", key, err)
	}
	return etag, nil
}

// create stores body, which the store now owns, under key unless key exists.
func (s *Store) create(key string, body []byte) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; ok {
		return "", objstore.ErrPreconditionFailed
	}
	if other, ok := s.nestingConflictLocked(key); ok {
		return "", fmt.Errorf("%w: %q already exists and MinIO would hide the deeper key from List", objstore.ErrInvalidKey, other)
	}
	return s.putLocked(key, body), nil
}

// PutIfMatch implements objstore.Store.
func (s *Store) PutIfMatch(ctx context.Context, key string, body []byte, etag string) (string, error) {
	if err := check(ctx, key); err != nil {
		return "", fmt.Errorf("mem put-if-match %q: %w", key, err)
	}
	if err := objstore.ValidateETag(etag); err != nil {
		return "", fmt.Errorf("mem put-if-match %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok || o.etag != etag {
		return "", fmt.Errorf("mem put-if-match %q: %w", key, objstore.ErrPreconditionFailed)
	}
	return s.putLocked(key, slices.Clone(body)), nil
}

// nestingConflictLocked finds an existing key that is a '/'-prefix of key or
// has key as one (see the objstore contract).
func (s *Store) nestingConflictLocked(key string) (string, bool) {
	for i := range len(key) {
		if key[i] == '/' {
			if _, ok := s.objects[key[:i]]; ok {
				return key[:i], true
			}
		}
	}
	for k := range s.objects {
		if strings.HasPrefix(k, key+"/") {
			return k, true
		}
	}
	return "", false
}

// putLocked stores body, which the store now owns.
func (s *Store) putLocked(key string, body []byte) string {
	o := object{body: body, etag: etagOf(body), modTime: s.clk.Now()}
	s.objects[key] = o
	return o.etag
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return fmt.Errorf("mem delete %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, key)
	return nil
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mem list %q: %w", prefix, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []objstore.ObjectInfo
	for k, o := range s.objects {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			out = append(out, objstore.ObjectInfo{Key: k, Size: int64(len(o.body)), ETag: o.etag, LastModified: o.modTime})
		}
	}
	slices.SortFunc(out, func(a, b objstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Close implements objstore.Store; the contents stay readable afterwards
// because tests often inspect a store after closing what used it.
func (s *Store) Close() error { return nil }

func check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return objstore.ValidateKey(key)
}
