package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
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
