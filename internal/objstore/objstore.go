package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Store is Netsy's permanent store. Implementations are safe for concurrent use.
type Store interface {
	// Get returns the object's body and ETag, or ErrNotFound.
	Get(ctx context.Context, key string) (body []byte, etag string, err error)
	// GetReader is Get for bodies too large to hold in memory: it returns
	// the body as a stream, valid while ctx is, which the caller must
	// close. A read error reports damage or a broken transfer; the stream
	// never ends early with io.EOF.
	GetReader(ctx context.Context, key string) (body io.ReadCloser, etag string, err error)
	// PutIfAbsent creates key (If-None-Match: *); ErrPreconditionFailed if it exists.
	// The store does not keep body once the call returns: the caller may
	// reuse it (objwal builds the next chunk in the same buffer).
	PutIfAbsent(ctx context.Context, key string, body []byte) (etag string, err error)
	// PutIfAbsentFrom is PutIfAbsent for bodies too large to hold in
	// memory: the body is r's size bytes, streamed. The store seeks r to
	// its start itself, before each attempt it makes, so r must be a
	// whole body of exactly size bytes (see CheckBody) and not be used by
	// anyone else during the call. A body that cannot be read in full
	// fails the call and creates nothing.
	PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (etag string, err error)
	// PutIfMatch replaces key only if its current ETag is etag (If-Match);
	// ErrPreconditionFailed otherwise, including when key does not exist.
	PutIfMatch(ctx context.Context, key string, body []byte, etag string) (newETag string, err error)
	// Delete removes key unconditionally; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns objects whose key starts with prefix and sorts strictly
	// after startAfter, in lexicographic byte order, at most limit of them
	// (limit <= 0: all).
	List(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error)
	// Close releases the backend's resources. Calls after Close may fail.
	Close() error
}

// ObjectInfo describes one object in a List result.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

var (
	// ErrNotFound means the key does not exist.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrPreconditionFailed means a conditional write lost: the key existed
	// for PutIfAbsent, or did not exist with the given ETag for PutIfMatch.
	ErrPreconditionFailed = errors.New("objstore: precondition failed")
	// ErrInvalidKey means the key breaks the rules in ValidateKey; it is a
	// programming error, never a transient one.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrMisconfigured means the store refused the request for a reason
	// retrying does not fix by itself: the bucket does not exist, the
	// credentials are rejected, or the region is wrong. Start-up fails on
	// it at once; a running node keeps retrying (credentials may rotate).
	ErrMisconfigured = errors.New("objstore: misconfigured")
)

// MaxKeyLen is the longest key in bytes; S3 allows 1024 and a backend prefix
// must still fit, so Netsy keeps well below it.
const MaxKeyLen = 512

// MaxSegmentLen is the longest '/'-separated key segment in bytes, so the fs
// backend can store each segment as one file name (255 bytes on common
// filesystems, minus its suffix).
const MaxSegmentLen = 200

// ValidateKey reports whether key is usable on every backend: non-empty,
// at most MaxKeyLen bytes, valid UTF-8 without control characters, and made
// of non-empty '/'-separated segments of at most MaxSegmentLen bytes that are
// neither "." nor "..". These rules are the intersection of what S3, MinIO
// (which maps keys to paths) and a local filesystem accept unchanged.
func ValidateKey(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why)
	}
	switch {
	case key == "":
		return bad("empty")
	case len(key) > MaxKeyLen:
		return bad(fmt.Sprintf("longer than %d bytes", MaxKeyLen))
	case !utf8.ValidString(key):
		return bad("not valid UTF-8")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return bad("contains a control character")
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return bad("empty path segment (leading, trailing or double '/')")
		case seg == "." || seg == "..":
			return bad("'.' or '..' path segment")
		case len(seg) > MaxSegmentLen:
			return bad(fmt.Sprintf("path segment longer than %d bytes", MaxSegmentLen))
		}
	}
	return nil
}

// CheckBody checks that r holds exactly size bytes and seeks it to its
// start, ready for PutIfAbsentFrom to stream. Checking first means a body
// of the wrong length is refused before anything is sent, the same way on
// every backend (an S3 request with a wrong Content-Length would fail only
// in the HTTP client).
func CheckBody(r io.Seeker, size int64) error {
	if size < 0 {
		return fmt.Errorf("objstore: negative body size %d", size)
	}
	end, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("objstore: measure body: %w", err)
	}
	if end != size {
		return fmt.Errorf("objstore: body holds %d bytes, the call says %d", end, size)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("objstore: rewind body: %w", err)
	}
	return nil
}

// ValidateETag rejects an empty ETag, which no object has; sending it as
// If-Match would mean different things to different servers.
func ValidateETag(etag string) error {
	if etag == "" {
		return errors.New("objstore: empty etag for PutIfMatch")
	}
	return nil
}
