package objwal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

const (
	walPrefix  = "wal/"
	snapPrefix = "snapshots/"
	// listPage is how many keys one List call asks for.
	listPage = 1000
	// fetchWindow is how many chunk GETs a catch-up keeps in flight: restore
	// time is dominated by round trips, not bytes.
	fetchWindow = 32
	// deleteWindow is how many DELETEs garbage collection runs at once.
	deleteWindow = 8
)

func walKey(seq uint64) string   { return fmt.Sprintf("%s%020d", walPrefix, seq) }
func snapKey(rev int64) string   { return fmt.Sprintf("%s%020d", snapPrefix, rev) }
func parseSeq(key string) uint64 { return parseNum(key, walPrefix) }

// parseNum returns the number in a key of our layout, or 0 if the key is
// not one (0 is never a valid seq or snapshot revision key here).
func parseNum(key, prefix string) uint64 {
	s, ok := strings.CutPrefix(key, prefix)
	if !ok || len(s) != 20 {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// encodeChunk seals file, a chunk header followed by the frames of ents
// (as pendBuf holds them), into a zstd-compressed chunk object (file's
// bytes are overwritten): chunks are kept at least MinWALAge, so their size
// is most of what the bucket holds. The same entries always give the same
// bytes, which the read-back after a refused PUT relies on. An empty chunk (no entries, a footer with zero ranges) is
// a valid datafile chunk; it is what a claim carries when there is nothing
// to upload.
func encodeChunk(sl *datafile.ChunkSealer, dst, file []byte, ents []pendEntry) ([]byte, error) {
	sum := datafile.Footer{Records: uint64(len(ents))}
	if n := len(ents); n > 0 {
		sum.FirstIndex, sum.FirstRevision = ents[0].index, ents[0].revision
		sum.LastIndex, sum.LastRevision = ents[n-1].index, ents[n-1].revision
	}
	if sl == nil {
		return datafile.SealCompressed(file, sum)
	}
	return sl.AppendSeal(dst, file, sum)
}

// encodeEntries builds a chunk object from decoded entries (Open's claim)
// with sl (nil: a sealer of its own).
func encodeEntries(sl *datafile.ChunkSealer, entries []*netsyv1.Entry) ([]byte, error) {
	file := datafile.AppendHeader(nil, datafile.KindChunk)
	ents := make([]pendEntry, 0, len(entries))
	for _, e := range entries {
		off := len(file)
		var err error
		if file, err = datafile.FrameEntry(file, e); err != nil {
			return nil, err
		}
		ents = append(ents, pendEntry{index: e.Index, revision: e.Revision, off: off, end: len(file)})
	}
	return encodeChunk(sl, nil, file, ents)
}

// attemptCtx bounds one object-storage call by timeout on the injected
// clock.
func (l *Log) attemptCtx(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return clock.WithTimeout(parent, l.clk, timeout)
}

// transferTimeout bounds one attempt to move an object of size bytes
// (a snapshot): a stuck call is still retried, but a large object on a
// slow link is not cut off and retried forever.
func transferTimeout(size int64) time.Duration {
	return attemptTimeout + time.Duration(size/minTransferRate)*time.Second
}

// retry runs call until it succeeds, returns an error stop says to keep,
// or attempts transient failures have happened (attempts <= 0: until ctx
// ends). Each attempt gets attemptTimeout; waits between attempts back off
// on the injected clock.
func (l *Log) retry(ctx context.Context, attempts int, what string, stop func(error) bool, call func(ctx context.Context) error) error {
	return l.retryFor(ctx, attemptTimeout, attempts, what, stop, call)
}

// retryFor is retry with timeout for each attempt.
func (l *Log) retryFor(ctx context.Context, timeout time.Duration, attempts int, what string, stop func(error) bool, call func(ctx context.Context) error) error {
	backoff := minBackoff
	for n := 1; ; n++ {
		actx, cancel := l.attemptCtx(ctx, timeout)
		err := call(actx)
		cancel()
		if err == nil || (stop != nil && stop(err)) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		// Bounded retries are start-up's: a store that will never answer
		// fails it at once. A running log keeps retrying, since an
		// operator may fix the bucket or rotate the credentials meanwhile.
		if attempts > 0 && errors.Is(err, objstore.ErrMisconfigured) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if attempts > 0 && n >= attempts {
			return fmt.Errorf("%s: giving up after %d attempts: %w", what, n, err)
		}
		l.log.Warn("object storage call failed; retrying", "op", what, "attempt", n, "backoff", backoff, "error", err)
		if err := l.clk.Sleep(ctx, backoff); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func isPrecondition(err error) bool { return errors.Is(err, objstore.ErrPreconditionFailed) }
func isNotFound(err error) bool     { return errors.Is(err, objstore.ErrNotFound) }

// openGet reads key during Open, retrying transient failures.
func (l *Log) openGet(ctx context.Context, key string) ([]byte, error) {
	return l.getObject(ctx, key, openAttempts)
}

// getObject reads key, retrying transient failures up to attempts times
// (a missing key is not retried).
func (l *Log) getObject(ctx context.Context, key string, attempts int) ([]byte, error) {
	var body []byte
	err := l.retry(ctx, attempts, "get "+key, isNotFound, func(ctx context.Context) error {
		var err error
		body, _, err = l.store.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return body, nil
}

// listAll lists every key under prefix after startAfter, page by page,
// retrying transient failures of each page a bounded number of times.
func (l *Log) listAll(ctx context.Context, prefix, startAfter string, attempts int, fn func(objstore.ObjectInfo) (bool, error)) error {
	return listPages(ctx, startAfter, func(ctx context.Context, after string) (page []objstore.ObjectInfo, err error) {
		err = l.retry(ctx, attempts, "list "+prefix, nil, func(ctx context.Context) error {
			page, err = l.store.List(ctx, prefix, after, listPage)
			return err
		})
		return page, err
	}, fn)
}

// listPages calls fn with every object list returns, page by page from
// startAfter, until fn says stop or fails.
func listPages(ctx context.Context, startAfter string, list func(ctx context.Context, after string) ([]objstore.ObjectInfo, error), fn func(objstore.ObjectInfo) (bool, error)) error {
	for {
		page, err := list(ctx, startAfter)
		if err != nil {
			return err
		}
		for _, o := range page {
			more, err := fn(o)
			if err != nil || !more {
				return err
			}
		}
		if len(page) < listPage {
			return nil
		}
		startAfter = page[len(page)-1].Key
	}
}

// listChunks returns the seqs of the chunks after afterSeq, in order.
func (l *Log) listChunks(ctx context.Context, afterSeq uint64) ([]uint64, error) {
	var seqs []uint64
	err := l.listAll(ctx, walPrefix, walKey(afterSeq), openAttempts, func(o objstore.ObjectInfo) (bool, error) {
		seq := parseSeq(o.Key)
		if seq == 0 {
			return false, fmt.Errorf("list %s: %q is not a wal chunk key", walPrefix, o.Key)
		}
		seqs = append(seqs, seq)
		return true, nil
	})
	return seqs, err
}

// fetched is one downloaded chunk.
type fetched struct {
	seq     uint64
	entries []*netsyv1.Entry
	err     error
}

// fetchChunks downloads and decodes the chunks seqs, up to fetchWindow at
// a time, and hands them to fn strictly in order. It returns fn's first
// error or the first download or decode error, naming the object.
func (l *Log) fetchChunks(ctx context.Context, seqs []uint64, fn func(seq uint64, entries []*netsyv1.Entry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Downloads still running when fn fails are canceled and waited for.
	defer func() {
		cancel()
		wg.Wait()
	}()
	results := make([]chan fetched, len(seqs))
	for i := range results {
		results[i] = make(chan fetched, 1)
	}
	sem := make(chan struct{}, fetchWindow)
	next := 0 // index of the next download to start
	launch := func() {
		for next < len(seqs) {
			select {
			case sem <- struct{}{}:
			default:
				return
			}
			i, seq := next, seqs[next]
			next++
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := walKey(seq)
				body, err := l.openGet(ctx, key)
				var f fetched
				f.seq = seq
				switch {
				case isNotFound(err):
					f.err = fmt.Errorf("chunk %s disappeared while it was read (was it garbage-collected by another writer?): %w", key, err)
				case err != nil:
					f.err = err
				default:
					f.entries, _, f.err = datafile.DecodeChunk(key, body)
					if f.err != nil {
						f.err = fmt.Errorf("chunk %s: %w", key, f.err)
					}
				}
				results[i] <- f
			}()
		}
	}
	for i := range seqs {
		launch()
		f := <-results[i]
		<-sem
		if f.err != nil {
			return f.err
		}
		if err := fn(f.seq, f.entries); err != nil {
			return err
		}
	}
	return nil
}

// newestSnapshot downloads and verifies the newest snapshot in the bucket;
// nil if there is none. It is decoded as it streams in, so the encoded
// object is never held in memory next to the decoded one.
func (l *Log) newestSnapshot(ctx context.Context) (*datafile.Snapshot, error) {
	var newest objstore.ObjectInfo
	err := l.listAll(ctx, snapPrefix, "", openAttempts, func(o objstore.ObjectInfo) (bool, error) {
		if parseNum(o.Key, snapPrefix) == 0 {
			return false, fmt.Errorf("list %s: %q is not a snapshot key", snapPrefix, o.Key)
		}
		newest = o
		return true, nil
	})
	if err != nil || newest.Key == "" {
		return nil, err
	}
	key := newest.Key
	start := l.clk.Now()
	var s *datafile.Snapshot
	err = l.readSnapshot(ctx, key, newest.Size, openAttempts, func(r io.Reader) error {
		var err error
		s, err = datafile.DecodeSnapshot(key, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", key, err)
	}
	if snapKey(s.Header.Revision) != key {
		return nil, fmt.Errorf("snapshot %s: header says revision %d", key, s.Header.Revision)
	}
	l.log.Info("downloaded snapshot", "key", key, "index", s.Header.Index, "rev", s.Header.Revision,
		"wal_seq", s.Header.WalSeq, "bytes", newest.Size, "duration", l.clk.Since(start))
	return s, nil
}

// readSnapshot streams the snapshot at key (about size bytes) into read,
// retrying up to attempts times (<= 0: until the log closes) when the
// store fails, whether on opening the object or part-way through it. An
// error of read's own (damage) and ErrNotFound are returned at once.
func (l *Log) readSnapshot(ctx context.Context, key string, size int64, attempts int, read func(io.Reader) error) error {
	var damaged error
	err := l.retryFor(ctx, transferTimeout(size), attempts, "get "+key, isNotFound, func(ctx context.Context) error {
		rc, _, err := l.store.GetReader(ctx, key)
		if err != nil {
			return err
		}
		defer rc.Close()
		tr := &trackingReader{r: rc}
		err = read(tr)
		if err != nil && tr.err == nil {
			damaged = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return damaged
}

// trackingReader remembers the first error its source returned other than
// io.EOF, so a failed decode can be told apart as a broken transfer (worth
// retrying) or damage (not).
type trackingReader struct {
	r   io.Reader
	err error
}

func (t *trackingReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF && t.err == nil {
		t.err = err
	}
	return n, err
}

// uploadSnapshot creates key from the local snapshot file for index,
// streamed. The store rewinds the file before each attempt, so a retry
// sends the same bytes again; ErrPreconditionFailed is returned at once.
func (l *Log) uploadSnapshot(ctx context.Context, key string, index uint64, attempts int) (size int64, err error) {
	f, size, err := l.wal.OpenSnapshot(index)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	err = l.retryFor(ctx, transferTimeout(size), attempts, "put "+key, isPrecondition, func(ctx context.Context) error {
		_, err := l.store.PutIfAbsentFrom(ctx, key, f, size)
		return err
	})
	return size, err
}
