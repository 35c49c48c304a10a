package backup

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/objwal"
)

func allKeys(t *testing.T, s objstore.Store) []string {
	t.Helper()
	objs, err := listAll(t.Context(), s, "")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

func branchStart(t *testing.T, child objstore.Store, dataDir string, parent objstore.Store) (BranchStarted, error) {
	return StartBranch(t.Context(), BranchStart{Store: child, URL: "mem://child", DataDir: dataDir,
		OpenParent: func(_ context.Context, url string) (objstore.Store, error) {
			if url != "mem://parent" {
				return nil, fmt.Errorf("opened %q, want the parent mem://parent", url)
			}
			return parent, nil
		}})
}

// keepWriting opens a Primary on the parent bucket that snapshots every
// 10 entries and keeps one snapshot (retention 1 ms), writes n puts and
// waits, before closing it, for the newest snapshot to reach the bucket
// and for gcDone to hold of the bucket's snapshots, so the parent's GC
// has run past the branch's revision.
func keepWriting(t *testing.T, bucket objstore.Store, n int, gcDone func([]int64) bool) int64 {
	t.Helper()
	ctx := t.Context()
	l, err := objwal.Open(ctx, objwal.Options{Store: bucket, WALDir: t.TempDir(), Mode: objwal.ModeSync,
		Clock: clock.Real(), SnapshotKeep: 1, Retention: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	eng, err := engine.Open(engine.Config{Storage: l, Clock: clock.Real(), SnapshotEntries: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var rev int64
	for i := range n {
		r, err := eng.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("parent/%d", i)), Value: []byte("later")})
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	deadline := clock.Real().Now().Add(10 * time.Second)
	for {
		revs := snapshotRevs(t, bucket)
		// GC deletes old snapshots on the log's maintenance goroutine
		// after the newest is uploaded, and Close stops it: wait for what
		// the caller checks (a check after the newest alone failed at
		// load 17).
		if len(revs) > 0 && revs[len(revs)-1] > rev-10 && gcDone(revs) {
			break
		}
		if clock.Real().Now().After(deadline) {
			t.Fatalf("waiting for the parent's snapshot near %d; it holds %v", rev, revs)
		}
		runtime.Gosched()
	}
	return rev
}

// A branch is a pin in the parent and a manifest in the child, nothing
// else; the parent's GC keeps the pinned snapshot while the parent keeps
// writing; the first node on the branch serves exactly the state at R,
// continues from R+1, and drops the pin, which the parent's GC then
// honours no more.
func TestBranchServesStateAtRevisionWhileParentKeepsWriting(t *testing.T) {
	h := writeHistory(t)
	parent := faulty.New(h.bucket, clock.Real())
	rev := h.snaps[1] + 3
	before := allKeys(t, h.bucket)
	child := mem.New(nil)
	res, err := CreateBranch(t.Context(), Branching{From: parent, FromURL: "mem://parent", To: child, ToURL: "mem://child", Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision != rev || res.Snapshot != fmt.Sprintf("snapshots/%020d", h.snaps[1]) || res.ID != BranchID("mem://child") {
		t.Fatalf("branch %+v", res)
	}
	if got := parent.Calls(faulty.Writes); got != 1 {
		t.Fatalf("the branch made %d writes to the parent, want 1 (the pin)", got)
	}
	if got, want := allKeys(t, h.bucket), append(slices.Clone(before), objwal.PinKey(res.ID)); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("parent holds %v, want %v", got, want)
	}
	if got := allKeys(t, child); !slices.Equal(got, []string{ManifestKey}) {
		t.Fatalf("child holds %v, want only %s", got, ManifestKey)
	}

	parentRev := keepWriting(t, h.bucket, 60, func(snaps []int64) bool { return !slices.Contains(snaps, h.snaps[0]) })
	if snaps := snapshotRevs(t, h.bucket); !slices.Contains(snaps, h.snaps[1]) || slices.Contains(snaps, h.snaps[0]) {
		t.Fatalf("parent snapshots after GC %v: want the pinned %d kept and the unpinned %d gone", snaps, h.snaps[1], h.snaps[0])
	}

	dataDir := t.TempDir()
	st, err := branchStart(t, child, dataDir, parent)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Branch || !st.Built || !st.Released || !st.Manifest.Released {
		t.Fatalf("start %+v", st)
	}
	if _, _, err := h.bucket.Get(t.Context(), objwal.PinKey(res.ID)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the pin is still in the parent after the branch built its own snapshot: %v", err)
	}
	writes := parent.Calls(faulty.Writes)
	checkRestored(t, dataDir, child, h.states[rev], rev)
	if got := parent.Calls(faulty.Writes); got != writes {
		t.Fatalf("the branch node wrote to the parent (%d writes)", got-writes)
	}
	// A restart is an ordinary start: nothing is built again.
	if st, err := branchStart(t, child, dataDir, parent); err != nil || st.Built || !st.Branch {
		t.Fatalf("restart: %+v, %v", st, err)
	}
	// The parent goes on from its own revision, and its GC may now take
	// the snapshot the branch pinned.
	if got := keepWriting(t, h.bucket, 20, func(snaps []int64) bool { return !slices.Contains(snaps, h.snaps[1]) }); got != parentRev+20 {
		t.Fatalf("parent at %d, want %d", got, parentRev+20)
	}
	if snaps := snapshotRevs(t, h.bucket); slices.Contains(snaps, h.snaps[1]) {
		t.Fatalf("parent snapshots %v still hold %d after the branch released it", snaps, h.snaps[1])
	}
}

// A crash or a failed write at each step of creating a branch leaves
// what a rerun finishes, or branch delete removes; nothing is half-made.
func TestBranchCreationSurvivesFailureAtEachStep(t *testing.T) {
	h := writeHistory(t)
	rev := h.snaps[1] + 3
	create := func(parent, child objstore.Store) (BranchResult, error) {
		return CreateBranch(t.Context(), Branching{From: parent, FromURL: "mem://parent", To: child, ToURL: "mem://child", Revision: rev})
	}
	pinKey := objwal.PinKey(BranchID("mem://child"))
	hasPin := func() bool {
		_, _, err := h.bucket.Get(t.Context(), pinKey)
		return err == nil
	}
	steps := []struct {
		name   string
		inject func(parent, child *faulty.Store)
		// pinned: the failed run leaves the pin (the rerun keeps it).
		pinned bool
	}{
		{"pin write fails", func(p, _ *faulty.Store) { p.Fail(faulty.PutIfAbsent, objwal.PinPrefix) }, false},
		{"pin lands, its answer is lost", func(p, _ *faulty.Store) {
			p.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: objwal.PinPrefix, Err: faulty.ErrInjected, AfterCall: true})
		}, true},
		{"crash after the pin", func(*faulty.Store, *faulty.Store) { crashAt = func(s string) bool { return s == "pinned" } }, true},
		{"pinned objects cannot be checked", func(p, _ *faulty.Store) {
			// The plan reads the base snapshot's header once; the check after
			// the pin is the second read.
			p.Inject(faulty.Rule{Ops: faulty.Get, KeyPrefix: fmt.Sprintf("%s%020d", snapPrefix, h.snaps[1]), Err: faulty.ErrInjected, Skip: 1, Count: 1})
		}, false},
		{"manifest write fails", func(_, c *faulty.Store) { c.Fail(faulty.PutIfAbsent, ManifestKey) }, true},
		{"manifest lands, its answer is lost", func(_, c *faulty.Store) {
			c.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: ManifestKey, Err: faulty.ErrInjected, AfterCall: true})
		}, true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			parent, child := faulty.New(h.bucket, clock.Real()), faulty.New(mem.New(nil), clock.Real())
			s.inject(parent, child)
			_, err := create(parent, child)
			crashAt = nil
			if err == nil {
				t.Fatal("the failed run reported success")
			}
			if hasPin() != s.pinned {
				t.Fatalf("after the failure the parent holds a pin: %v, want %v", hasPin(), s.pinned)
			}
			parent.Clear()
			child.Clear()
			res, err := create(parent, child)
			if err != nil {
				t.Fatalf("rerun: %v", err)
			}
			if !hasPin() {
				t.Fatal("rerun: no pin in the parent")
			}
			m, _, err := readManifest(t.Context(), child, "mem://child")
			if err != nil || m == nil || m.Revision != rev || m.Snapshot != res.Snapshot {
				t.Fatalf("rerun: manifest %+v, %v", m, err)
			}
			// Branch delete releases whatever the runs pinned.
			if deleted, err := DeleteBranch(t.Context(), h.bucket, "mem://parent", res.ID); err != nil || !deleted || hasPin() {
				t.Fatalf("delete: %v %v, pin left %v", deleted, err, hasPin())
			}
		})
	}
}

// A pin naming an object GC deleted before the pin landed is refused and
// removed, naming the object.
func TestBranchRefusesObjectsTheParentNoLongerHolds(t *testing.T) {
	h := writeHistory(t)
	pin := objwal.Pin{ID: "bx", Revision: h.tip, FirstSeq: 1, LastSeq: 3}
	if err := h.bucket.Delete(t.Context(), fmt.Sprintf("%s%020d", walPrefix, 2)); err != nil {
		t.Fatal(err)
	}
	err := checkPinned(t.Context(), h.bucket, "mem://parent", pin)
	if !errors.Is(err, ErrBranchObjectGone) {
		t.Fatalf("checkPinned: %v, want ErrBranchObjectGone", err)
	}
	pin.Snapshot = "snapshots/00000000000000000001"
	if err := checkPinned(t.Context(), h.bucket, "mem://parent", pin); !errors.Is(err, ErrBranchObjectGone) {
		t.Fatalf("checkPinned of a missing snapshot: %v, want ErrBranchObjectGone", err)
	}
}

// A crash while the first node builds the branch leaves what its next
// start cleans up and builds again; a store that is no branch is left
// alone.
func TestBranchStartRebuildsAfterACrash(t *testing.T) {
	h := writeHistory(t)
	rev := h.snaps[0] + 2
	child := mem.New(nil)
	if _, err := CreateBranch(t.Context(), Branching{From: h.bucket, FromURL: "mem://parent", To: child, ToURL: "mem://child", Revision: rev}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	crashAt = func(s string) bool { return s == "branch-seeded" }
	_, err := branchStart(t, child, dataDir, h.bucket)
	crashAt = nil
	if !errors.Is(err, errCrash) {
		t.Fatalf("start: %v, want the simulated crash", err)
	}
	if keys := allKeys(t, child); !slices.Contains(keys, MarkerKey) {
		t.Fatalf("after the crash the child holds %v, want the marker", keys)
	}
	// Another node does not take over a build it did not start.
	if _, err := branchStart(t, child, t.TempDir(), h.bucket); !errors.Is(err, ErrBranchBusy) {
		t.Fatalf("another node's start during the build: %v, want ErrBranchBusy", err)
	}
	st, err := branchStart(t, child, dataDir, h.bucket)
	if err != nil || !st.Built || !st.Released {
		t.Fatalf("start after the crash: %+v, %v", st, err)
	}
	// Once built, another node starts as on any store: nothing to build.
	if st, err := branchStart(t, child, t.TempDir(), h.bucket); err != nil || st.Built {
		t.Fatalf("another node after the build: %+v, %v", st, err)
	}
	checkRestored(t, dataDir, child, h.states[rev], rev)

	plain := mem.New(nil)
	if st, err := branchStart(t, plain, t.TempDir(), h.bucket); err != nil || st.Branch {
		t.Fatalf("a store without a manifest: %+v, %v", st, err)
	}
}
