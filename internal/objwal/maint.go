package objwal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

const (
	// checkpointEvery rate-limits metadata writes: a stale checkpoint only
	// makes the next Open re-read (and match) a few more chunks.
	checkpointEvery = time.Second
	// gcAttempts bounds retries of garbage-collection calls; what is left
	// over is collected after the next snapshot.
	gcAttempts = 3
)

// runMaintenance is the background goroutine: checkpoints, snapshots and
// garbage collection, none of which may delay an upload.
func (l *Log) runMaintenance() {
	defer l.wg.Done()
	for {
		select {
		case <-l.maintKick:
		case job := <-l.jobs:
			job()
			continue
		case <-l.ctx.Done():
			return
		}
		if err := l.checkpoint(false); err != nil {
			l.log.Warn("write metadata checkpoint", "error", err)
		}
		if s, walSeq, upload := l.readySnapshot(); s != nil {
			if upload {
				l.publishSnapshot(s, walSeq)
			} else {
				l.saveFollowerSnapshot(s)
			}
		}
	}
}

// checkpoint records the newest uploaded chunk that is also fsync'd
// locally in the metadata file, at most once per checkpointEvery unless
// forced.
func (l *Log) checkpoint(force bool) error {
	if l.meta == nil {
		// A local log that may seed an empty bucket, opened as a
		// follower: its checkpoint is written when it seeds (Claim).
		return nil
	}
	l.mu.Lock()
	var best chunkRef
	for i := len(l.chunks) - 1; i >= 0; i-- {
		if l.chunks[i].last <= l.localSynced {
			best = l.chunks[i]
			break
		}
	}
	l.mu.Unlock()
	if best.seq <= l.meta.Seq || best.last < l.meta.Index {
		return nil
	}
	now := l.clk.Now()
	if !force && now.Sub(l.metaWritten) < checkpointEvery {
		return nil
	}
	m := l.meta.clone()
	m.Seq, m.Index = best.seq, best.last
	if err := writeMetaFS(l.o.FS, l.metaPath, m); err != nil {
		return err
	}
	l.meta, l.metaWritten = m, now
	return nil
}

// readySnapshot returns the waiting snapshot once it can be saved: for
// the writer, once every chunk up to its index is uploaded and fsync'd
// (with the last chunk it wholly covers, and upload true); for a follower,
// once its entries are fsync'd here (the Primary uploads snapshots).
func (l *Log) readySnapshot() (s *datafile.Snapshot, walSeq uint64, upload bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s = l.nextSnap
	if s == nil || l.err != nil {
		return nil, 0, false
	}
	idx := s.Header.Index
	if !l.writer {
		if l.localSynced < idx {
			return nil, 0, false
		}
		l.nextSnap = nil
		return s, 0, false
	}
	if l.uploaded < idx || l.localSynced < idx {
		return nil, 0, false
	}
	l.nextSnap = nil
	for i := len(l.chunks) - 1; i >= 0; i-- {
		if l.chunks[i].last <= idx {
			// Older refs are no use to later snapshots, whose indices only grow.
			l.chunks = l.chunks[i:]
			return s, l.chunks[0].seq, true
		}
	}
	l.log.Error("no uploaded chunk ends at or before the snapshot; not uploading it", "index", idx)
	s.Release()
	return nil, 0, false
}

// saveFollowerSnapshot saves a follower's snapshot locally only, so its
// log and restart stay short. It covers entries its Primary committed, so
// Open takes it as history even where it runs ahead of the checkpoint.
// It then moves the checkpoint up (advanceFollowerCheckpoint) and only
// then deletes the segments that both cover: in quorum mode the Primary
// acknowledges before it uploads, so the snapshot may cover entries the
// bucket does not hold yet, and if this node becomes the writer its claim
// must upload them from its log (deleting them with the snapshot left the
// bucket a hole, or a restart that could not open: issue 22). The
// segments kept are the bucket's lag behind the Primary, a chunk or two,
// and go with the next snapshot.
func (l *Log) saveFollowerSnapshot(s *datafile.Snapshot) {
	defer s.Release()
	l.mu.Lock()
	if s.Header.CommitTimeMs == 0 {
		s.Header.CommitTimeMs = l.stampAtLocked(s.Header.Index)
	}
	l.forgetStampsBeforeLocked(s.Header.Index)
	l.mu.Unlock()
	if err := l.wal.WriteSnapshot(s); err != nil {
		l.log.Error("save snapshot locally", "index", s.Header.Index, "error", err)
		return
	}
	l.localSnapIdx = s.Header.Index
	l.advanceFollowerCheckpoint(s.Header.Index, s.Header.Revision)
	if l.meta == nil || l.meta.Index == 0 {
		return // the bucket is not known to hold any of it
	}
	if err := l.wal.DeleteCovered(min(s.Header.Index, l.meta.Index)); err != nil {
		l.log.Warn("delete local segments a follower's snapshot covers; trying again after the next snapshot", "error", err)
	}
}

// advanceFollowerCheckpoint moves a follower's checkpoint up to its local
// snapshot (index idx, revision rev), as near as the bucket allows.
// checkpoint cannot do it: a follower uploads no chunk, so it never learns
// where a chunk ends, and its checkpoint stayed where Open left it. A
// restart then re-read every chunk since, or, once they were collected
// (or with no checkpoint at all: a follower that opened on an empty
// bucket), installed the bucket's newest snapshot and DISCARDED every
// local entry after the checkpoint, committed or not (issue 22: at 1 M
// keys a restarted replica dropped 85 k entries it held and downloaded
// them again).
//
// Two things make a checkpoint (seq, index) valid here: the chunks after
// seq hold every entry after index, and the local state holds the
// history through index, durably. The local snapshot just saved gives the
// second for any index up to idx: it covers only entries the Primary
// committed, and the bucket holds the one committed history. For the
// first, a bucket snapshot's header is enough (the chunks up to its
// wal_seq hold entries up to its index only), and so is any chunk with
// entries: the chunks from it on hold every entry from its first. So the
// newest bucket snapshot at or below idx is taken, then the chunks after
// it are searched for the last one starting at or before idx+1.
//
// Nothing past the local snapshot is vouched for: Open still compares
// that tail with the chunks and cuts it where another Primary wrote
// something else. The cost, once per local snapshot: a listing of
// snapshots/ and of the chunks after the base, one header read per new
// bucket snapshot (snapshotHead caches them), and the first record of
// each chunk the binary search reads that no earlier search did.
func (l *Log) advanceFollowerCheckpoint(idx uint64, rev int64) {
	if l.meta == nil {
		return // a local log that may seed an empty bucket: no checkpoint yet
	}
	m := l.meta.clone()
	h, err := l.snapshotAtOrBelow(idx, rev)
	if err != nil {
		if l.ctx.Err() == nil {
			l.log.Warn("find a bucket snapshot to move a follower's checkpoint to; trying again after the next snapshot", "error", err)
		}
		return
	}
	if h != nil && h.WalSeq > m.Seq && h.Index >= m.Index {
		m.Seq, m.Index = h.WalSeq, h.Index
		m.addSnapshot(h.Revision, h.WalSeq)
	}
	if m.Index < idx {
		seq, first, err := l.lastChunkStartingBy(m.Seq, idx+1)
		switch {
		case err != nil:
			if l.ctx.Err() == nil {
				l.log.Warn("search the chunks to move a follower's checkpoint", "error", err)
			}
		case seq > 0 && first-1 > m.Index:
			m.Seq, m.Index = seq-1, first-1
		}
	}
	if m.Seq == l.meta.Seq && m.Index == l.meta.Index {
		return
	}
	if err := writeMetaFS(l.o.FS, l.metaPath, m); err != nil {
		l.log.Warn("write a follower's metadata checkpoint", "error", err)
		return
	}
	l.meta, l.metaWritten = m, l.clk.Now()
	l.log.Debug("moved a follower's checkpoint", "seq", m.Seq, "index", m.Index, "local_snapshot", idx)
}

// snapshotAtOrBelow returns the header of the newest bucket snapshot whose
// index is at most idx (rev is that entry's revision), nil if none. The
// headers it caches (snapHeads) of snapshots older than the bucket's
// oldest are dropped: the writer's GC deleted them, and a follower, which
// runs none, kept every header it read for the life of the process.
func (l *Log) snapshotAtOrBelow(idx uint64, rev int64) (*netsyv1.SnapshotHeader, error) {
	var keys []string
	oldest, listed := "", false
	err := l.listAll(l.ctx, snapPrefix, "", gcAttempts, func(o objstore.ObjectInfo) (bool, error) {
		r := parseNum(o.Key, snapPrefix)
		if r == 0 {
			return true, nil
		}
		if !listed {
			oldest, listed = o.Key, true
		}
		// Revisions never go down along the log, so a snapshot of a
		// higher revision is of a higher index: none of them can do.
		if int64(r) > rev {
			return false, nil
		}
		keys = append(keys, o.Key)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	for k := range l.snapHeads {
		// Keys order as their revisions do (zero-padded); with no
		// snapshot listed, none of those cached is there any more.
		if !listed || k < oldest {
			delete(l.snapHeads, k)
		}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		h, err := l.snapshotHead(keys[i])
		if isNotFound(err) {
			continue // collected by the writer since the listing
		}
		if err != nil {
			return nil, err
		}
		if h.Index <= idx { // else: same revision, later index (lease entries)
			return h, nil
		}
	}
	return nil, nil
}

// lastChunkStartingBy binary-searches the chunks after seq (which must
// hold every entry after the checkpoint at seq) for the last one whose
// first entry is at or before idx; it returns that chunk's seq and first
// index, or seq 0 if no chunk read qualifies. An empty chunk (a claim)
// says nothing of where the next one starts, so the search stays below
// it: it may settle short of the best chunk, never past it.
//
// A step reads a chunk's first record only (datafile.FirstEntryReader),
// and what it learns is kept (chunkStarts: chunks never change once
// written) to narrow and shorten the next searches, so each chunk is
// read about once per process. Decoding whole chunks here was 25 MB of
// a replica's allocation every 3 s under put-256 (issue 22). The cache
// holds only chunks after the checkpoint searched from, which later
// searches start from or past: a few per search.
func (l *Log) lastChunkStartingBy(after, idx uint64) (seq, first uint64, err error) {
	seqs, err := l.listChunks(l.ctx, after)
	if err != nil {
		return 0, 0, err
	}
	for s := range l.chunkStarts {
		if s <= after || s > after+uint64(len(seqs)) {
			delete(l.chunkStarts, s)
		}
	}
	if len(seqs) == 0 || seqs[0] != after+1 || !dense(seqs) {
		return 0, 0, nil // collected meanwhile: leave it to the next snapshot
	}
	// seqs[lo] starts at or before idx: the chunk after a checkpoint
	// starts right after its index, which is below idx. The chunks
	// already read narrow the range first: their starts only grow with
	// their seqs.
	lo, hi := 0, len(seqs)-1
	for s, f := range l.chunkStarts {
		switch at := int(s - seqs[0]); {
		case f == 0: // an empty chunk bounds nothing but itself
		case f <= idx && at >= lo:
			lo, seq, first = at, s, f
		case f > idx && at <= hi:
			hi = at - 1
		}
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		f, err := l.chunkStart(seqs[mid])
		if err != nil {
			return 0, 0, err
		}
		if f != 0 && f <= idx {
			lo, seq, first = mid, seqs[mid], f
		} else {
			hi = mid - 1
		}
	}
	return seq, first, nil
}

// chunkStart returns the first index of the chunk at seq, 0 if it holds
// no entries, reading only its first record, once per process.
func (l *Log) chunkStart(seq uint64) (uint64, error) {
	if f, ok := l.chunkStarts[seq]; ok {
		return f, nil
	}
	key := walKey(seq)
	var e *netsyv1.Entry
	var damaged error
	err := l.retry(l.ctx, gcAttempts, "get "+key, isNotFound, func(ctx context.Context) error {
		// The rest of the body is abandoned unread.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rc, _, err := l.store.GetReader(ctx, key)
		if err != nil {
			return err
		}
		defer rc.Close()
		tr := &trackingReader{r: rc}
		e, err = l.firsts.FirstEntry(key, tr)
		if err != nil && tr.err == nil {
			damaged = err // not the transfer: no retry reads it better
			return nil
		}
		return err
	})
	if err == nil {
		err = damaged
	}
	if err != nil {
		return 0, fmt.Errorf("chunk %s: %w", key, err)
	}
	var f uint64
	if e != nil {
		f = e.Index
	}
	l.chunkStarts[seq] = f
	return f, nil
}

// publishSnapshot saves s locally and uploads it, then collects garbage.
// The checkpoint is moved to the snapshot's index first: a local snapshot
// must never cover entries a restart could not check against the bucket.
func (l *Log) publishSnapshot(s *datafile.Snapshot, walSeq uint64) {
	h := l.saveSnapshot(s, walSeq)
	s.Release()
	if h == nil {
		return
	}
	// From here on the snapshot is the local file: the upload streams it
	// from disk, so the in-memory copy (and the old values it still
	// references) can be collected while the upload runs, and the encoded
	// snapshot is never held in memory.
	key := snapKey(h.Revision)
	size, err := l.uploadSnapshot(l.ctx, key, h.Index, 0)
	switch {
	case err == nil:
		l.log.Info("uploaded snapshot", "key", key, "index", h.Index, "wal_seq", walSeq, "bytes", size)
	case isPrecondition(err):
		// Another snapshot at this revision (lease entries do not move the
		// revision) or our own earlier attempt: keep the first either way.
		other, err := l.readSnapshotHeader(key, size)
		if err != nil {
			l.log.Warn("a snapshot at this revision exists and cannot be read", "key", key, "error", err)
			return
		}
		l.log.Debug("a snapshot at this revision exists; keeping it", "key", key, "index", other.Index)
		h = other
	default:
		if l.ctx.Err() == nil {
			l.log.Warn("upload snapshot", "key", key, "error", err)
		}
		return
	}
	l.snapHeads[key] = h
	m := l.meta.clone()
	m.addSnapshot(h.Revision, h.WalSeq)
	if err := writeMetaFS(l.o.FS, l.metaPath, m); err != nil {
		l.log.Warn("write metadata after a snapshot", "error", err)
	} else {
		l.meta = m
	}
	l.gc()
	if l.hooks.snapDone != nil {
		l.hooks.snapDone(key)
	}
}

// saveSnapshot moves the checkpoint up to s and saves s locally with
// walSeq in its header, which it returns; nil if either step failed.
func (l *Log) saveSnapshot(s *datafile.Snapshot, walSeq uint64) *netsyv1.SnapshotHeader {
	h := proto.Clone(s.Header).(*netsyv1.SnapshotHeader)
	h.WalSeq = walSeq
	l.mu.Lock()
	if h.CommitTimeMs == 0 {
		h.CommitTimeMs = l.stampAtLocked(h.Index)
	}
	l.forgetStampsBeforeLocked(h.Index)
	l.mu.Unlock()
	if l.meta.Index < h.Index {
		m := l.meta.clone()
		m.Seq, m.Index = walSeq, h.Index
		if err := writeMetaFS(l.o.FS, l.metaPath, m); err != nil {
			l.log.Error("write metadata before saving a snapshot; snapshot skipped", "index", h.Index, "error", err)
			return nil
		}
		l.meta, l.metaWritten = m, l.clk.Now()
	}
	if err := l.wal.SaveSnapshot(&datafile.Snapshot{Header: h, KVs: s.KVs, Leases: s.Leases, Source: s.Source}); err != nil {
		l.log.Error("save snapshot locally", "index", h.Index, "error", err)
		return nil
	}
	l.localSnapIdx = h.Index
	return h
}

// readSnapshotHeader streams the snapshot at key (about size bytes),
// verifying every record's checksum and the footer, and returns its
// header; nothing but one record is held in memory.
func (l *Log) readSnapshotHeader(key string, size int64) (*netsyv1.SnapshotHeader, error) {
	var h *netsyv1.SnapshotHeader
	err := l.readSnapshot(l.ctx, key, size, gcAttempts, func(r io.Reader) error {
		h = nil
		dr, err := datafile.NewReader(key, r)
		if err != nil {
			return err
		}
		if h, err = firstSnapshotHeader(key, dr); err != nil {
			return err
		}
		// The rest is read only to verify every checksum and the footer.
		for {
			if _, err := dr.Next(); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// gc deletes snapshots beyond the newest SnapshotKeep (and, with a
// Retention, beyond the newest one committed at or before the window's
// start: see windowAnchor), then the chunks the oldest kept snapshot makes
// obsolete — except chunks younger than
// MinWALAge (a deposed writer's delayed PUT must still collide) and the
// newest chunk this node wrote (a restarting node finds the highest seq by
// listing, so it must never be able to reuse one).
func (l *Log) gc() {
	if l.gcOnce() != nil && l.ctx.Err() == nil {
		l.log.Warn("garbage collection stopped early; it resumes after the next snapshot")
	}
}

func (l *Log) gcOnce() error {
	l.mu.Lock()
	failed := l.err != nil
	newest := l.nextSeq - 1
	l.mu.Unlock()
	if failed {
		return nil // a deposed writer leaves the bucket to the new one
	}
	var snaps []string
	err := l.listAll(l.ctx, snapPrefix, "", gcAttempts, func(o objstore.ObjectInfo) (bool, error) {
		if parseNum(o.Key, snapPrefix) != 0 {
			snaps = append(snaps, o.Key)
		}
		return true, nil
	})
	if err != nil || len(snaps) == 0 {
		return err
	}
	first := len(snaps) - min(l.o.SnapshotKeep, len(snaps))
	anchored := true
	if l.o.Retention > 0 {
		anchor, err := l.windowAnchor(snaps)
		if err != nil {
			return err
		}
		anchored = anchor >= 0
		first = min(first, max(anchor, 0))
	}
	// Pins are read right before the deletes. A branch created inside
	// the retention window pins objects the window keeps anyway; one
	// whose pin lands between this read and the deletes (milliseconds)
	// can lose them, and then its verification, or its first start,
	// fails naming the missing object: never a state with a hole.
	pins, err := l.readPins()
	if err != nil {
		return err
	}
	hold := pinsHold(pins)
	oldestKept := snaps[first]
	var victims []string
	for _, k := range snaps[:first] {
		if !hold.snaps[k] {
			victims = append(victims, k)
		}
	}
	if err := l.deleteAll(victims); err != nil {
		return err
	}
	for _, k := range victims {
		delete(l.snapHeads, k)
	}
	if len(victims) > 0 {
		l.log.Info("deleted old snapshots", "count", len(victims), "oldest_kept", oldestKept)
	}
	if !anchored {
		// The window reaches back past the oldest snapshot: the chunks
		// before it may be the only way to rebuild revisions in it (a log
		// kept from seq 1).
		l.log.Debug("no snapshot precedes the retention window; keeping every chunk", "oldest_kept", oldestKept)
		if !l.noteFirstEntry() {
			l.noteRestorable(oldestKept)
		}
		return nil
	}
	l.noteRestorable(oldestKept)

	cut, ok := l.meta.knownWalSeq(int64(parseNum(oldestKept, snapPrefix)))
	if h := l.snapHeads[oldestKept]; !ok && h != nil {
		cut, ok = h.WalSeq, true
	}
	if !ok {
		l.log.Debug("wal_seq of the oldest kept snapshot is unknown; keeping chunks", "key", oldestKept)
		return nil
	}
	if newest == 0 {
		return nil
	}
	cut = min(cut, newest-1)
	if hold.floor > 0 {
		if hold.floor-1 < cut {
			l.log.Debug("a branch pins chunks; keeping them", "from", walKey(hold.floor))
		}
		cut = min(cut, hold.floor-1)
	}
	if cut <= l.gcFloor {
		return nil
	}
	// A chunk is young while the bucket's LastModified says so (measured
	// on this node's wall clock against another machine's) OR while this
	// node's monotonic clock says it uploaded it (or opened, for a chunk
	// it did not upload) less than MinWALAge ago: a wall clock stepped
	// forward, or a bucket clock running behind, can then only keep
	// chunks longer, never delete one early.
	wall := l.clk.Wall()
	var chunks []string
	var young bool
	err = l.listAll(l.ctx, walPrefix, walKey(l.gcFloor), gcAttempts, func(o objstore.ObjectInfo) (bool, error) {
		seq := parseSeq(o.Key)
		if seq == 0 || seq > cut {
			return false, nil
		}
		l.mu.Lock()
		seen, ok := l.gcSeen[o.Key]
		l.mu.Unlock()
		if !ok {
			seen = l.opened
		}
		if wall.Sub(o.LastModified) < l.o.MinWALAge || l.clk.Since(seen) < l.o.MinWALAge {
			young = true
			return false, nil
		}
		chunks = append(chunks, o.Key)
		return true, nil
	})
	if err != nil {
		return err
	}
	if err := l.deleteAll(chunks); err != nil {
		return err
	}
	l.mu.Lock()
	for _, k := range chunks {
		delete(l.gcSeen, k)
	}
	l.mu.Unlock()
	if len(chunks) > 0 {
		l.gcFloor = parseSeq(chunks[len(chunks)-1])
		l.log.Info("deleted obsolete wal chunks", "count", len(chunks), "through", chunks[len(chunks)-1], "young_kept", young)
	}
	return nil
}

// windowAnchor returns the position in snaps (oldest first) of the newest
// snapshot whose last entry was committed before the retention window's
// start: every revision committed inside the window (at or after its
// start, to the millisecond) and the state at any time in it are rebuilt
// from it and the chunks after it. -1 means none is known to be (the
// window reaches back past every snapshot, or their times are unknown),
// and then every snapshot, and so every chunk, stays.
//
// The window ends at the lower of the wall clock and the wall clock Open
// saw moved on by the monotonic clock since, so a wall clock stepped
// forward on this node never shortens it (until a restart); one stepped
// back only keeps more.
// readPins loads the branches' pins (retrying as every GC call does). An
// unreadable pin stops the round: deleting nothing is the safe side.
func (l *Log) readPins() ([]Pin, error) {
	var pins []Pin
	err := l.retry(l.ctx, gcAttempts, "read "+PinPrefix, func(err error) bool { return errors.Is(err, ErrBadPin) }, func(ctx context.Context) error {
		var err error
		pins, err = ReadPins(ctx, l.store)
		return err
	})
	if err != nil {
		l.log.Error("cannot read the branches' pins; deleting nothing", "error", err)
	}
	return pins, err
}

func (l *Log) windowAnchor(snaps []string) (int, error) {
	now := l.clk.Wall()
	if steady := l.openedWall.Add(l.clk.Since(l.opened)); steady.Before(now) {
		now = steady
	}
	start := now.Add(-l.o.Retention).UnixMilli()
	for i := len(snaps) - 1; i >= 0; i-- {
		h, err := l.snapshotHead(snaps[i])
		if isNotFound(err) {
			continue // deleted by another writer's GC after the listing
		}
		if err != nil {
			return 0, err
		}
		if h.CommitTimeMs != 0 && h.CommitTimeMs < start {
			return i, nil
		}
	}
	return -1, nil
}

// snapshotHead returns the header of the bucket snapshot at key, read
// once per process (only the first record is downloaded).
func (l *Log) snapshotHead(key string) (*netsyv1.SnapshotHeader, error) {
	if h := l.snapHeads[key]; h != nil {
		return h, nil
	}
	var h *netsyv1.SnapshotHeader
	err := l.retry(l.ctx, gcAttempts, "read header of "+key, isNotFound, func(ctx context.Context) error {
		var err error
		h, err = snapshotHeader(ctx, l.store, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	l.snapHeads[key] = h
	return h, nil
}

// noteRestorable records the oldest kept snapshot as the oldest point a
// restore can rebuild, for Stats; a header that cannot be read leaves the
// previous answer.
func (l *Log) noteRestorable(key string) {
	h, err := l.snapshotHead(key)
	if err != nil {
		l.log.Debug("read the oldest kept snapshot's header", "key", key, "error", err)
		return
	}
	l.mu.Lock()
	l.stats.RestoreOldestRevision, l.stats.RestoreOldestTimeMs = h.Revision, h.CommitTimeMs
	l.mu.Unlock()
}

// noteFirstEntry records the first entry of the history as the oldest
// restorable point when the bucket still holds the chunks from index 1 (a
// young cluster under a retention window), and says whether it does. Only
// the first chunks are read (claims are empty), once per process.
func (l *Log) noteFirstEntry() bool {
	if l.firstEntry == nil {
		for seq := uint64(1); ; seq++ {
			body, err := l.getObject(l.ctx, walKey(seq), gcAttempts)
			if err != nil {
				return false // gone (collected, or never there) or unreadable
			}
			ents, _, err := datafile.DecodeChunk(walKey(seq), body)
			if err != nil || (len(ents) > 0 && ents[0].Index != 1) {
				return false // a seeded bucket starts at a snapshot
			}
			if len(ents) > 0 {
				l.firstEntry = ents[0]
				break
			}
		}
	}
	l.mu.Lock()
	l.stats.RestoreOldestRevision, l.stats.RestoreOldestTimeMs = l.firstEntry.Revision, l.firstEntry.CommitTimeMs
	l.mu.Unlock()
	return true
}

// deleteAll deletes keys, deleteWindow at a time.
func (l *Log) deleteAll(keys []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, deleteWindow)
	for _, key := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := l.retry(l.ctx, gcAttempts, "delete "+key, nil, func(ctx context.Context) error {
				return l.store.Delete(ctx, key)
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("delete %s: %w", key, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
