package objwal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/netsy-io/netsy/internal/datafile"
)

// maxSpare bounds the buffers (a batch's frames, a chunk's body) kept for
// reuse while the uploader is idle, so one burst does not pin its memory
// for the life of the process. While entries keep coming they are kept up
// to spareLimit.
const maxSpare = 1 << 20

// spareLimit bounds a buffer kept for reuse while there is work: an async
// batch is up to ChunkMaxBytes, its buffer also holds what arrived while
// the previous chunk was going up, and Append doubles a buffer that runs
// out of room, so one of 4 MiB batches can reach 16 MiB. Allocating each
// one afresh was the write path's largest allocation (heap profile of 100k
// puts of 256 B on one async node: 35 MB in newPendBuf, every byte put).
func (l *Log) spareLimit() int { return max(maxSpare, 4*l.o.ChunkMaxBytes) }

// maxHold caps how long a sync-mode batch waits for writers to come back
// (see holdLocked).
const maxHold = 5 * time.Millisecond

// batch is the run of entries one chunk carries.
type batch struct {
	buf   []byte // frames; ents index into it
	ents  []pendEntry
	bytes int64
}

// runUploader is the write path to object storage: it takes everything
// pending (in async mode: what is fsync'd and due), uploads it as the next
// chunk, and repeats. One chunk is in flight at a time, so entries appended
// during a PUT ride in the next one.
//
// body is the buffer chunks are sealed into. Only this goroutine ever
// holds it, and a chunk's PUT (with all its retries) returns before the
// next chunk is sealed, so a body is never overwritten while the store
// may still read it for the object it stores (objstore.Store.PutIfAbsent
// keeps nothing once it returns; see doc.go for HTTP's early answers).
func (l *Log) runUploader(ctx context.Context, upDone chan struct{}) {
	defer l.wg.Done()
	defer close(upDone)
	var body []byte
	for {
		b, wait, idle, done := l.takeBatch()
		switch {
		case done:
			return
		case b == nil:
			if idle && cap(body) > maxSpare {
				body = nil // see maxSpare
			}
			if !l.idle(ctx, wait) {
				return
			}
		default:
			var ok bool
			if body, ok = l.upload(ctx, b, body); !ok {
				return
			}
		}
	}
}

// takeBatch returns the next batch, or how long to wait for one (0: until
// kicked) and whether nothing is left to upload (idle), or done when the
// uploader should stop.
func (l *Log) takeBatch() (b *batch, wait time.Duration, idle, done bool) {
	now := l.clk.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, 0, false, true
	}
	n := len(l.pend)
	if !l.eager() {
		// Only what is fsync'd goes up, so a checkpoint naming an uploaded
		// chunk never runs ahead of the local log.
		for n > 0 && l.pend[n-1].index > l.localSynced {
			n--
		}
	}
	if n == 0 {
		idle := len(l.pend) == 0 && l.inflightBytes == 0
		if idle {
			close(l.upIdle)
			l.upIdle = make(chan struct{})
			if cap(l.spare) > maxSpare {
				l.spare = nil // see maxSpare
			}
		}
		return nil, 0, idle, l.closing && len(l.pend) == 0
	}
	if wait := l.holdLocked(n, now); wait > 0 {
		return nil, wait, false, false
	}
	l.expect = 0
	take, size := 0, 0
	for take < n {
		sz := l.pend[take].end - l.pend[take].off
		if take > 0 && size+sz > l.o.ChunkMaxBytes {
			break
		}
		size += sz
		take++
	}
	if !l.eager() && !l.closing && !l.flushing && take == n && size < l.o.ChunkMaxBytes {
		if age := now.Sub(l.pend[0].at); age < l.o.ChunkMaxAge {
			return nil, l.o.ChunkMaxAge - age, false, false
		}
	}
	end := l.pend[take-1].end
	b = &batch{buf: l.pendBuf[:end], ents: append(l.spareEnts[:0], l.pend[:take]...), bytes: int64(size)}
	l.spareEnts = nil
	if l.eager() {
		// The local fsync of the batch runs while it uploads; the wal
		// never calls back into objwal holding its own lock.
		l.wal.SyncTo(l.pend[take-1].index)
	}
	// The batch keeps the old buffer; Append continues in a new one.
	rest := l.pend[take:]
	l.pendBuf = append(l.newPendBuf(), l.pendBuf[end:]...)
	for i := range rest {
		rest[i].off += datafile.HeaderSize - end
		rest[i].end += datafile.HeaderSize - end
	}
	l.pend = append(l.pend[:0], rest...)
	l.pendBytes -= int64(size)
	l.inflightBytes, l.inflightAt = int64(size), b.ents[0].at
	return b, 0, false, false
}

// minPendRoom is the free space Append keeps in pendBuf before framing an
// entry; below it the buffer doubles.
const minPendRoom = 16 << 10

// newPendBuf returns an empty pending buffer: the spare, or a new one with
// room for a batch a quarter larger than the last, so that a busy async log
// does not grow each buffer from nothing to megabytes, leaving the smaller
// ones as garbage on a heap kept small on purpose (gctune).
func (l *Log) newPendBuf() []byte {
	buf := l.spare
	l.spare = nil
	if buf == nil {
		buf = make([]byte, 0, max(l.lastBatch+l.lastBatch/4, minPendRoom))
	}
	return datafile.AppendHeader(buf[:0], datafile.KindChunk)
}

// holdLocked returns how long a sync-mode batch of the n pending entries
// should still wait for more (0: go now). When a PUT completes, the writers
// it answers tend to come straight back; starting the next PUT at once would
// carry only the entries that arrived during the last one, so the writers
// settle into two alternating half-size groups and every PUT carries half of
// them. Instead the next PUT waits until as many entries are pending as were
// waiting when the last PUT completed (in flight plus pending), but no
// longer than that PUT took (capped at maxHold): a writer that was answered
// late under load comes back within about one PUT, and the hold never costs
// more than one PUT's latency. A PUT of one entry (a lone writer, the first
// write after idle) sets no expectation, so a lone writer is never held.
// Nothing is acknowledged earlier for it: only the upload is delayed.
func (l *Log) holdLocked(n int, now time.Time) time.Duration {
	if !l.eager() || l.closing || l.flushing || n >= l.expect || l.pendBytes >= int64(l.o.ChunkMaxBytes) {
		return 0
	}
	return max(l.holdUntil.Sub(now), 0)
}

// idle waits for a kick, wait to pass (if > 0), or the end.
func (l *Log) idle(ctx context.Context, wait time.Duration) bool {
	var tc <-chan time.Time
	if wait > 0 {
		t := l.clk.NewTimer(wait)
		defer t.Stop()
		tc = t.C()
	}
	select {
	case <-l.upKick:
	case <-tc:
	case <-ctx.Done():
		return false
	}
	return true
}

// upload puts b as the next chunk, sealed into body's memory, and reports
// it; it returns the buffer to seal the next chunk into, and false to stop
// the uploader.
func (l *Log) upload(ctx context.Context, b *batch, body []byte) ([]byte, bool) {
	body, err := encodeChunk(l.sealer, body[:0], b.buf, b.ents)
	l.mu.Lock()
	seq := l.nextSeq
	if err != nil {
		l.failLocked(fmt.Errorf("encode %s: %w", walKey(seq), err))
		l.mu.Unlock()
		return nil, false
	}
	if first := b.ents[0].index; first != l.uploaded+1 {
		// Whatever led here, a chunk that does not continue the bucket's
		// history would fork it: refuse for good.
		l.failLocked(fmt.Errorf("%s would start at index %d but the bucket's history ends at %d: refusing to upload a chunk that does not follow it",
			walKey(seq), first, l.uploaded))
		l.mu.Unlock()
		return nil, false
	}
	l.mu.Unlock()

	started := l.clk.Now()
	if err := l.putChunk(ctx, seq, body); err != nil {
		if errors.Is(err, ErrFenced) {
			l.mu.Lock()
			l.failLocked(err)
			l.mu.Unlock()
		}
		// Otherwise Close gave up on a failing store: the entries stay
		// unreported, and the next Open uploads them from the local log.
		return nil, false
	}

	done := l.clk.Now()
	last := b.ents[len(b.ents)-1].index
	l.mu.Lock()
	l.nextSeq = seq + 1
	l.uploaded = last
	l.chunks = append(l.chunks, chunkRef{seq: seq, last: last})
	l.inflightBytes, l.inflightAt = 0, time.Time{}
	l.failing = nil
	l.gcSeen[walKey(seq)] = done
	l.stats.Puts++
	l.stats.Entries += uint64(len(b.ents))
	l.stats.Bytes += uint64(len(body))
	l.stats.MaxEntries = max(l.stats.MaxEntries, uint64(len(b.ents)))
	if len(b.ents) > 1 {
		l.expect = len(b.ents) + len(l.pend)
		l.holdUntil = done.Add(min(done.Sub(started), maxHold))
	}
	// The batch's uncompressed size sizes the next buffer.
	l.lastBatch = len(b.buf) + datafile.FooterSize
	if cap(b.buf) <= l.spareLimit() && l.spare == nil {
		// pendBuf took the spare in takeBatch; this one becomes the next.
		// Nothing refers to it any more: the chunk's bytes are in body,
		// and Append framed into the buffer takeBatch gave pendBuf.
		l.spare = b.buf[:0]
	}
	if l.spareEnts == nil {
		l.spareEnts = b.ents[:0]
	}
	l.reportLocked()
	l.mu.Unlock()
	if l.hooks.putDone != nil {
		l.hooks.putDone(seq, nil)
	}
	kick(l.maintKick)
	if cap(body) > l.spareLimit() {
		body = nil
	}
	return body, true
}

// putChunk creates wal/{seq} with body. Transient failures retry the same
// seq with the same bytes until it works, the log is fenced, or Close gives
// up; a retry can therefore never put these entries at a second seq.
func (l *Log) putChunk(ctx context.Context, seq uint64, body []byte) error {
	backoff := minBackoff
	for attempt := 1; ; attempt++ {
		err := l.putAttempt(ctx, walKey(seq), body)
		// A success is reported by the caller once its state is updated,
		// so a test woken by the hook sees the upload's effects.
		if err != nil && l.hooks.putDone != nil {
			l.hooks.putDone(seq, err)
		}
		if err == nil || errors.Is(err, ErrFenced) {
			return err
		}
		l.mu.Lock()
		l.failing = err
		l.stats.Retries++
		closing := l.closing
		l.mu.Unlock()
		if closing || ctx.Err() != nil {
			return fmt.Errorf("%w while %s is failing: %v", ErrClosed, walKey(seq), err)
		}
		if attempt == 1 || attempt%10 == 0 {
			l.log.Warn("upload failed; retrying the same chunk", "key", walKey(seq), "attempt", attempt, "error", err)
		}
		t := l.clk.NewTimer(backoff)
		select {
		case <-t.C():
		case <-l.closingCh:
		case <-ctx.Done():
		}
		t.Stop()
		backoff = min(2*backoff, maxBackoff)
	}
}

// putAttempt makes one attempt. A refused create is read back: our own
// bytes mean an earlier attempt landed and only its answer was lost.
func (l *Log) putAttempt(ctx context.Context, key string, body []byte) error {
	ctx, cancel := l.attemptCtx(ctx, attemptTimeout)
	defer cancel()
	_, err := l.store.PutIfAbsent(ctx, key, body)
	if err == nil {
		return nil
	}
	if !isPrecondition(err) {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	got, _, gerr := l.store.Get(ctx, key)
	switch {
	case gerr == nil && bytes.Equal(got, body):
		l.log.Info("an earlier attempt of this upload had landed", "key", key)
		return nil
	case gerr == nil, isNotFound(gerr):
		return fmt.Errorf("upload %s: the object holds another writer's chunk: %w", key, ErrFenced)
	default:
		return fmt.Errorf("upload %s: read back after a refused create: %w", key, gerr)
	}
}
