package backup

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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

// The bucket layout restore reads (package objwal owns it and documents
// it): wal/{seq:020d} chunks and snapshots/{rev:020d}.
const (
	walPrefix  = "wal/"
	snapPrefix = "snapshots/"
	listPage   = 1000
	// fetchWindow is how many chunk GETs a replay keeps in flight: reading
	// a long history is dominated by round trips, not bytes.
	fetchWindow = 16
	// progressEvery is how many entries pass between progress reports.
	progressEvery = 1000

	// MarkerKey is the object a point-in-time restore keeps in the target
	// store while it writes there; see the package doc.
	MarkerKey = "restore-in-progress.json"
	// tmpMarker marks a temporary directory as a restore's own.
	tmpMarker = "RESTORING"
)

// ErrOutsideWindow means the revision asked for is not one the source
// bucket can rebuild: older than its oldest usable snapshot (or the start
// of its log), or newer than its newest entry.
var ErrOutsideWindow = errors.New("revision outside the restorable window")

// errCrash is what a simulated crash (tests) returns; nothing is cleaned.
var errCrash = errors.New("simulated crash")

// crashAt, when set (tests only), is asked at each stage of RestoreAt
// whether the process dies there: RestoreAt then returns errCrash at once,
// leaving whatever a power loss at that point would leave.
var crashAt func(stage string) bool

// Window is what a source bucket can restore: every revision from Oldest
// to Newest.
type Window struct {
	Oldest int64 `json:"oldest"`
	Newest int64 `json:"newest"`
}

func (w Window) String() string { return fmt.Sprintf("%d..%d", w.Oldest, w.Newest) }

// Progress is how far a replay has come.
type Progress struct {
	// Entries counts the log entries replayed so far.
	Entries int64
	// From is the revision replay started at (the base snapshot's),
	// Revision the one reached and To the one asked for.
	From, Revision, To int64
	Elapsed            time.Duration
	Done               bool
}

// PointInTime says what RestoreAt restores and where.
type PointInTime struct {
	// From is the source bucket (or prefix); it is only read. FromURL
	// names it in messages and the result.
	From    objstore.Store
	FromURL string
	// Revision is the revision to restore. (A time is turned into a
	// revision before RestoreAt is called.)
	Revision int64
	// Target is the new node's data directory and --storage; Storage (the
	// URL) is required, and Target.Store, when set, is used instead of
	// opening it.
	Target Target
	// Progress, when set, is called now and then during the replay and
	// once at its end (Done), from the calling goroutine.
	Progress func(Progress)
}

// PointInTimeResult is what RestoreAt did.
type PointInTimeResult struct {
	Result
	From string `json:"from"`
	// BaseRevision is the snapshot replay started from (0: the start of
	// the log).
	BaseRevision int64  `json:"base_snapshot_revision"`
	Replayed     int64  `json:"entries_replayed"`
	Window       Window `json:"window"`
	// Cleaned lists what an interrupted earlier restore had left in the
	// target store and this run deleted.
	Cleaned []string `json:"cleaned,omitempty"`
}

// RestoreAt rebuilds the state at p.Revision from the source bucket into a
// new data directory and an empty target store, so that a netsy started on
// them serves that state and continues from that revision. See the
// package doc for what it refuses and how it survives a crash.
func RestoreAt(ctx context.Context, p PointInTime) (res PointInTimeResult, err error) {
	t := &p.Target
	if t.Logger == nil {
		t.Logger = hclog.NewNullLogger()
	}
	if t.Clock == nil {
		t.Clock = clock.Real()
	}
	switch {
	case p.From == nil:
		return res, errors.New("restore: no source store (--from)")
	case t.DataDir == "":
		return res, errors.New("restore: --data-dir is required")
	case t.Storage == "":
		return res, errors.New("restore: --to is required (a new bucket or prefix the restored node will use)")
	case p.Revision <= 0:
		return res, fmt.Errorf("restore: revision %d: must be positive", p.Revision)
	}
	res.From = p.FromURL
	dataDir := absOr(t.DataDir)
	if err := checkDirEmpty(dataDir); err != nil {
		return res, err
	}

	// Nothing is written before the source says it can rebuild R.
	src := &source{store: p.From, url: p.FromURL, log: t.Logger}
	plan, err := src.plan(ctx, p.Revision)
	if err != nil {
		return res, err
	}
	res.Window, res.BaseRevision = plan.window, plan.baseRev

	to := t.Store
	if to == nil {
		var oerr error
		if to, oerr = openStore(ctx, t.Storage, t.StoreOptions); oerr != nil {
			return res, fmt.Errorf("--to: %w", oerr)
		}
		defer to.Close()
	}
	if res.Cleaned, err = prepareTarget(ctx, to, t.Storage, t.Logger); err != nil {
		return res, err
	}

	tmp := filepath.Join(filepath.Dir(dataDir), "."+filepath.Base(dataDir)+".restoring")
	tmpLock, err := claimTmp(tmp)
	if err != nil {
		return res, err
	}
	crashed := false
	marked := false
	defer func() {
		if crashed {
			tmpLock.Close()
			return
		}
		if err != nil && marked {
			// Take back what this attempt wrote to the target; should
			// that fail, the marker stays and a rerun does it.
			if _, cerr := cleanInterrupted(ctx, to, t.Storage, t.Logger, true); cerr != nil {
				err = fmt.Errorf("%w (the target %s still holds part of this restore: run the same restore again to remove it, or delete its wal/ and snapshots/ objects and %s)", err, t.Storage, MarkerKey)
			}
		}
		tmpLock.Close()
		os.RemoveAll(tmp)
	}()
	crash := func(stage string) bool {
		crashed = crashAt != nil && crashAt(stage)
		return crashed
	}

	body, _ := json.Marshal(map[string]any{"from": p.FromURL, "revision": p.Revision, "data_dir": dataDir})
	if _, err := to.PutIfAbsent(ctx, MarkerKey, body); err != nil {
		return res, fmt.Errorf("mark %s as being restored into (%s): %w", t.Storage, MarkerKey, err)
	}
	marked = true
	if crash("marked") {
		return res, errCrash
	}

	snap, replayed, err := replayTo(ctx, src, plan, filepath.Join(tmp, "work"), t.Clock, t.Logger, p.Progress)
	if err != nil {
		return res, err
	}
	res.Replayed = replayed

	staged := filepath.Join(tmp, "data")
	rt := *t
	rt.DataDir, rt.Store = staged, to
	r, err := Restore(ctx, snap, rt)
	if err != nil {
		return res, err
	}
	if crash("seeded") {
		return res, errCrash
	}
	// The data directory appears whole or not at all.
	if err := os.Rename(staged, dataDir); err != nil {
		return res, fmt.Errorf("move the restored data directory into place: %w", err)
	}
	if err := syncDir(filepath.Dir(dataDir)); err != nil {
		return res, err
	}
	if crash("renamed") {
		return res, errCrash
	}
	marked = false
	if err := to.Delete(ctx, MarkerKey); err != nil {
		// The restore is complete; the marker only makes a rerun into
		// the same target say what to delete.
		t.Logger.Warn("could not delete the restore marker; delete it by hand", "key", MarkerKey, "error", err)
	}
	r.DataDir = dataDir
	res.Result = r
	return res, nil
}

// checkDirEmpty refuses a data directory that holds anything, without
// creating it.
func checkDirEmpty(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("data directory %s: %w", dir, err)
	case len(ents) > 0:
		return fmt.Errorf("data directory %s holds %s: %w; restore into a new or empty directory", dir, ents[0].Name(), ErrNotEmpty)
	}
	return nil
}

// claimTmp makes tmp a fresh working directory, locked for this run. A
// leftover one of an interrupted run (it carries tmpMarker) is removed; a
// locked one belongs to a restore still running.
func claimTmp(tmp string) (*os.File, error) {
	if _, err := os.Stat(tmp); err == nil {
		if _, merr := os.Stat(filepath.Join(tmp, tmpMarker)); merr != nil {
			return nil, fmt.Errorf("%s exists and is not a restore's working directory: move it away", tmp)
		}
		l, err := lockDir(tmp)
		if err != nil {
			return nil, fmt.Errorf("another restore into the same data directory is running (%s is locked): %w", tmp, err)
		}
		l.Close()
		if err := os.RemoveAll(tmp); err != nil {
			return nil, fmt.Errorf("remove the working directory of an interrupted restore: %w", err)
		}
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("create the restore's working directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, tmpMarker), nil, 0o644); err != nil {
		return nil, err
	}
	return lockDir(tmp)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// prepareTarget makes sure the target store is empty, or holds only what
// an interrupted restore wrote (which it then deletes).
func prepareTarget(ctx context.Context, to objstore.Store, url string, log hclog.Logger) ([]string, error) {
	if _, _, err := to.Get(ctx, MarkerKey); err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, checkEmptyStore(ctx, to, url)
		}
		return nil, fmt.Errorf("check %s for an interrupted restore: %w", url, err)
	}
	return cleanInterrupted(ctx, to, url, log, false)
}

// cleanInterrupted deletes what a restore writes (a seeded snapshot, the
// empty chunks that claim the log, then the marker) from a target that
// holds the marker. Anything else there (a chunk with entries: a node ran
// on it) makes it refuse, listing what to delete. ownRun says the caller
// is the restore that wrote them (taking back a failed attempt).
func cleanInterrupted(ctx context.Context, to objstore.Store, url string, log hclog.Logger, ownRun bool) ([]string, error) {
	var ours, foreign []string
	for _, prefix := range []string{walPrefix, snapPrefix} {
		objs, err := listAll(ctx, to, prefix)
		if err != nil {
			return nil, fmt.Errorf("list %s of %s: %w", prefix, url, err)
		}
		for _, o := range objs {
			if prefix == walPrefix {
				body, _, err := to.Get(ctx, o.Key)
				if err != nil {
					return nil, fmt.Errorf("read %s of %s: %w", o.Key, url, err)
				}
				if ents, _, err := datafile.DecodeChunk(o.Key, body); err != nil || len(ents) > 0 {
					foreign = append(foreign, o.Key)
					continue
				}
			}
			ours = append(ours, o.Key)
		}
	}
	if len(foreign) > 0 || len(ours) > 3 {
		all := append(append([]string(nil), ours...), foreign...)
		return nil, fmt.Errorf("storage %s holds %s, left by an interrupted restore, but also objects a restore does not write "+
			"(%s: did a node run on it?): %w; delete %s and %s by hand, or restore into a new prefix",
			url, MarkerKey, strings.Join(foreign, ", "), ErrNotEmpty, strings.Join(all, ", "), MarkerKey)
	}
	if !ownRun {
		log.Warn("the target holds what an interrupted restore wrote; deleting it", "storage", url, "objects", ours)
	}
	for _, k := range ours {
		if err := to.Delete(ctx, k); err != nil {
			return nil, fmt.Errorf("delete %s (left by an interrupted restore) from %s: %w", k, url, err)
		}
	}
	if err := to.Delete(ctx, MarkerKey); err != nil {
		return nil, fmt.Errorf("delete %s from %s: %w", MarkerKey, url, err)
	}
	return ours, nil
}

func listAll(ctx context.Context, s objstore.Store, prefix string) ([]objstore.ObjectInfo, error) {
	var out []objstore.ObjectInfo
	after := ""
	for {
		page, err := s.List(ctx, prefix, after, listPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < listPage {
			return out, nil
		}
		after = page[len(page)-1].Key
	}
}

func parseNum(key, prefix string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, prefix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n > 0
}

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
