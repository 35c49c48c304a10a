package backup

// Point-in-time replay: reading the source bucket's snapshots and chunks
// (source, restorePlan) and rebuilding the state at a revision through an
// engine over a read-only storage (OpenAt, replayTo, replayStorage).
// RestoreAt (pitr.go) seeds a new bucket from the result.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objwal"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// source reads the bucket a restore starts from.
type source struct {
	store objstore.Store
	url   string
	log   hclog.Logger
	// keysOnly makes plan name the base snapshot (baseKey) without
	// downloading it: a branch only pins it.
	keysOnly bool
}

// restorePlan is where a replay starts and what it reads.
type restorePlan struct {
	rev     int64
	window  Window
	base    *datafile.Snapshot // nil: the start of the log
	baseRev int64
	// baseKey names the base snapshot ("": the start of the log) and
	// baseWalSeq its header's wal_seq.
	baseKey    string
	baseWalSeq uint64
	// seqs are the chunks to read, in order, the first one after the
	// base snapshot's wal_seq (or seq 1).
	seqs []uint64
}

type snapObj struct {
	rev  int64
	key  string
	size int64
}

// plan finds the newest usable snapshot at or below rev and the chunks
// after it, or says why rev cannot be restored, with the window.
func (s *source) plan(ctx context.Context, rev int64) (*restorePlan, error) {
	objs, err := listAll(ctx, s.store, snapPrefix)
	if err != nil {
		return nil, fmt.Errorf("list the snapshots of %s: %w", s.url, err)
	}
	var snaps []snapObj
	for _, o := range objs {
		n, ok := parseNum(o.Key, snapPrefix)
		if !ok {
			return nil, fmt.Errorf("%s: %q is not a snapshot key", s.url, o.Key)
		}
		snaps = append(snaps, snapObj{rev: int64(n), key: o.Key, size: o.Size})
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].rev < snaps[j].rev })
	objs, err = listAll(ctx, s.store, walPrefix)
	if err != nil {
		return nil, fmt.Errorf("list the chunks of %s: %w", s.url, err)
	}
	var seqs []uint64
	for _, o := range objs {
		n, ok := parseNum(o.Key, walPrefix)
		if !ok {
			return nil, fmt.Errorf("%s: %q is not a wal chunk key", s.url, o.Key)
		}
		seqs = append(seqs, n)
	}
	if len(snaps) == 0 && len(seqs) == 0 {
		return nil, fmt.Errorf("%s holds no snapshots/ or wal/ objects: is it a netsy bucket (and the right prefix)?", s.url)
	}
	// Only the newest unbroken run of chunks can be replayed: below a hole
	// nothing leads to the tip.
	low := 0
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			low = i
		}
	}
	seqs = seqs[low:]
	var lowSeq, tipSeq uint64
	if len(seqs) > 0 {
		lowSeq, tipSeq = seqs[0], seqs[len(seqs)-1]
	}

	// The newest revision: the last entry of the newest chunk that holds
	// one (claims are empty), or the newest snapshot's.
	var newest int64
	if len(snaps) > 0 {
		newest = snaps[len(snaps)-1].rev
	}
	for i := len(seqs) - 1; i >= 0; i-- {
		ents, err := s.chunk(ctx, seqs[i])
		if err != nil {
			return nil, err
		}
		if len(ents) > 0 {
			newest = max(newest, ents[len(ents)-1].Revision)
			break
		}
	}

	// usable says whether replay can start from a snapshot whose header
	// says walSeq: every chunk after it must still be there.
	usable := func(walSeq uint64) bool {
		return len(seqs) == 0 || walSeq+1 >= lowSeq && walSeq <= tipSeq
	}
	headers := map[string]*netsyv1.SnapshotHeader{}
	header := func(so snapObj) (*netsyv1.SnapshotHeader, error) {
		if h := headers[so.key]; h != nil {
			return h, nil
		}
		h, err := s.snapshotHeader(ctx, so.key)
		if err != nil {
			return nil, err
		}
		headers[so.key] = h
		return h, nil
	}
	startsAtOne := func() (bool, error) {
		if lowSeq != 1 {
			return false, nil
		}
		for _, seq := range seqs {
			ents, err := s.chunk(ctx, seq)
			if err != nil {
				return false, err
			}
			if len(ents) > 0 {
				return ents[0].Index == 1, nil
			}
		}
		return false, nil
	}
	window := func() (Window, error) {
		w := Window{Newest: newest, Oldest: -1}
		for _, so := range snaps {
			h, err := header(so)
			if err != nil {
				return w, err
			}
			if usable(h.WalSeq) {
				w.Oldest = so.rev
				break
			}
		}
		if ok, err := startsAtOne(); err != nil {
			return w, err
		} else if ok {
			w.Oldest = 1
		}
		return w, nil
	}

	p := &restorePlan{rev: rev}
	outside := func() error {
		w, err := window()
		if err != nil {
			return err
		}
		if w.Oldest < 0 {
			return fmt.Errorf("revision %d: %s holds no snapshot that the chunks after it still lead from: %w", rev, s.url, ErrOutsideWindow)
		}
		return fmt.Errorf("revision %d: %s can restore revisions %s only: %w", rev, s.url, w, ErrOutsideWindow)
	}
	if rev > newest {
		return nil, outside()
	}
	for i := len(snaps) - 1; i >= 0 && p.baseKey == ""; i-- {
		so := snaps[i]
		if so.rev > rev {
			continue
		}
		h, err := header(so)
		if err != nil {
			return nil, err
		}
		if !usable(h.WalSeq) {
			// Older snapshots lead from even older chunks.
			break
		}
		p.baseKey, p.baseWalSeq = so.key, h.WalSeq
		if !s.keysOnly {
			if p.base, err = s.snapshot(ctx, so); err != nil {
				return nil, err
			}
		}
		p.baseRev = so.rev
		for _, seq := range seqs {
			if seq > h.WalSeq {
				p.seqs = append(p.seqs, seq)
			}
		}
	}
	if p.baseKey == "" {
		ok, err := startsAtOne()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, outside()
		}
		p.seqs = seqs
	}
	w, err := window()
	if err != nil {
		return nil, err
	}
	p.window = w
	return p, nil
}

// chunk downloads and decodes one chunk.
func (s *source) chunk(ctx context.Context, seq uint64) ([]*netsyv1.Entry, error) {
	key := fmt.Sprintf("%s%020d", walPrefix, seq)
	body, _, err := s.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s from %s: %w", key, s.url, err)
	}
	ents, _, err := datafile.DecodeChunk(key, body)
	if err != nil {
		return nil, fmt.Errorf("chunk %s of %s: %w", key, s.url, err)
	}
	return ents, nil
}

// snapshotHeader reads only the header record of a snapshot.
func (s *source) snapshotHeader(ctx context.Context, key string) (*netsyv1.SnapshotHeader, error) {
	rc, _, err := s.store.GetReader(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s from %s: %w", key, s.url, err)
	}
	defer rc.Close()
	dr, err := datafile.NewReader(key, rc)
	if err != nil {
		return nil, err
	}
	payload, err := dr.Next()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: read header: %w", key, err)
	}
	rec := &netsyv1.SnapshotRecord{}
	if err := proto.Unmarshal(payload, rec); err != nil || rec.GetHeader() == nil {
		return nil, fmt.Errorf("snapshot %s: the first record is not a header", key)
	}
	return rec.GetHeader(), nil
}

// snapshot downloads and verifies a whole snapshot, decoding it as it
// streams in.
func (s *source) snapshot(ctx context.Context, so snapObj) (*datafile.Snapshot, error) {
	rc, _, err := s.store.GetReader(ctx, so.key)
	if err != nil {
		return nil, fmt.Errorf("get %s from %s: %w", so.key, s.url, err)
	}
	defer rc.Close()
	snap, err := datafile.DecodeSnapshot(so.key, rc)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s of %s: %w", so.key, s.url, err)
	}
	if snap.Header.Revision != so.rev {
		return nil, fmt.Errorf("snapshot %s of %s: its header says revision %d", so.key, s.url, snap.Header.Revision)
	}
	return snap, nil
}

// At says which state OpenAt rebuilds, and how the engine holding it is
// set up.
type At struct {
	// From is the bucket (or prefix) to read; it is only read. FromURL
	// names it in messages.
	From    objstore.Store
	FromURL string
	// Revision is the revision to rebuild.
	Revision int64
	// SpillDir is scratch space the engine owns for large values (see
	// engine.Config.SpillDir); empty keeps every value in memory.
	SpillDir string
	// Clock times the progress reports (default the real clock). The
	// engine itself runs on a clock that never moves: see OpenAt.
	Clock  clock.Clock
	Logger hclog.Logger
	// ClusterID, MemberID and Members are the identity the engine reports
	// (response headers, Status, MemberList).
	ClusterID, MemberID uint64
	Members             func() []*pb.Member
	// Progress, when set, is called now and then during the replay and
	// once at its end (Done), from the calling goroutine.
	Progress func(Progress)
}

// StateAt is the state at a revision, held by an engine that only reads.
type StateAt struct {
	// Engine serves the state at Revision and the history it holds below
	// it. It is a follower on a Storage that refuses every append, so it
	// makes nothing durable anywhere: its writes fail (ErrNotPrimary).
	// Close it when done.
	Engine       *engine.Engine
	Revision     int64
	Window       Window
	BaseRevision int64 // the snapshot replay started from (0: the log's start)
	Replayed     int64 // entries replayed past it
}

// OpenAt rebuilds the state at a.Revision from the bucket, as RestoreAt
// does, and hands it over in an opened engine instead of a data directory:
// nothing is written to the bucket or to disk (but spilled values in
// a.SpillDir). A revision outside the window is refused with the window in
// the message (ErrOutsideWindow). The engine runs on a clock that never
// moves, so each lease keeps exactly the remaining time the log gives it
// at the revision, however long the engine stays open.
func OpenAt(ctx context.Context, a At) (*StateAt, error) {
	if a.Logger == nil {
		a.Logger = hclog.NewNullLogger()
	}
	if a.Clock == nil {
		a.Clock = clock.Real()
	}
	switch {
	case a.From == nil:
		return nil, errors.New("no source store")
	case a.Revision <= 0:
		return nil, fmt.Errorf("revision %d: must be positive", a.Revision)
	}
	src := &source{store: a.From, url: a.FromURL, log: a.Logger}
	plan, err := src.plan(ctx, a.Revision)
	if err != nil {
		return nil, err
	}
	eng, replayed, err := openReplayed(ctx, src, plan, a)
	if err != nil {
		return nil, err
	}
	return &StateAt{Engine: eng, Revision: plan.rev, Window: plan.window, BaseRevision: plan.baseRev, Replayed: replayed}, nil
}

// openReplayed opens an engine over the base snapshot and the bucket's
// entries up to plan.rev, with the engine's own replay (engine.Open over a
// read-only Storage), so the apply code is the engine's own.
func openReplayed(ctx context.Context, src *source, plan *restorePlan, a At) (*engine.Engine, int64, error) {
	st := &replayStorage{ctx: ctx, src: src, plan: plan, clk: a.Clock, progress: a.Progress, start: a.Clock.Now()}
	eng, err := engine.Open(engine.Config{
		Storage:   st,
		Clock:     clock.NewFake(a.Clock.Now()),
		Logger:    a.Logger,
		ClusterID: a.ClusterID,
		MemberID:  a.MemberID,
		Members:   a.Members,
		Follower:  true,
		SpillDir:  a.SpillDir,
		// Replay only: the state is never saved from here.
		SnapshotEntries: 1 << 62,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("replay %s up to revision %d: %w", src.url, plan.rev, err)
	}
	if _, rev, _ := eng.LastAppended(); rev != plan.rev {
		eng.Close()
		return nil, 0, fmt.Errorf("replay %s stopped at revision %d, short of %d: the log ends early", src.url, rev, plan.rev)
	}
	// The engine holds the state now; the decoded base snapshot would
	// otherwise stay reachable through the Storage as long as the engine
	// is open (a read-only node's lifetime), doubling its memory. Nothing
	// reloads it: this engine is never promoted or resynced.
	st.plan.base, st.released = nil, true
	return eng, st.entries, nil
}

// replayTo rebuilds the state at plan.rev (openReplayed) and returns it as
// a snapshot.
func replayTo(ctx context.Context, src *source, plan *restorePlan, work string, clk clock.Clock, log hclog.Logger,
	progress func(Progress)) (*datafile.Snapshot, int64, error) {
	if err := os.MkdirAll(filepath.Join(work, "spill"), 0o755); err != nil {
		return nil, 0, err
	}
	eng, replayed, err := openReplayed(ctx, src, plan, At{
		Clock: clk, Logger: log, Progress: progress, SpillDir: filepath.Join(work, "spill"),
	})
	if err != nil {
		return nil, 0, err
	}
	defer eng.Close()
	// Encoded to a file and decoded back: the state is checked by every
	// CRC of the data-file format before it is seeded anywhere.
	path := filepath.Join(work, "snapshot")
	f, err := os.Create(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 256<<10)
	if _, err := eng.Snapshot(ctx, bw); err != nil {
		return nil, 0, fmt.Errorf("snapshot the state at revision %d: %w", plan.rev, err)
	}
	if err := bw.Flush(); err != nil {
		return nil, 0, fmt.Errorf("write the state at revision %d: %w", plan.rev, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	snap, err := datafile.DecodeSnapshot(path, bufio.NewReaderSize(f, 256<<10))
	if err != nil {
		return nil, 0, fmt.Errorf("verify the state at revision %d: %w", plan.rev, err)
	}
	return snap, replayed, nil
}

// errReachedTarget stops the replay once the next entry is past the
// revision restored.
var errReachedTarget = errors.New("reached the target revision")

// replayStorage is the engine.Storage of a restore: the base snapshot,
// then the bucket's entries up to the target revision. It takes no
// writes.
type replayStorage struct {
	ctx      context.Context
	src      *source
	plan     *restorePlan
	clk      clock.Clock
	progress func(Progress)
	start    time.Time
	entries  int64
	last     uint64
	// released: the replay is over and the base snapshot dropped.
	released bool
}

func (r *replayStorage) Attach(onSync func(uint64, error)) {
	if r.last > 0 {
		onSync(r.last, nil)
	}
}

func (r *replayStorage) LoadSnapshot() (*datafile.Snapshot, error) {
	if r.released {
		return nil, errors.New("the base snapshot was released after the replay")
	}
	return r.plan.base, nil
}

func (r *replayStorage) Append(*netsyv1.Entry) error {
	return errors.New("restore: the replay takes no writes")
}

func (r *replayStorage) SaveSnapshot(*datafile.Snapshot) error { return nil }

func (r *replayStorage) report(rev int64, done bool) {
	if r.progress == nil {
		return
	}
	r.progress(Progress{Entries: r.entries, From: r.plan.baseRev, Revision: rev, To: r.plan.rev,
		Elapsed: r.clk.Since(r.start), Done: done})
}

// Replay hands the engine every entry after the base snapshot whose
// revision is at most the target: key-less entries logged at the target
// revision (lease grants and checkpoints, compactions) are part of its
// state, as they were of a node's at that revision.
func (r *replayStorage) Replay(from uint64, fn func(*netsyv1.Entry) error) error {
	r.last = from - 1
	rev := r.plan.baseRev
	err := fetchInOrder(r.ctx, r.src, r.plan.seqs, func(seq uint64, ents []*netsyv1.Entry) error {
		for _, e := range ents {
			if e.Index < from {
				continue
			}
			if e.Revision > r.plan.rev {
				return errReachedTarget
			}
			if e.Index != r.last+1 {
				return fmt.Errorf("chunk %s%020d of %s: entry %d follows %d: the history has a hole", walPrefix, seq, r.src.url, e.Index, r.last)
			}
			if err := fn(e); err != nil {
				return err
			}
			r.last, rev = e.Index, e.Revision
			r.entries++
			if r.entries%progressEvery == 0 {
				r.report(rev, false)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errReachedTarget) {
		return err
	}
	r.report(rev, true)
	return nil
}

// fetchInOrder downloads the chunks seqs, up to fetchWindow at a time, and
// hands them to fn strictly in order. Downloads still running when it
// returns are canceled and waited for.
func fetchInOrder(ctx context.Context, src *source, seqs []uint64, fn func(uint64, []*netsyv1.Entry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	type fetched struct {
		ents []*netsyv1.Entry
		err  error
	}
	results := make([]chan fetched, len(seqs))
	next := 0
	start := func(i int) {
		results[i] = make(chan fetched, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ents, err := src.chunk(ctx, seqs[i])
			results[i] <- fetched{ents, err}
		}()
	}
	for ; next < len(seqs) && next < fetchWindow; next++ {
		start(next)
	}
	for i := range seqs {
		f := <-results[i]
		if next < len(seqs) {
			start(next)
			next++
		}
		if f.err != nil {
			return f.err
		}
		if err := fn(seqs[i], f.ents); err != nil {
			return err
		}
	}
	return nil
}

// RevisionAtTime is the last point committed at or before t in store's
// history (the state a reader saw at t). A t before the history the
// bucket keeps is refused with the window's revisions and times
// (objwal.RangeError); so is a t after now, whose state no one has seen:
// the cluster may still commit before it.
func RevisionAtTime(ctx context.Context, store objstore.Store, t, now time.Time) (objwal.Point, error) {
	if t.After(now) {
		return objwal.Point{}, fmt.Errorf("time %s is in the future (now %s)", t.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339))
	}
	return objwal.RevisionAt(ctx, store, t)
}
