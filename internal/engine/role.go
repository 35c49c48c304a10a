package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// The engine is a writer (the Primary: it evaluates requests into entries)
// or a follower (it applies entries another node wrote). The roles above
// it decide which, at which term; these methods carry the decisions out in
// the loop, so a role change is ordered with every write around it.

// truncater is the Storage a follower may need to cut: entries the
// Primary never committed, once a new Primary's history diverges.
type truncater interface {
	TruncateAfter(index uint64) error
}

// firstIndexer reports the first index Replay can serve (0: none held),
// so Promote knows when the storage restored a newer snapshot.
type firstIndexer interface {
	FirstIndex() uint64
}

// inLoop runs f in the loop goroutine and waits for it.
func (e *Engine) inLoop(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case e.ctrl <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.ctx.Done():
		return ErrStopped
	}
	// Once taken, f runs to the end: wait for it whatever ctx does.
	select {
	case <-done:
		return nil
	case <-e.ctx.Done():
		return ErrStopped
	}
}

// publishAppended mirrors the loop's log position for other goroutines.
func (e *Engine) publishAppended() {
	last, rev := e.lastIdx, e.lastRev
	if n := len(e.follow); n > 0 {
		last, rev = e.follow[n-1].Index, e.follow[n-1].Revision
	}
	e.appendedIdx.Store(last)
	e.appendedRev.Store(rev)
}

// IsWriter reports whether the engine evaluates writes (it is the Primary).
func (e *Engine) IsWriter() bool { return e.writer.Load() }

// Term is the primary term the engine writes or follows.
func (e *Engine) Term() int64 { return e.term.Load() }

// LastAppended is the newest entry held in storage (durable or not), with
// its revision and the term that wrote it.
func (e *Engine) LastAppended() (index uint64, revision, term int64) {
	return e.appendedIdx.Load(), e.appendedRev.Load(), e.lastTerm.Load()
}

// DurableIndex is the newest index the storage reported durable.
func (e *Engine) DurableIndex() uint64 { return e.durableIdx.Load() }

// Promote makes a follower the writer at term. prepare (optional) runs
// first, in the loop, with the engine quiet: the Primary's Starting step
// (reconcile with object storage and claim the next wal seq). The engine
// then applies whatever the storage holds beyond its state, all of it
// durable and so committed, keeps each lease's deadline as this node
// tracked it from the checkpoints it applied (never less than one
// checkpoint interval from now), and starts evaluating writes.
func (e *Engine) Promote(ctx context.Context, term int64, prepare func(context.Context) error) error {
	var err error
	if lerr := e.inLoop(ctx, func() { err = e.promote(ctx, term, prepare) }); lerr != nil {
		return lerr
	}
	return err
}

func (e *Engine) promote(ctx context.Context, term int64, prepare func(context.Context) error) error {
	if e.writer.Load() {
		return fmt.Errorf("engine: already the writer at term %d", e.term.Load())
	}
	if f := e.failed.Load(); f != nil {
		return *f
	}
	// Entries followed but not applied are in storage; after prepare the
	// storage alone says which of them are history.
	e.follow, e.commitLimit = nil, 0
	if prepare != nil {
		if err := prepare(ctx); err != nil {
			e.holdStorage()
			return err
		}
	}
	n, err := e.adoptStorage()
	if err != nil {
		return err
	}
	if last := e.lastTerm.Load(); last > term {
		// A Primary of a newer term wrote while this node was told of
		// its own, older term (a push that waited out a stall): writing
		// at the older term after it would take the log's term back.
		e.publishAppended()
		return fmt.Errorf("engine: promote at term %d: the log already holds entries of term %d", term, last)
	}
	e.lease.promote(e.cfg.LeaseCheckpointInterval)
	e.term.Store(term)
	e.lastTerm.Store(term)
	e.writer.Store(true)
	e.publishAppended()
	e.log.Info("writing as the Primary", "term", term, "index", e.lastIdx, "rev", e.lastRev, "applied_from_storage", n)
	return nil
}

// HoldStorage makes a follower's log end where its storage's does again,
// after a step down gave the writer role back: the engine rolled back
// what it had not seen committed, but the storage keeps what object
// storage already holds (an upload can finish while the loop is paused
// or busy, before its commit reaches the engine). Those entries are held
// as followed ones until a Primary commits them, so the next followed
// entry continues the storage's log.
func (e *Engine) HoldStorage(ctx context.Context) error {
	var err error
	if lerr := e.inLoop(ctx, func() {
		if e.writer.Load() {
			err = errors.New("engine: the writer does not hold its storage")
			return
		}
		if f := e.failed.Load(); f != nil {
			err = *f
			return
		}
		e.holdStorage()
	}); lerr != nil {
		return lerr
	}
	return err
}

// holdStorage makes whatever the storage holds past the applied state
// held entries again (appended, not applied, as followed ones are), after
// a Starting step failed: the node follows next, and its log must end
// where the storage's does, or the next followed entry would not continue
// it. Nothing of it is known committed until a Primary says so.
func (e *Engine) holdStorage() {
	e.follow, e.commitLimit = nil, e.committedIdx.Load()
	if t, ok := e.EntryTerm(e.lastIdx); ok {
		e.lastTerm.Store(t)
	}
	err := e.cfg.Storage.Replay(e.lastIdx+1, func(ent *netsyv1.Entry) error {
		prev := e.lastIdx
		if k := len(e.follow); k > 0 {
			prev = e.follow[k-1].Index
		}
		if ent.Index != prev+1 {
			return fmt.Errorf("log hole: entry %d follows %d", ent.Index, prev)
		}
		e.follow = append(e.follow, ent)
		e.lastTerm.Store(ent.Term)
		return nil
	})
	if err != nil {
		e.log.Warn("could not hold the storage's entries past the applied state after a failed Starting step", "index", e.lastIdx, "error", err)
		e.follow = nil
	}
	e.publishAppended()
}

// adoptStorage applies everything the storage holds beyond the state and
// makes it committed: after a Starting step or a catch-up from object
// storage, the storage holds only history.
func (e *Engine) adoptStorage() (int, error) {
	n, err := e.catchUpStorage()
	if err != nil {
		e.failStorage(err)
		return n, err
	}
	e.syncMu.Lock()
	e.syncedIdx = e.lastIdx
	e.durableIdx.Store(e.lastIdx)
	e.syncMu.Unlock()
	e.committedIdx.Store(e.lastIdx)
	e.committedRev.Store(e.lastRev)
	e.publishAppended()
	e.broadcast()
	return n, nil
}

// Resync brings a follower up to what its storage holds after prepare
// (a catch-up from object storage, for a replica too far behind for its
// Primary to stream to): entries followed but not applied are dropped
// first, and what the storage then holds is applied as committed.
func (e *Engine) Resync(ctx context.Context, prepare func(context.Context) error) error {
	var err error
	if lerr := e.inLoop(ctx, func() {
		if e.writer.Load() {
			err = errors.New("engine: the writer cannot resync")
			return
		}
		e.follow, e.commitLimit = nil, e.committedIdx.Load()
		if tr, ok := e.cfg.Storage.(truncater); ok {
			if err = tr.TruncateAfter(e.lastIdx); err != nil {
				return
			}
		}
		if prepare != nil {
			if err = prepare(ctx); err != nil {
				e.publishAppended()
				return
			}
		}
		var n int
		n, err = e.adoptStorage()
		if err == nil {
			e.log.Info("caught up from storage", "index", e.lastIdx, "rev", e.lastRev, "applied", n)
		}
	}); lerr != nil {
		return lerr
	}
	return err
}

// ReadEntries returns up to max entries from index from on, for a Follow
// stream: the writer's newest entries from memory (durable or not), older
// ones from the storage (durable only). It returns none when from is past
// the last entry.
func (e *Engine) ReadEntries(from uint64, max int) ([]*netsyv1.Entry, error) {
	if ents, ok := e.feed.read(from, max); ok {
		return ents, nil
	}
	var out []*netsyv1.Entry
	stop := errors.New("enough")
	err := e.cfg.Storage.Replay(from, func(ent *netsyv1.Entry) error {
		out = append(out, ent)
		if len(out) >= max {
			return stop
		}
		return nil
	})
	if err != nil && !errors.Is(err, stop) {
		return nil, err
	}
	return out, nil
}

// EntryTerm returns the term that wrote the entry at index, if the engine
// still holds it (memory or storage).
func (e *Engine) EntryTerm(index uint64) (int64, bool) {
	if t, ok := e.feed.term(index); ok {
		return t, true
	}
	ents, err := e.ReadEntries(index, 1)
	if err != nil || len(ents) == 0 || ents[0].Index != index {
		return 0, false
	}
	return ents[0].Term, true
}

// AppendNotify returns a channel closed when the writer next appends.
func (e *Engine) AppendNotify() <-chan struct{} { return e.feed.wait() }

// DurableNotify returns a channel closed when the durable index next
// advances.
func (e *Engine) DurableNotify() <-chan struct{} {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	return e.durableCh.wait()
}

// catchUpStorage applies what the storage holds after the applied state:
// from a newer snapshot if the storage restored one, then the entries.
func (e *Engine) catchUpStorage() (int, error) {
	if fi, ok := e.cfg.Storage.(firstIndexer); ok {
		if first := fi.FirstIndex(); first > e.lastIdx+1 || (first == 0 && e.lastIdx > 0) {
			if err := e.reloadSnapshot(); err != nil {
				return 0, err
			}
		}
	}
	n := 0
	err := e.cfg.Storage.Replay(e.lastIdx+1, func(ent *netsyv1.Entry) error {
		if ent.Index != e.lastIdx+1 {
			return fmt.Errorf("log hole: entry %d follows %d", ent.Index, e.lastIdx)
		}
		if err := e.applyEntry(ent); err != nil {
			return fmt.Errorf("apply entry %d from storage: %w", ent.Index, err)
		}
		e.lastTerm.Store(ent.Term)
		n++
		return nil
	})
	e.sinceSnap += uint64(n)
	return n, err
}

// reloadSnapshot replaces the state with the storage's newest snapshot,
// when it covers more than the state does.
func (e *Engine) reloadSnapshot() error {
	snap, err := e.cfg.Storage.LoadSnapshot()
	if err != nil {
		return fmt.Errorf("load snapshot: %w", err)
	}
	if snap == nil || snap.Header.Index <= e.lastIdx {
		return nil
	}
	h := snap.Header
	hold := e.holdFor(snap)
	defer hold.Release()
	// The state this node had is older than the snapshot: replace it.
	if err := e.loadSnapshot(snap, true); err != nil {
		return fmt.Errorf("restore snapshot at index %d: %w", h.Index, err)
	}
	e.reqs.reset(h.Index)
	e.log.Info("caught up from a newer snapshot", "index", h.Index, "rev", h.Revision)
	return nil
}

// Demote makes the writer a follower. With flush it first stops taking
// writes and waits (bounded by ctx) until every pending one is durable
// (Draining); whatever is still pending then, or everything without
// flush, fails with ErrLeaderChanged and is rolled back. It returns the
// committed index: the storage may hold entries after it that no
// Primary committed.
func (e *Engine) Demote(ctx context.Context, flush bool) (uint64, error) {
	var drained chan struct{}
	err := e.inLoop(ctx, func() {
		if !e.writer.Load() {
			return
		}
		e.draining = true
		e.drained = make(chan struct{})
		drained = e.drained
		// The last renewals this writer took reach the next Primary in
		// one final checkpoint, drained with everything else; renewals
		// from here on wait for the next Primary.
		e.lease.setRenewing(false)
		if e.failed.Load() == nil {
			e.logCheckpoints(e.lease.due(maxCheckpointBatch, time.Nanosecond))
		}
		e.checkDrained()
	})
	if err != nil {
		return 0, err
	}
	if drained != nil && flush {
		select {
		case <-drained:
		case <-ctx.Done():
			e.log.Warn("draining: writes still pending when the time ran out; failing them", "error", ctx.Err())
		case <-e.ctx.Done():
			return 0, ErrStopped
		}
	}
	var committed uint64
	err = e.inLoop(context.Background(), func() {
		if e.writer.Load() {
			e.stepDown(ErrLeaderChanged)
		}
		committed = e.committedIdx.Load()
	})
	return committed, err
}

// checkDrained closes drained once a draining writer has nothing pending.
func (e *Engine) checkDrained() {
	if e.draining && e.drained != nil && len(e.pending) == 0 && len(e.noopWaiters) == 0 {
		close(e.drained)
		e.drained = nil
	}
}

// stepDown turns the writer into a follower at once: pending writes fail
// with err and are rolled back.
func (e *Engine) stepDown(err error) {
	for _, pe := range e.pending {
		if pe.p != nil {
			pe.p.finish(err)
		}
	}
	for _, p := range e.noopWaiters {
		p.finish(err)
	}
	e.noopWaiters = nil
	e.rollbackPending()
	e.lease.setRenewing(false)
	e.writer.Store(false)
	e.draining = false
	if e.drained != nil {
		close(e.drained)
		e.drained = nil
	}
	e.follow, e.commitLimit = nil, e.committedIdx.Load()
	e.log.Info("stepped down to follow", "term", e.term.Load(), "committed_index", e.committedIdx.Load(), "rev", e.committedRev.Load())
}

// Follow appends entries another node wrote to the storage, at term. They
// are applied (and become visible) once the Primary commits them
// (CommitTo) and the storage has made them durable. Entries must continue
// the log: index = LastAppended()+1.
func (e *Engine) Follow(ctx context.Context, term int64, entries []*netsyv1.Entry) error {
	var err error
	if lerr := e.inLoop(ctx, func() { err = e.follow1(term, entries) }); lerr != nil {
		return lerr
	}
	return err
}

func (e *Engine) follow1(term int64, entries []*netsyv1.Entry) error {
	if e.writer.Load() {
		return errors.New("engine: the writer cannot follow")
	}
	if f := e.failed.Load(); f != nil {
		return *f
	}
	e.term.Store(term)
	for _, ent := range entries {
		last := e.appendedIdx.Load()
		if ent.Index != last+1 {
			return fmt.Errorf("engine: followed entry %d does not follow index %d", ent.Index, last)
		}
		if err := e.cfg.Storage.Append(ent); err != nil {
			e.failStorage(err)
			return *e.failed.Load()
		}
		e.follow = append(e.follow, ent)
		e.appendedIdx.Store(ent.Index)
		e.appendedRev.Store(ent.Revision)
		e.lastTerm.Store(ent.Term)
	}
	return nil
}

// FollowCommit is Follow and then, when the entries were taken and
// commit is above 0, CommitTo(commit), in one pass of the loop: a batch
// that carries the Primary's commit point costs one handoff to the loop
// instead of two (BenchmarkFollowCommit).
func (e *Engine) FollowCommit(ctx context.Context, term int64, entries []*netsyv1.Entry, commit uint64) error {
	var err error
	if lerr := e.inLoop(ctx, func() {
		if err = e.follow1(term, entries); err == nil && commit > 0 {
			e.commitTo(commit)
		}
	}); lerr != nil {
		return lerr
	}
	return err
}

// CommitTo records that the Primary committed everything through index;
// entries this node holds durably up to there become visible.
func (e *Engine) CommitTo(ctx context.Context, index uint64) error {
	return e.inLoop(ctx, func() { e.commitTo(index) })
}

func (e *Engine) commitTo(index uint64) {
	if e.writer.Load() || index <= e.commitLimit {
		return
	}
	e.commitLimit = index
	// Under syncMu: OnSync decides from it whether to wake the loop.
	e.syncMu.Lock()
	e.primaryCommit.Store(index)
	e.syncMu.Unlock()
	e.applyFollowed()
}

// applyFollowed applies followed entries that are both committed by the
// Primary and durable here.
func (e *Engine) applyFollowed() {
	e.syncMu.Lock()
	limit := min(e.syncedIdx, e.commitLimit)
	e.syncMu.Unlock()
	n := 0
	for n < len(e.follow) && e.follow[n].Index <= limit {
		if err := e.applyEntry(e.follow[n]); err != nil {
			e.failStorage(fmt.Errorf("apply followed entry %d: %w", e.follow[n].Index, err))
			return
		}
		n++
	}
	if n == 0 {
		return
	}
	clear(e.follow[:n])
	e.follow = e.follow[n:]
	if len(e.follow) == 0 {
		e.follow = nil
	}
	e.sinceSnap += uint64(n)
	e.committedRev.Store(e.lastRev)
	e.committedIdx.Store(e.lastIdx)
	e.broadcast()
	e.maybeSnapshot()
}

// TruncateFollowed drops followed entries after index, which the Primary
// never committed (a new Primary's history diverges there), from memory
// and from the storage. If the cut reaches entries already applied (a
// node that applied what it should not have), the state is rebuilt from
// the storage's snapshot and entries through index; a storage that
// refuses the cut leaves everything as it was and returns the error.
func (e *Engine) TruncateFollowed(ctx context.Context, index uint64) error {
	var err error
	if lerr := e.inLoop(ctx, func() { err = e.truncateFollowed(index) }); lerr != nil {
		return lerr
	}
	return err
}

func (e *Engine) truncateFollowed(index uint64) error {
	if e.writer.Load() {
		return errors.New("engine: the writer cannot truncate its log")
	}
	tr, ok := e.cfg.Storage.(truncater)
	if !ok {
		return errors.New("engine: the storage cannot truncate")
	}
	applied := e.lastIdx
	if err := tr.TruncateAfter(index); err != nil {
		if index < applied {
			// The storage refuses (object storage or a local snapshot
			// holds what the cut would drop): nothing changed here.
			return fmt.Errorf("engine: cut after index %d below the applied %d: %w", index, applied, err)
		}
		e.failStorage(err)
		return err
	}
	if index < applied {
		// Applied entries the Primary's history replaced: the state
		// built on them must not be served, so it is rebuilt from the
		// storage, which now ends at index.
		if err := e.rebuild(); err != nil {
			e.failStorage(fmt.Errorf("rebuild the state after cutting the log after index %d: %w", index, err))
			return *e.failed.Load()
		}
		e.log.Warn("rebuilt the state below entries the Primary's history replaced",
			"cut_after", index, "was_applied", applied, "index", e.lastIdx, "rev", e.lastRev)
	}
	keep := 0
	for keep < len(e.follow) && e.follow[keep].Index <= index {
		keep++
	}
	clear(e.follow[keep:])
	e.follow = e.follow[:keep]
	e.syncMu.Lock()
	e.syncedIdx = min(e.syncedIdx, index)
	e.durableIdx.Store(min(e.durableIdx.Load(), index))
	e.syncMu.Unlock()
	e.publishAppended()
	return nil
}

// rebuild replaces the applied state with what the storage holds, all of
// it committed: its snapshot (or the empty store) and every entry after
// it. The committed revision may move back; that is the point: the state
// it replaces held entries the cluster never committed.
func (e *Engine) rebuild() error {
	snap, err := e.cfg.Storage.LoadSnapshot()
	if err != nil {
		return fmt.Errorf("load snapshot: %w", err)
	}
	hold := e.holdFor(snap)
	defer hold.Release()
	e.feed.events.drop()
	var term int64
	if snap != nil {
		term = snap.Header.Term
		if err := e.loadSnapshot(snap, true); err != nil {
			return fmt.Errorf("restore snapshot at index %d: %w", snap.Header.Index, err)
		}
	} else {
		// The empty store, as recover starts one (revision 1).
		if err := e.store.Replace(1, 0, nil); err != nil {
			return fmt.Errorf("restore the empty store: %w", err)
		}
		e.lease.reset()
		e.lastIdx, e.lastRev = 0, 1
		e.compactRev.Store(0)
		e.alarms.restore(nil)
	}
	e.reqs.reset(e.lastIdx)
	e.lastTerm.Store(term)
	e.follow = nil
	n, err := e.catchUpStorage()
	if err != nil {
		return err
	}
	e.sinceSnap = uint64(n)
	e.committedIdx.Store(e.lastIdx)
	e.committedRev.Store(e.lastRev)
	e.commitLimit = e.lastIdx
	e.broadcast()
	return nil
}
