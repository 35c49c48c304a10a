package objwal

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/wal"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// errSeqTaken means a claim lost the race for its seq.
var errSeqTaken = errors.New("the wal seq was taken by another writer")

// bucketView is what a catch-up learned about the bucket.
type bucketView struct {
	lastSeq    uint64 // highest chunk seq in the bucket, 0 if none
	bucketLast uint64 // highest entry index the bucket holds
	// unuploaded are local entries after bucketLast, in order.
	unuploaded []*netsyv1.Entry
	// snapAhead is the local snapshot's index when it covers entries
	// after bucketLast that the local log no longer holds (0 otherwise):
	// a claim could not upload them, so it is refused.
	snapAhead uint64
	// seed: the bucket is empty and this node's local log becomes its
	// history (a node that ran without object storage before).
	seed bool
}

// reconcile brings the local log in line with the bucket and claims the
// next seq, catching up again whenever another writer wins the claim.
func (l *Log) reconcile(ctx context.Context) error {
	for round := 1; ; round++ {
		v, err := l.catchUp(ctx)
		if err != nil {
			return err
		}
		err = l.claim(ctx, v)
		if err == nil {
			l.reportRecovery(v)
			return nil
		}
		if !errors.Is(err, errSeqTaken) {
			return err
		}
		if round >= maxClaimRounds {
			return fmt.Errorf("lost the claim for the next wal seq %d times in a row; another writer is active: %w", round, err)
		}
		l.log.Warn("another writer took the wal seq this node claimed; catching up again", "error", err, "round", round)
	}
}

// reportRecovery says, once Open has settled with the bucket, what became
// of local entries a crash may have touched: a torn record the wal cut off,
// and local entries the bucket did not hold. Each is judged by what the
// bucket showed and by the durability mode, so "never acknowledged" is
// said only when it is true.
func (l *Log) reportRecovery(v *bucketView) {
	if t := l.wal.Torn(); t != nil {
		switch {
		case v.bucketLast > t.After:
			l.log.Warn("the torn record cut off the local log was already in object storage; entries were restored from there",
				"path", t.Path, "after_index", t.After, "bucket_last", v.bucketLast)
		case l.o.AckOnFsync:
			l.log.Warn("the torn record cut off the local log was never acknowledged: an entry is acknowledged only once its record is fsync'd whole",
				"path", t.Path, "after_index", t.After)
		default:
			l.log.Warn("the torn record cut off the local log was never acknowledged: object storage does not hold it, and without a local-fsync acknowledgement (sync mode, or a cluster, where a quorum holds what is acknowledged) only what is there is",
				"path", t.Path, "after_index", t.After)
		}
	}
	l.reportCut(v)
	if n := len(v.unuploaded); n > 0 {
		from, to := v.unuploaded[0].Index, v.unuploaded[n-1].Index
		if snapIdx := l.localSnapIdx; from <= snapIdx {
			// A follower's snapshot covers them: its Primary committed
			// them and acknowledged them before uploading (quorum mode).
			l.log.Info("uploaded committed entries that object storage lacked (the local snapshot covers them)",
				"from", from, "to", min(to, snapIdx))
			if from = snapIdx + 1; from > to {
				return
			}
		}
		if l.o.AckOnFsync {
			l.log.Info("uploaded acknowledged local entries that object storage lacked", "from", from, "to", to)
		} else {
			l.log.Warn("kept local entries that object storage lacked and uploaded them: their clients may have seen their writes fail or time out (outcome unknown)",
				"from", from, "to", to)
		}
	}
}

// reportCut says, once Open has caught up with the bucket, what became of
// the entries after damage the wal cut out of the local log
// (Options.CutDamage): the bucket's are back; a follower gets the rest
// from its Primary, and a writer in sync mode never acknowledged them.
func (l *Log) reportCut(v *bucketView) {
	c := l.wal.Cut()
	if c == nil || l.isStarted() {
		// Said once, by Open; a later Claim catches up again.
		return
	}
	d := c.Damage
	if v.bucketLast > d.After {
		l.log.Warn("the local log was cut at damage; the entries after it that object storage holds were fetched back",
			"path", d.Path, "offset", d.Offset, "after_index", d.After, "fetched_to", v.bucketLast)
	} else {
		l.log.Warn("the local log was cut at damage; object storage holds no entry after it",
			"path", d.Path, "offset", d.Offset, "after_index", d.After)
	}
	if l.o.Follower {
		l.log.Info("entries after the cut that object storage lacks come from the Primary", "bucket_last", v.bucketLast)
	}
}

// isStarted says whether Open has finished: later reconciliations are a
// Primary's Starting step on a log this process kept in line.
func (l *Log) isStarted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}

// localState returns the last index the local state holds (log or
// snapshot) and the local snapshot's index.
func (l *Log) localState() (last, snapIdx uint64) {
	snapIdx = l.localSnapIdx
	return max(l.wal.LastIndex(), snapIdx), snapIdx
}

func (l *Log) catchUp(ctx context.Context) (*bucketView, error) {
	last, snapIdx := l.localState()
	if l.meta == nil {
		if last > 0 {
			return l.seedCheck(ctx, last)
		}
		// A fresh directory. The checkpoint is written before anything is
		// restored, so a crash half-way is recognised as ours on restart.
		l.meta = &metaState{}
		if err := writeMetaFS(l.o.FS, l.metaPath, l.meta); err != nil {
			return nil, err
		}
	}
	m := l.meta
	if last < m.Index {
		// The checkpoint is written only for entries fsync'd here, so
		// the disk lost writes it had confirmed (or somebody cut the log).
		// The bucket holds them: fetch them back rather than serve a
		// history that forgets acknowledged writes.
		l.log.Error("the local log lost entries it had fsync'd: the bucket holds them and they are fetched back",
			"local_last", last, "checkpoint_index", m.Index, "checkpoint_seq", m.Seq, "wal_dir", l.o.WALDir)
	}
	// What the local state holds that needs no comparing with the bucket:
	// the history agreed through the checkpoint (all of it, unless the disk
	// lost entries it had fsync'd) and whatever a local snapshot covers. A
	// snapshot beyond the checkpoint is an interrupted restore or one a
	// follower took of entries its Primary committed: history either way.
	agreed := max(min(last, m.Index), snapIdx)
	if m.Seq > 0 {
		from, ok, err := l.chunkHolding(ctx, agreed+1, m)
		if err != nil {
			return nil, err
		}
		if ok {
			// The listing starts no later than the checkpoint's own chunk.
			// Finding it, or the chunk after it, is only a weak sign that
			// this is the bucket the checkpoint was written against (a
			// restored store numbers its chunks from 1 again); what
			// protects the history is applyChunks' checks of where the
			// first chunk starts and where the bucket ends.
			first := min(from, m.Seq)
			seqs, err := l.listChunks(ctx, first-1)
			if err != nil {
				return nil, err
			}
			if from == m.Seq+1 && len(seqs) > 0 && seqs[0] == from {
				// The checkpoint's own chunk was collected: GC deletes
				// through the oldest kept snapshot's wal_seq, which is
				// often the checkpoint (a follower's, or one a restore
				// installed). The chunks after it hold every entry after
				// the checkpoint's index and the local state holds the
				// rest, so nothing is missing. Falling back to the newest
				// snapshot DISCARDED the local entries after the
				// checkpoint, those the bucket lacks too (issue 22).
				first = from
			}
			if len(seqs) > 0 && seqs[0] == first && dense(seqs) && seqs[len(seqs)-1] >= m.Seq {
				return l.applyChunks(ctx, from-1, seqs[from-first:], agreed, m.Index)
			}
		}
		l.log.Info("chunks after the local checkpoint were garbage-collected; catching up from the newest snapshot",
			"seq", m.Seq, "index", m.Index, "local_last", last)
	}
	return l.catchUpFromSnapshot(ctx)
}

// chunkHolding returns the seq of the chunk to start a catch-up from so
// that no index from idx on is skipped: m.Seq+1 when the checkpoint covers
// idx-1 (the usual case: the local log holds everything through the
// checkpoint), else the chunk at or before m.Seq whose entries start at or
// before idx, found by reading chunks backwards. ok is false when that
// chunk is gone (garbage-collected).
func (l *Log) chunkHolding(ctx context.Context, idx uint64, m *metaState) (seq uint64, ok bool, err error) {
	if idx > m.Index {
		return m.Seq + 1, true, nil
	}
	for seq = m.Seq; seq > 0; seq-- {
		key := walKey(seq)
		body, err := l.openGet(ctx, key)
		if isNotFound(err) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		entries, _, err := datafile.DecodeChunk(key, body)
		if err != nil {
			return 0, false, fmt.Errorf("chunk %s: %w", key, err)
		}
		if len(entries) > 0 && entries[0].Index <= idx {
			return seq, true, nil
		}
	}
	return 0, false, nil
}

func dense(seqs []uint64) bool {
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			return false
		}
	}
	return true
}

// seedCheck handles a local log with no checkpoint: it may seed an empty
// bucket, but is never merged into a bucket that already has a history.
func (l *Log) seedCheck(ctx context.Context, last uint64) (*bucketView, error) {
	for _, prefix := range []string{walPrefix, snapPrefix} {
		found := false
		err := l.listAll(ctx, prefix, "", openAttempts, func(objstore.ObjectInfo) (bool, error) {
			found = true
			return false, nil
		})
		if err != nil {
			return nil, err
		}
		if found {
			return nil, fmt.Errorf("the local log in %s holds entries up to index %d but has no %s, and the bucket already holds %s objects: "+
				"refusing to merge two histories (remove the directory to restore this node from object storage)",
				l.o.WALDir, last, metaFileName, prefix)
		}
	}
	l.log.Info("seeding an empty bucket from the local log", "last", last)
	return &bucketView{seed: true}, nil
}

// catchUpFromSnapshot catches up from the newest snapshot in the bucket:
// on a fresh directory, when the chunks after the checkpoint are gone, or
// to finish an interrupted restore.
func (l *Log) catchUpFromSnapshot(ctx context.Context) (*bucketView, error) {
	m := l.meta
	snap, err := l.newestSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	var after uint64
	if snap != nil {
		after = snap.Header.WalSeq
	}
	seqs, err := l.listChunks(ctx, after)
	if err != nil {
		return nil, err
	}
	// The chunks after the snapshot are the only copy of what it does not
	// cover, so every one of them must be there. This is checked before the
	// local log is touched.
	want := after + 1
	for _, seq := range seqs {
		if seq != want {
			return nil, fmt.Errorf("chunk %s is missing from the bucket (the next one is %s): the history has a hole", walKey(want), walKey(seq))
		}
		want++
	}
	if top := want - 1; m.Seq > top {
		return nil, fmt.Errorf("the bucket lacks %s, which this node uploaded (its newest chunk is %s); is this the right bucket?", walKey(m.Seq), walKey(top))
	}
	last, snapIdx := l.localState()
	// As in catchUp: what needs no comparing.
	skip := max(min(m.Index, last), snapIdx)
	var base uint64 // what the bucket holds through seq after
	if snap != nil {
		base = snap.Header.Index
	}
	switch {
	case snap != nil && snap.Header.Index > skip:
		if err := l.installSnapshot(snap); err != nil {
			return nil, err
		}
		skip = snap.Header.Index
	}
	return l.applyChunks(ctx, after, seqs, skip, base)
}

// installSnapshot makes a bucket snapshot the local starting point. Local
// entries after the checkpoint are dropped first: the bucket moved past
// them under another writer, so they were never acknowledged in sync mode
// and are lost to the cluster in async mode.
func (l *Log) installSnapshot(snap *datafile.Snapshot) error {
	h := snap.Header
	// Entries a local snapshot covers are never replayed again, so the cut
	// can be no lower than it; only an interrupted restore puts the local
	// snapshot past the checkpoint.
	last, snapIdx := l.localState()
	if keep := max(l.meta.Index, snapIdx); last > keep {
		l.log.Warn("DISCARDING local entries that object storage does not confirm: a newer snapshot in the bucket covers them",
			"from", keep+1, "to", last, "snapshot", snapKey(h.Revision), "snapshot_index", h.Index)
		if err := l.truncateLocal(keep); err != nil {
			return err
		}
	}
	if err := l.wal.SaveSnapshot(snap); err != nil {
		return fmt.Errorf("save snapshot %s locally: %w", snapKey(h.Revision), err)
	}
	l.snap, l.localSnapIdx = snap, h.Index
	l.mu.Lock()
	l.observeLocked(h.Index, h.CommitTimeMs)
	l.mu.Unlock()
	m := l.meta.clone()
	m.Seq, m.Index = h.WalSeq, h.Index
	m.addSnapshot(h.Revision, h.WalSeq)
	if err := writeMetaFS(l.o.FS, l.metaPath, m); err != nil {
		return err
	}
	l.meta = m
	l.log.Info("restored snapshot from object storage", "key", snapKey(h.Revision), "index", h.Index, "rev", h.Revision)
	return nil
}

// truncateLocal drops local entries after index.
func (l *Log) truncateLocal(index uint64) error {
	if err := l.wal.Close(); err != nil {
		return fmt.Errorf("close local wal to truncate it: %w", err)
	}
	if err := wal.TruncateAfterFS(l.o.FS, l.o.WALDir, index); err != nil {
		return fmt.Errorf("truncate local wal after index %d: %w", index, err)
	}
	return l.openWAL()
}

// applyChunks downloads the chunks seqs (which follow baseSeq densely;
// the bucket holds every entry through base with the chunks up to
// baseSeq) and brings the local log in line with them: entries at or
// below skip are already agreed; later ones are compared with the local
// log, appended where it ends, and win where they differ.
//
// skip is what needs no comparing, which is not what the bucket holds: a
// follower's local snapshot covers entries its Primary committed, which
// in quorum mode the bucket may not hold yet. The view's bucketLast is
// the bucket's true end (base, raised by every entry read), and the
// local entries after it, those the snapshot covers too, are the ones a
// claim uploads; taking the bucket to end at the snapshot left it a hole
// after a promotion (issue 22).
func (l *Log) applyChunks(ctx context.Context, baseSeq uint64, seqs []uint64, skip, base uint64) (*bucketView, error) {
	last, _ := l.localState()
	var tail []*netsyv1.Entry // local entries skip+1..last
	if last > skip {
		err := l.wal.Replay(skip+1, func(e *netsyv1.Entry) error {
			tail = append(tail, e)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read local entries after %d: %w", skip, err)
		}
		if uint64(len(tail)) != last-skip {
			return nil, fmt.Errorf("the local log holds %d entries after index %d, expected %d", len(tail), skip, last-skip)
		}
	}
	v := &bucketView{lastSeq: baseSeq, bucketLast: base}
	var next uint64 // index the next chunk must start with; 0 until known
	appended, matched := 0, 0
	var lastAppended uint64
	start := l.clk.Now()
	err := l.fetchChunks(ctx, seqs, func(seq uint64, entries []*netsyv1.Entry) error {
		key := walKey(seq)
		if len(entries) > 0 {
			first := entries[0].Index
			switch {
			case next == 0 && first > skip+1:
				return fmt.Errorf("chunk %s starts at index %d but index %d is the next one needed: the entries between are missing", key, first, skip+1)
			case next != 0 && first != next:
				return fmt.Errorf("chunk %s starts at index %d, expected %d", key, first, next)
			}
			next = entries[len(entries)-1].Index + 1
		}
		for _, e := range entries {
			if e.Index <= skip {
				v.bucketLast = e.Index
				continue
			}
			if e.Index <= last {
				if proto.Equal(tail[e.Index-skip-1], e) {
					v.bucketLast = e.Index
					matched++
					continue
				}
				if l.o.AckOnFsync && !l.isStarted() {
					// The log was written by a node that acknowledged on
					// its local fsync: dropping this entry would lose a
					// write a client was told is durable. (Whatever mode
					// the log opens in now: the node opens every log in
					// sync mode until its Primary settles the mode.)
					return fmt.Errorf("%w: the local log (%s) holds an acknowledged entry at index %d (revision %d) and %s holds a different one (revision %d); "+
						"two writers shared this bucket. Keep this data directory for inspection (netsyctl inspect) and restore the node from an empty one",
						ErrHistoryConflict, l.wal.SegmentPath(e.Index), e.Index, tail[e.Index-skip-1].Revision, key, e.Revision)
				}
				if l.o.AckOnFsync {
					// A node alone that acknowledged on its fsync and was
					// deposed since Open: refusing now would not bring the
					// entries back, as the bucket's history moved on; say
					// what may be lost.
					l.log.Error("DISCARDING local entries that object storage contradicts: another writer wrote this index first while this node, "+
						"alone, acknowledged writes on its local fsync; these entries may be acknowledged writes that are now lost. A process outside the election shares this bucket",
						"from", e.Index, "to", last, "chunk", key, "segment", l.wal.SegmentPath(e.Index))
				} else {
					l.log.Warn("DISCARDING local entries that object storage contradicts: another writer wrote this index first; "+
						"no client was told they were durable (in sync mode only what is in the bucket is; in a cluster only what a quorum holds, which the new Primary has)",
						"from", e.Index, "to", last, "chunk", key)
				}
				if err := l.truncateLocal(e.Index - 1); err != nil {
					return err
				}
				last = e.Index - 1
				tail = tail[:e.Index-skip-1]
			}
			if err := l.wal.Append(e); err != nil {
				return fmt.Errorf("chunk %s: append entry %d locally: %w", key, e.Index, err)
			}
			l.mu.Lock()
			l.observeLocked(e.Index, e.CommitTimeMs)
			l.mu.Unlock()
			last, lastAppended = e.Index, e.Index
			v.bucketLast = e.Index
			appended++
		}
		v.lastSeq = seq
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Only the checkpoint says what the bucket held: a local snapshot may
	// run ahead of it.
	if v.bucketLast < l.meta.Index {
		return nil, fmt.Errorf("the bucket's chunks end at index %d, before index %d which this node saw uploaded", v.bucketLast, l.meta.Index)
	}
	if lastAppended > 0 {
		if err := l.wal.WaitSynced(ctx, lastAppended); err != nil {
			return nil, fmt.Errorf("sync entries from object storage locally: %w", err)
		}
	}
	switch {
	case v.bucketLast >= skip:
		if uint64(len(tail)) > v.bucketLast-skip {
			v.unuploaded = tail[v.bucketLast-skip:]
		}
	default:
		// The local snapshot runs ahead of the bucket: nothing after skip
		// was in the chunks, so the tail is whole, and the entries before
		// it come from the local log, if it still holds them.
		head, ok, err := l.localRange(v.bucketLast+1, skip)
		if err != nil {
			return nil, err
		}
		if ok {
			v.unuploaded = append(head, tail...)
		} else {
			v.snapAhead = skip
		}
	}
	if len(seqs) > 0 {
		l.log.Info("caught up with object storage", "chunks", len(seqs), "appended", appended, "matched", matched,
			"seq", v.lastSeq, "index", v.bucketLast, "duration", l.clk.Since(start))
	}
	if v.lastSeq > l.meta.Seq {
		m := l.meta.clone()
		m.Seq, m.Index = v.lastSeq, v.bucketLast
		if err := writeMetaFS(l.o.FS, l.metaPath, m); err != nil {
			return nil, err
		}
		l.meta = m
	}
	return v, nil
}

// localRange returns the local log's entries from..to, or ok false when
// it does not hold them all.
func (l *Log) localRange(from, to uint64) (entries []*netsyv1.Entry, ok bool, err error) {
	if first := l.wal.FirstIndex(); first == 0 || first > from || l.wal.LastIndex() < to {
		return nil, false, nil
	}
	errDone := errors.New("done")
	err = l.wal.Replay(from, func(e *netsyv1.Entry) error {
		if e.Index > to {
			return errDone
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return nil, false, fmt.Errorf("read local entries %d..%d: %w", from, to, err)
	}
	if uint64(len(entries)) != to-from+1 {
		return nil, false, fmt.Errorf("the local log holds %d entries in %d..%d, expected %d", len(entries), from, to, to-from+1)
	}
	return entries, true, nil
}

// snapAheadError refuses a claim the view says would leave a hole.
func snapAheadError(v *bucketView) error {
	return fmt.Errorf("%w: the bucket's history ends at index %d, the local snapshot covers through %d, and the local log lacks entries of %d..%d, "+
		"so a claim cannot upload them; this node can follow, and claim once the bucket holds them",
		ErrSnapshotAheadOfBucket, v.bucketLast, v.snapAhead, v.bucketLast+1, v.snapAhead)
}

// claim uploads every local entry the bucket lacks, or an empty chunk, at
// the next seq. Winning it makes this node the writer: any other writer's
// next chunk collides with it. It refuses, before writing anything, when
// the local snapshot covers entries the bucket lacks and the local log no
// longer holds them: claiming past them would leave the history a hole.
func (l *Log) claim(ctx context.Context, v *bucketView) error {
	if v.snapAhead > 0 {
		return snapAheadError(v)
	}
	pending := v.unuploaded
	if v.seed {
		var err error
		if pending, err = l.seed(ctx, v); err != nil {
			return err
		}
	}
	seq := v.lastSeq + 1
	// The claim itself is always an empty chunk, and the local entries the
	// bucket lacks follow it. Those entries came from the old writer (this
	// node replicated them), so a chunk of them could be, byte for byte,
	// the chunk the old writer is retrying at this seq: the old writer
	// would read it back, take it for its own earlier attempt that landed,
	// and go on writing past the fence. An empty chunk is never what a
	// writer retries (uploads carry entries), and no other writer uploads
	// at a seq after this node's claim, so no chunk of this node's is ever
	// another writer's too.
	chunks := splitEntries(pending, l.o.ChunkMaxBytes)
	if len(pending) > 0 {
		chunks = append([][]*netsyv1.Entry{nil}, chunks...)
	}
	refs := []chunkRef{{seq: v.lastSeq, last: v.bucketLast}}
	lastIdx := v.bucketLast
	for _, c := range chunks {
		body, err := encodeEntries(l.sealer, c)
		if err != nil {
			return fmt.Errorf("encode claim %s: %w", walKey(seq), err)
		}
		key := walKey(seq)
		err = l.retry(ctx, openAttempts, "put "+key, isPrecondition, func(ctx context.Context) error {
			_, err := l.store.PutIfAbsent(ctx, key, body)
			return err
		})
		if isPrecondition(err) {
			return fmt.Errorf("claim %s: %w", key, errSeqTaken)
		}
		if err != nil {
			return fmt.Errorf("claim %s: %w", key, err)
		}
		if len(c) > 0 {
			lastIdx = c[len(c)-1].Index
		}
		refs = append(refs, chunkRef{seq: seq, last: lastIdx})
		seq++
	}
	if local, _ := l.localState(); local < lastIdx {
		// The engine replays the local log: serving from it now would
		// forget entries the bucket holds.
		return fmt.Errorf("after catching up the local log ends at index %d but the bucket's history reaches %d", local, lastIdx)
	}
	m := &metaState{}
	if l.meta != nil {
		m = l.meta.clone()
	}
	m.Seq, m.Index = seq-1, lastIdx
	if err := writeMetaFS(l.o.FS, l.metaPath, m); err != nil {
		return err
	}
	l.meta = m
	l.mu.Lock()
	l.nextSeq = seq
	l.uploaded, l.localSynced, l.reported = lastIdx, lastIdx, lastIdx
	l.chunks = refs
	l.mu.Unlock()
	l.log.Info("claimed the next wal seq; this node is the writer", "seq", seq-1, "index", lastIdx,
		"uploaded_entries", len(pending), "mode", l.mode())
	return nil
}

// seed prepares an empty bucket for the local log: a local snapshot goes
// up first (with wal_seq 0: it covers no chunk), then the entries after it.
func (l *Log) seed(ctx context.Context, v *bucketView) ([]*netsyv1.Entry, error) {
	from := uint64(1)
	m := &metaState{}
	snap, handedOver := l.snap, false
	if snap == nil {
		// The engine loaded the snapshot found at Open already (a node
		// seeds at Claim, having opened as a follower): read it again,
		// or the bucket's history would start at entry 1 of a log that
		// starts after it.
		var err error
		if snap, err = l.wal.LoadSnapshot(); err != nil {
			return nil, fmt.Errorf("seed snapshot: %w", err)
		}
		handedOver = true
	}
	if snap != nil {
		if handedOver {
			defer snap.Release()
		}
		h := snap.Header
		if h.WalSeq != 0 {
			// The bucket's copy covers no chunk, and the upload streams
			// the local file, so the file must say so too.
			h = proto.Clone(h).(*netsyv1.SnapshotHeader)
			h.WalSeq = 0
			s := &datafile.Snapshot{Header: h, KVs: snap.KVs, Leases: snap.Leases, Source: snap.Source}
			if err := l.wal.SaveSnapshot(s); err != nil {
				return nil, fmt.Errorf("seed snapshot: %w", err)
			}
			if !handedOver {
				l.snap = s
			}
			l.localSnapIdx = h.Index
		}
		key := snapKey(h.Revision)
		_, err := l.uploadSnapshot(ctx, key, h.Index, openAttempts)
		if isPrecondition(err) {
			return nil, fmt.Errorf("seed snapshot %s: %w", key, errSeqTaken)
		}
		if err != nil {
			return nil, fmt.Errorf("seed snapshot %s: %w", key, err)
		}
		from = h.Index + 1
		m.Index = h.Index
		m.addSnapshot(h.Revision, 0)
		v.bucketLast = h.Index
	} else if first := l.wal.FirstIndex(); first > 1 {
		return nil, fmt.Errorf("the local log starts at index %d and has no snapshot: entries 1..%d are missing", first, first-1)
	}
	// From here on the bucket holds this node's history.
	if err := writeMetaFS(l.o.FS, l.metaPath, m); err != nil {
		return nil, err
	}
	l.meta = m
	var pending []*netsyv1.Entry
	err := l.wal.Replay(from, func(e *netsyv1.Entry) error {
		pending = append(pending, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read local entries from %d: %w", from, err)
	}
	return pending, nil
}

// splitEntries cuts entries into runs of about maxBytes; no entries gives
// one empty run, the claim that carries nothing.
func splitEntries(entries []*netsyv1.Entry, maxBytes int) [][]*netsyv1.Entry {
	if len(entries) == 0 {
		return [][]*netsyv1.Entry{nil}
	}
	var out [][]*netsyv1.Entry
	start, size := 0, 0
	for i, e := range entries {
		n := proto.Size(e) + datafile.RecordHeaderSize
		if i > start && size+n > maxBytes {
			out = append(out, entries[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, entries[start:])
}
