package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objwal"
)

// ManifestKey is the object that makes a store a branch: it names the
// parent, the revision and the parent's objects the branch starts from.
const ManifestKey = "branch.json"

const manifestVersion = 1

// ErrBranchBusy means another node is building the branch's state (or
// crashed while doing so).
var ErrBranchBusy = errors.New("another node is building this branch")

// ErrBranchObjectGone means an object a branch reads is no longer in its
// parent (deleted by the parent's GC before the pin held it).
var ErrBranchObjectGone = errors.New("an object the branch reads is gone from its parent")

// Manifest is the body of ManifestKey in a branch's store.
type Manifest struct {
	Version int `json:"version"`
	// ID names the branch; its pin in the parent is objwal.PinKey(ID).
	ID string `json:"id"`
	// Parent is the parent's --storage URL, as the branch command was
	// given it; a branch node opens it read-only to build its state.
	Parent   string `json:"parent"`
	Revision int64  `json:"revision"`
	// Snapshot, FirstSeq and LastSeq are the parent's objects pinned.
	Snapshot string `json:"snapshot,omitempty"`
	FirstSeq uint64 `json:"first_seq,omitempty"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
	// Released: the branch holds its own snapshot at Revision and has
	// dropped its pin; it no longer reads the parent.
	Released  bool   `json:"released,omitempty"`
	CreatedAt string `json:"created_at,omitempty"`
}

// BranchID is the id of the branch stored at toURL: derived from the URL,
// so a rerun of the same branch command finds the pin it wrote.
func BranchID(toURL string) string {
	sum := sha256.Sum256([]byte(toURL))
	return "b" + hex.EncodeToString(sum[:8])
}

// Branching says which branch CreateBranch makes.
type Branching struct {
	// From is the parent; only its pin is ever written there.
	From    objstore.Store
	FromURL string
	// To is the branch's store, which must be empty; ToURL is its
	// --storage URL.
	To       objstore.Store
	ToURL    string
	Revision int64
	Clock    clock.Clock
	Logger   hclog.Logger
}

// BranchResult is what CreateBranch made.
type BranchResult struct {
	Manifest
	To     string `json:"to"`
	Window Window `json:"window"`
	// Resumed: an earlier run had written the pin or the manifest; this
	// one finished it.
	Resumed bool `json:"resumed,omitempty"`
}

// CreateBranch makes b.To a branch of b.From at b.Revision without copying
// anything: it pins, in the parent, the snapshot and chunks a node needs
// to rebuild the revision, checks they are all still there, and only then
// writes the manifest into the branch's store. It reads the parent's
// listings and a few headers, never a snapshot's body, so it takes the
// same time whatever the size. A crash leaves a pin without a manifest,
// which a rerun (same --to) finishes and DeleteBranch removes.
func CreateBranch(ctx context.Context, b Branching) (res BranchResult, err error) {
	if b.Logger == nil {
		b.Logger = hclog.NewNullLogger()
	}
	if b.Clock == nil {
		b.Clock = clock.Real()
	}
	switch {
	case b.From == nil || b.To == nil:
		return res, errors.New("branch: --from and --to are required")
	case b.FromURL == b.ToURL:
		return res, errors.New("branch: --to must differ from --from")
	case b.Revision <= 0:
		return res, fmt.Errorf("branch: revision %d: must be positive", b.Revision)
	}
	res.To = b.ToURL
	id := BranchID(b.ToURL)

	m, _, err := readManifest(ctx, b.To, b.ToURL)
	switch {
	case err != nil:
		return res, err
	case m != nil && m.Parent == b.FromURL && m.Revision == b.Revision:
		res.Manifest, res.Resumed = *m, true
		return res, nil
	case m != nil:
		return res, fmt.Errorf("%s is already a branch of %s at revision %d: %w", b.ToURL, m.Parent, m.Revision, ErrNotEmpty)
	}
	if _, _, err := b.To.Get(ctx, MarkerKey); err == nil {
		return res, fmt.Errorf("%s holds %s (a restore was interrupted there): %w; branch into a new prefix", b.ToURL, MarkerKey, ErrNotEmpty)
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return res, fmt.Errorf("check %s: %w", b.ToURL, err)
	}
	if err := checkEmptyStore(ctx, b.To, b.ToURL); err != nil {
		return res, err
	}

	src := &source{store: b.From, url: b.FromURL, log: b.Logger, keysOnly: true}
	plan, err := src.plan(ctx, b.Revision)
	if err != nil {
		return res, err
	}
	res.Window = plan.window
	pin := objwal.Pin{ID: id, Child: b.ToURL, Revision: b.Revision, Snapshot: plan.baseKey,
		CreatedAt: b.Clock.Wall().UTC().Format(time.RFC3339)}
	if n := len(plan.seqs); n > 0 {
		pin.FirstSeq, pin.LastSeq = plan.seqs[0], plan.seqs[n-1]
	}

	// 1. The pin, before anything in the branch's store names the
	// parent's objects.
	created := false
	if _, err := b.From.PutIfAbsent(ctx, objwal.PinKey(id), pin.Encode()); err == nil {
		created = true
	} else if errors.Is(err, objstore.ErrPreconditionFailed) {
		// An earlier run's pin (it crashed before the manifest): keep it.
		body, _, gerr := b.From.Get(ctx, objwal.PinKey(id))
		if gerr != nil {
			return res, fmt.Errorf("read the pin %s an earlier run left in %s: %w", objwal.PinKey(id), b.FromURL, gerr)
		}
		old, derr := objwal.DecodePin(objwal.PinKey(id), body)
		if derr != nil {
			return res, derr
		}
		if old.Child != b.ToURL || old.Revision != b.Revision {
			return res, fmt.Errorf("%s already holds %s, a pin for %s at revision %d: delete it (netsyctl branch delete) or branch into another --to",
				b.FromURL, objwal.PinKey(id), old.Child, old.Revision)
		}
		pin, res.Resumed = old, true
	} else {
		return res, fmt.Errorf("pin the branch's objects in %s (%s): %w", b.FromURL, objwal.PinKey(id), err)
	}
	if crash("pinned") {
		return res, errCrash
	}
	// 2. Every pinned object is still there: GC may have deleted one
	// between the plan and the pin.
	if err := checkPinned(ctx, b.From, b.FromURL, pin); err != nil {
		if created || errors.Is(err, ErrBranchObjectGone) {
			if derr := b.From.Delete(ctx, objwal.PinKey(id)); derr != nil {
				b.Logger.Warn("could not remove the pin of a failed branch; run netsyctl branch delete", "key", objwal.PinKey(id), "error", derr)
			}
		}
		return res, err
	}
	// 3. The manifest: from now on the branch exists.
	m = &Manifest{Version: manifestVersion, ID: id, Parent: b.FromURL, Revision: pin.Revision, Snapshot: pin.Snapshot,
		FirstSeq: pin.FirstSeq, LastSeq: pin.LastSeq, CreatedAt: pin.CreatedAt}
	body, _ := json.Marshal(m)
	if _, err := b.To.PutIfAbsent(ctx, ManifestKey, body); err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
		return res, fmt.Errorf("write %s into %s (the pin stays; run the same branch command again, or netsyctl branch delete): %w", ManifestKey, b.ToURL, err)
	} else if err != nil {
		// A lost answer to our own write, or a racing branch command.
		got, _, rerr := readManifest(ctx, b.To, b.ToURL)
		if rerr != nil {
			return res, rerr
		}
		if got == nil || got.Parent != b.FromURL || got.Revision != b.Revision {
			return res, fmt.Errorf("%s was made a branch of something else meanwhile: %w", b.ToURL, ErrNotEmpty)
		}
	}
	res.Manifest = *m
	return res, nil
}

// crash is crashAt for the branch stages (tests only).
func crash(stage string) bool { return crashAt != nil && crashAt(stage) }

// checkPinned makes sure every object pin names is in store.
func checkPinned(ctx context.Context, store objstore.Store, url string, pin objwal.Pin) error {
	if pin.Snapshot != "" {
		rc, _, err := store.GetReader(ctx, pin.Snapshot)
		if errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("%s of %s: %w; branch at a later revision", pin.Snapshot, url, ErrBranchObjectGone)
		} else if err != nil {
			return fmt.Errorf("check %s of %s: %w", pin.Snapshot, url, err)
		}
		rc.Close() // opened only to see that it is there
	}
	if pin.FirstSeq == 0 {
		return nil
	}
	want := pin.FirstSeq
	after := fmt.Sprintf("%s%020d", walPrefix, pin.FirstSeq-1)
	for want <= pin.LastSeq {
		page, err := store.List(ctx, walPrefix, after, listPage)
		if err != nil {
			return fmt.Errorf("list the chunks of %s: %w", url, err)
		}
		for _, o := range page {
			n, ok := parseNum(o.Key, walPrefix)
			if !ok || n > pin.LastSeq {
				break
			}
			if n != want {
				return fmt.Errorf("%s%020d of %s: %w; branch at a later revision", walPrefix, want, url, ErrBranchObjectGone)
			}
			want++
		}
		if want > pin.LastSeq {
			break
		}
		if len(page) < listPage {
			return fmt.Errorf("%s%020d of %s: %w; branch at a later revision", walPrefix, want, url, ErrBranchObjectGone)
		}
		after = page[len(page)-1].Key
	}
	return nil
}

// readManifest returns the branch manifest in store, or nil when there is
// none.
func readManifest(ctx context.Context, store objstore.Store, url string) (*Manifest, string, error) {
	body, etag, err := store.Get(ctx, ManifestKey)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read %s of %s: %w", ManifestKey, url, err)
	}
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil || m.Version != manifestVersion || !objwal.ValidPinID(m.ID) || m.Parent == "" || m.Revision <= 0 {
		return nil, "", fmt.Errorf("%s of %s is not a branch manifest this netsy reads", ManifestKey, url)
	}
	return &m, etag, nil
}

// DeleteBranch removes branch id's pin from the parent, releasing the
// objects it held to the parent's next GC. A branch that has not yet
// started (its manifest is not Released) can no longer start after this.
// A pin already gone is not an error (deleted reports whether it was
// there).
func DeleteBranch(ctx context.Context, parent objstore.Store, parentURL, id string) (deleted bool, err error) {
	if !objwal.ValidPinID(id) {
		return false, fmt.Errorf("branch id %q: not a branch id", id)
	}
	key := objwal.PinKey(id)
	if _, _, err := parent.Get(ctx, key); errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("read %s of %s: %w", key, parentURL, err)
	}
	if err := parent.Delete(ctx, key); err != nil {
		return false, fmt.Errorf("delete %s from %s: %w", key, parentURL, err)
	}
	return true, nil
}

// ListBranches returns the pins of parent's live branches.
func ListBranches(ctx context.Context, parent objstore.Store) ([]objwal.Pin, error) {
	return objwal.ReadPins(ctx, parent)
}

// BranchStart is a node starting on a store that may be a branch.
type BranchStart struct {
	// Store is the node's --storage, URL its URL.
	Store objstore.Store
	URL   string
	// DataDir is the node's data directory (locked by the node); the
	// state is built into DataDir/wal.
	DataDir string
	// OpenParent opens the parent's URL as the manifest names it (with
	// the node's own S3 settings); the parent is only read, but for the
	// pin's release.
	OpenParent func(ctx context.Context, url string) (objstore.Store, error)
	Clock      clock.Clock
	Logger     hclog.Logger
	Progress   func(Progress)
}

// BranchStarted is what StartBranch did.
type BranchStarted struct {
	// Branch: the store is a branch (else nothing else is set).
	Branch   bool
	Manifest Manifest
	// Built: this call built the state at the revision and seeded the
	// branch's store with it; Replayed entries after the base snapshot.
	Built    bool
	Replayed int64
	// Released: this call dropped the pin in the parent.
	Released bool
}

// StartBranch runs before a node opens its log. On a store holding a
// branch manifest whose state is not yet built (no wal/ or snapshots/
// objects, or only an interrupted build's), and an empty wal directory, it
// rebuilds the state at the manifest's revision from the parent's objects
// (read-only, with RestoreAt's replay), seeds the branch's store and the
// wal directory with a snapshot at that revision as Restore does, and
// then drops the pin: from then on the branch is an ordinary database the
// node opens as any other. Anything else it leaves to the log's own
// start, only retrying a pin release that failed before.
//
// One node builds a branch: another node starting meanwhile fails with
// ErrBranchBusy (and may be started again once the first is up).
func StartBranch(ctx context.Context, b BranchStart) (res BranchStarted, err error) {
	if b.Logger == nil {
		b.Logger = hclog.NewNullLogger()
	}
	if b.Clock == nil {
		b.Clock = clock.Real()
	}
	m, etag, err := readManifest(ctx, b.Store, b.URL)
	if err != nil || m == nil {
		return res, err
	}
	res.Branch, res.Manifest = true, *m
	if m.Released {
		return res, nil
	}
	var parent objstore.Store
	openParent := func() (objstore.Store, error) {
		if parent == nil {
			p, err := b.OpenParent(ctx, m.Parent)
			if err != nil {
				return nil, fmt.Errorf("open the branch's parent %s: %w", m.Parent, err)
			}
			parent = p
		}
		return parent, nil
	}
	defer func() {
		if parent != nil {
			parent.Close()
		}
	}()

	walDir := filepath.Join(b.DataDir, "wal")
	build, err := needsBuild(ctx, b.Store, b.URL, walDir, builderOf(b.DataDir))
	if err != nil {
		return res, err
	}
	if build {
		p, err := openParent()
		if err != nil {
			return res, err
		}
		if res.Replayed, err = buildBranch(ctx, b, m, p, walDir); err != nil {
			return res, err
		}
		res.Built = true
	}
	// The branch holds its own snapshot now (built here or by an earlier
	// start): the parent's objects are no longer needed.
	p, err := openParent()
	if err == nil {
		_, err = DeleteBranch(ctx, p, m.Parent, m.ID)
	}
	if err != nil {
		b.Logger.Warn("the branch no longer needs its parent, but its pin could not be dropped; the next start retries, or run netsyctl branch delete",
			"parent", m.Parent, "branch", m.ID, "error", err)
		return res, nil
	}
	res.Released = true
	rel := *m
	rel.Released = true
	body, _ := json.Marshal(rel)
	if _, err := b.Store.PutIfMatch(ctx, ManifestKey, body, etag); err != nil {
		b.Logger.Warn("could not mark the branch manifest released; the next start only retries the (done) release", "error", err)
	}
	res.Manifest = rel
	return res, nil
}

// needsBuild says whether the branch's state must be built here: the wal
// directory is empty and the store holds no log but, at most, what an
// interrupted build of this same builder wrote (which it then deletes).
// Another builder's marker means another node is building the branch (or
// crashed doing so): it is left alone, and the start fails naming it.
func needsBuild(ctx context.Context, store objstore.Store, url, walDir, builder string) (bool, error) {
	if ents, err := os.ReadDir(walDir); err == nil && len(ents) > 0 {
		return false, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("wal directory %s: %w", walDir, err)
	}
	if body, _, err := store.Get(ctx, MarkerKey); err == nil {
		var mk struct {
			Builder string `json:"builder"`
		}
		if json.Unmarshal(body, &mk) != nil || mk.Builder != builder {
			return false, fmt.Errorf("%s holds %s of another builder (%q; this node is %q): %w; "+
				"wait for it to finish, or, if it crashed, start it again or delete %s", url, MarkerKey, mk.Builder, builder, ErrBranchBusy, MarkerKey)
		}
		if _, err := cleanInterrupted(ctx, store, url, hclog.NewNullLogger(), false); err != nil {
			return false, err
		}
		return true, nil
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return false, fmt.Errorf("check %s for an interrupted branch start: %w", url, err)
	}
	if err := checkEmptyStore(ctx, store, url); errors.Is(err, ErrNotEmpty) {
		return false, nil // built by an earlier start: the log restores itself
	} else if err != nil {
		return false, err
	}
	return true, nil
}

// builderOf names the node building a branch in its marker: the host and
// the data directory, so that only the same node restarting on the same
// directory takes an interrupted build over.
func builderOf(dataDir string) string {
	host, _ := os.Hostname()
	return host + ":" + absOr(dataDir)
}

// buildBranch replays the parent up to m.Revision and seeds the branch's
// store and walDir with the state there. The store is marked (MarkerKey)
// while it is written, as RestoreAt's target is; the wal directory
// appears whole or not at all.
func buildBranch(ctx context.Context, b BranchStart, m *Manifest, parent objstore.Store, walDir string) (replayed int64, err error) {
	b.Logger.Info("building the branch's state from its parent", "parent", m.Parent, "revision", m.Revision)
	src := &source{store: parent, url: m.Parent, log: b.Logger}
	plan, err := src.plan(ctx, m.Revision)
	if err != nil {
		if errors.Is(err, ErrOutsideWindow) {
			err = fmt.Errorf("%w (%w: the pin %s in %s should have kept it; was it deleted?)", err, ErrBranchObjectGone, objwal.PinKey(m.ID), m.Parent)
		}
		return 0, err
	}
	tmp := filepath.Join(b.DataDir, ".branching")
	if err := os.RemoveAll(tmp); err != nil {
		return 0, fmt.Errorf("remove an interrupted branch start's working directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	body, _ := json.Marshal(map[string]any{"branch": m.ID, "parent": m.Parent, "revision": m.Revision, "builder": builderOf(b.DataDir)})
	if _, err := b.Store.PutIfAbsent(ctx, MarkerKey, body); err != nil {
		return 0, fmt.Errorf("mark %s as being built (%s; is another node starting on this branch?): %w", b.URL, MarkerKey, err)
	}
	defer func() {
		if err != nil && !errors.Is(err, errCrash) {
			if _, cerr := cleanInterrupted(ctx, b.Store, b.URL, b.Logger, true); cerr != nil {
				err = fmt.Errorf("%w (the next start cleans up what this one wrote)", err)
			}
		}
	}()
	snap, replayed, err := replayTo(ctx, src, plan, filepath.Join(tmp, "work"), b.Clock, b.Logger, b.Progress)
	if err != nil {
		return 0, err
	}
	staged := filepath.Join(tmp, "data")
	if _, err := Restore(ctx, snap, Target{DataDir: staged, Storage: b.URL, Store: b.Store, Logger: b.Logger, Clock: b.Clock}); err != nil {
		return 0, err
	}
	if crash("branch-seeded") {
		return 0, errCrash
	}
	if err := os.Rename(filepath.Join(staged, "wal"), walDir); err != nil {
		return 0, fmt.Errorf("move the branch's wal directory into place: %w", err)
	}
	if err := syncDir(b.DataDir); err != nil {
		return 0, err
	}
	if err := b.Store.Delete(ctx, MarkerKey); err != nil {
		b.Logger.Warn("could not delete the build marker; delete it by hand", "key", MarkerKey, "error", err)
	}
	b.Logger.Info("the branch holds its own snapshot", "revision", m.Revision, "replayed", replayed, "key_versions", len(snap.KVs))
	return replayed, nil
}
