package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/objwal"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// stateAt is what a node served at one revision, read before any
// compaction: every live key and the leases.
type stateAt struct {
	kvs    []*mvccpb.KeyValue
	leases []int64
}

// history is a bucket a real engine wrote through objwal, with the state
// at each revision taken as it was written.
type history struct {
	bucket *mem.Store
	states map[int64]stateAt
	snaps  []int64 // snapshot revisions in the bucket
	// keyless are revisions whose last entry changed no key (a lease
	// grant, a compaction): the state at them includes that entry.
	keyless []int64
	tip     int64
}

func readState(t *testing.T, eng *engine.Engine, rev int64) stateAt {
	t.Helper()
	ctx := t.Context()
	r, err := eng.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
	if err != nil {
		t.Fatalf("range at %d: %v", rev, err)
	}
	ls, err := eng.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, l := range ls.Leases {
		ids = append(ids, l.ID)
	}
	slices.Sort(ids)
	return stateAt{kvs: r.Kvs, leases: ids}
}

func snapshotRevs(t *testing.T, s objstore.Store) []int64 {
	t.Helper()
	objs, err := listAll(t.Context(), s, snapPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var revs []int64
	for _, o := range objs {
		n, _ := parseNum(o.Key, snapPrefix)
		revs = append(revs, int64(n))
	}
	return revs
}

// writeHistory drives an engine on objwal in sync mode: puts, overwrites,
// deletes, multi-op transactions, leases granted, attached and revoked,
// and a compaction, across several snapshots.
func writeHistory(t *testing.T) *history {
	t.Helper()
	ctx := t.Context()
	h := &history{bucket: mem.New(clock.Real()), states: map[int64]stateAt{}}
	l, err := objwal.Open(ctx, objwal.Options{Store: h.bucket, WALDir: t.TempDir(), Mode: objwal.ModeSync,
		Clock: clock.Real(), SnapshotKeep: 100})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Config{Storage: l, Clock: clock.Real(), SnapshotEntries: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer eng.Close()
	record := func(rev int64) {
		h.states[rev] = readState(t, eng, rev)
		h.tip = rev
	}
	must := func(rev int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		record(rev)
	}
	put := func(k, v string, lease int64) {
		r, err := eng.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		must(r.Header.Revision, nil)
	}
	record(eng.CurrentRevision())
	var lease int64
	for i := range 100 {
		k := fmt.Sprintf("k%02d", i%17)
		switch {
		case i%23 == 5:
			g, err := eng.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
			if err != nil {
				t.Fatal(err)
			}
			lease = g.ID
			must(g.Header.Revision, nil)
			h.keyless = append(h.keyless, g.Header.Revision)
			put("leased/"+k, "held", lease)
		case i%23 == 17 && lease != 0:
			r, err := eng.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lease})
			lease = 0
			must(r.Header.Revision, err)
		case i%11 == 7:
			r, err := eng.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(k)})
			must(r.Header.Revision, err)
		case i%13 == 3:
			r, err := eng.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("txn/a"), Value: []byte(fmt.Sprint(i))}}},
				{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("txn/b"), Value: []byte(fmt.Sprint(i))}}},
			}})
			must(r.Header.Revision, err)
		case i == 60:
			r, err := eng.Compact(ctx, &pb.CompactionRequest{Revision: eng.CurrentRevision() - 20})
			must(r.Header.Revision, err)
			h.keyless = append(h.keyless, r.Header.Revision)
		default:
			put(k, fmt.Sprintf("v%d", i), 0)
		}
		if i%25 == 24 {
			// Let the snapshot the engine took meanwhile reach the bucket,
			// so that the history holds several.
			want, clk := (i+1)/25, clock.Real()
			deadline := clk.Now().Add(10 * time.Second)
			for len(snapshotRevs(t, h.bucket)) < want {
				if clk.Now().After(deadline) {
					t.Fatalf("waiting for snapshot %d to reach the bucket", want)
				}
				runtime.Gosched()
			}
		}
	}
	h.snaps = snapshotRevs(t, h.bucket)
	if len(h.snaps) < 3 {
		t.Fatalf("the history holds %d snapshots, want several", len(h.snaps))
	}
	return h
}

// checkRestored opens a node on what a restore wrote, as netsy does, and
// compares it key by key with the state at rev; a put then gets rev+1.
func checkRestored(t *testing.T, dataDir string, to objstore.Store, want stateAt, rev int64) {
	t.Helper()
	ctx := t.Context()
	l, err := objwal.Open(ctx, objwal.Options{Store: to, WALDir: filepath.Join(dataDir, "wal"), Mode: objwal.ModeSync, Clock: clock.Real()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	eng, err := engine.Open(engine.Config{Storage: l, Clock: clock.Real()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if got := eng.CurrentRevision(); got != rev {
		t.Fatalf("restored node at revision %d, want %d", got, rev)
	}
	got := readState(t, eng, rev)
	if len(got.kvs) != len(want.kvs) {
		t.Fatalf("revision %d: restored node has %d keys, want %d", rev, len(got.kvs), len(want.kvs))
	}
	for i, w := range want.kvs {
		g := got.kvs[i]
		if string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) || g.CreateRevision != w.CreateRevision ||
			g.ModRevision != w.ModRevision || g.Version != w.Version || g.Lease != w.Lease {
			t.Fatalf("revision %d: key %d is %v, want %v", rev, i, g, w)
		}
	}
	if !slices.Equal(got.leases, want.leases) {
		t.Fatalf("revision %d: leases %v, want %v", rev, got.leases, want.leases)
	}
	r, err := eng.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("restore")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.Revision != rev+1 {
		t.Fatalf("a put on the restored node got revision %d, want %d", r.Header.Revision, rev+1)
	}
}

func restoreTo(t *testing.T, h *history, rev int64, to objstore.Store, dataDir string) (PointInTimeResult, error) {
	return RestoreAt(t.Context(), PointInTime{From: h.bucket, FromURL: "mem://source", Revision: rev,
		Target: Target{DataDir: dataDir, Storage: "mem://target", Store: to}})
}

func TestRestoreAtRevisionMatchesRangeBeforeCompaction(t *testing.T) {
	h := writeHistory(t)
	revs := append([]int64{2, h.tip}, h.keyless...)
	for _, s := range h.snaps {
		revs = append(revs, s-1, s, s+1)
	}
	for _, rev := range revs {
		if rev < 2 || rev > h.tip {
			continue
		}
		t.Run(fmt.Sprint(rev), func(t *testing.T) {
			to, dataDir := mem.New(nil), filepath.Join(t.TempDir(), "data")
			var reports []Progress
			res, err := RestoreAt(t.Context(), PointInTime{From: h.bucket, FromURL: "mem://source", Revision: rev,
				Target:   Target{DataDir: dataDir, Storage: "mem://target", Store: to},
				Progress: func(p Progress) { reports = append(reports, p) }})
			if err != nil {
				t.Fatal(err)
			}
			if res.Revision != rev || res.BaseRevision > rev || res.Window.Oldest > rev || res.Window.Newest != h.tip {
				t.Fatalf("result %+v", res)
			}
			if n := len(reports); n == 0 || !reports[n-1].Done || reports[n-1].Revision != rev || reports[n-1].Entries != res.Replayed {
				t.Fatalf("progress reports %+v, replayed %d", reports, res.Replayed)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dataDir), ".data.restoring")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the working directory is left behind: %v", err)
			}
			if _, _, err := to.Get(t.Context(), MarkerKey); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("the restore marker is left in the target: %v", err)
			}
			checkRestored(t, dataDir, to, h.states[rev], rev)
		})
	}
}

func TestRestoreAtRefusesRevisionOutsideWindow(t *testing.T) {
	h := writeHistory(t)
	ctx := t.Context()
	// Drop the oldest snapshot and the chunks before the second one, as GC
	// would: the window then starts at the second snapshot.
	second := h.snaps[1]
	hdr, err := (&source{store: h.bucket}).snapshotHeader(ctx, fmt.Sprintf("%s%020d", snapPrefix, second))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.bucket.Delete(ctx, fmt.Sprintf("%s%020d", snapPrefix, h.snaps[0])); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= hdr.WalSeq; seq++ {
		if err := h.bucket.Delete(ctx, fmt.Sprintf("%s%020d", walPrefix, seq)); err != nil {
			t.Fatal(err)
		}
	}
	window := fmt.Sprintf("%d..%d", second, h.tip)
	for _, rev := range []int64{second - 1, h.tip + 1} {
		dataDir := filepath.Join(t.TempDir(), "data")
		to := mem.New(nil)
		_, err := restoreTo(t, h, rev, to, dataDir)
		if !errors.Is(err, ErrOutsideWindow) || !strings.Contains(err.Error(), window) {
			t.Fatalf("restore to %d = %v, want ErrOutsideWindow naming %s", rev, err, window)
		}
		if objs, _ := to.List(ctx, "", "", 10); len(objs) > 0 {
			t.Fatalf("a refused restore wrote %s", objs[0].Key)
		}
		if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused restore created the data directory: %v", err)
		}
	}
	if _, err := restoreTo(t, h, second, mem.New(nil), filepath.Join(t.TempDir(), "data")); err != nil {
		t.Fatalf("restore to the window's oldest revision: %v", err)
	}
}

func TestRestoreAtRefusesNonEmptyTargets(t *testing.T) {
	h := writeHistory(t)
	rev := h.snaps[1]
	full := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := restoreTo(t, h, rev, mem.New(nil), full); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore into a non-empty data directory = %v", err)
	}
	used := mem.New(nil)
	if _, err := used.PutIfAbsent(t.Context(), "wal/00000000000000000001", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := restoreTo(t, h, rev, used, filepath.Join(t.TempDir(), "data")); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore into a bucket with a log = %v", err)
	}
}

// A restore killed part-way leaves a state the next run of the same
// command cleans up and finishes: at each stage a crash can stop it, and
// when the target store fails under it and its own cleanup fails too.
func TestRestoreAtRerunFinishesAfterCrash(t *testing.T) {
	h := writeHistory(t)
	rev := h.snaps[1] + 1
	for _, stage := range []string{"marked", "seeded", "renamed"} {
		t.Run(stage, func(t *testing.T) {
			to, dataDir := mem.New(nil), filepath.Join(t.TempDir(), "data")
			crashAt = func(s string) bool { return s == stage }
			_, err := restoreTo(t, h, rev, to, dataDir)
			crashAt = nil
			if !errors.Is(err, errCrash) {
				t.Fatalf("first run = %v, want the simulated crash", err)
			}
			if _, _, err := to.Get(t.Context(), MarkerKey); err != nil {
				t.Fatalf("the crash left no marker in the target: %v", err)
			}
			res, err := restoreTo(t, h, rev, to, dataDir)
			if stage == "renamed" {
				// The restore had finished: the data directory is in place.
				if !errors.Is(err, ErrNotEmpty) {
					t.Fatalf("rerun after a finished restore = %v, want ErrNotEmpty", err)
				}
			} else if err != nil {
				t.Fatalf("rerun: %v", err)
			} else if stage == "seeded" && len(res.Cleaned) != 2 {
				t.Fatalf("rerun cleaned %v, want the seeded snapshot and claim", res.Cleaned)
			}
			checkRestored(t, dataDir, to, h.states[rev], rev)
		})
	}
	t.Run("failing store", func(t *testing.T) {
		inner := mem.New(nil)
		to, dataDir := faulty.New(inner, clock.Real()), filepath.Join(t.TempDir(), "data")
		to.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: walPrefix, Err: fmt.Errorf("%w: injected", objstore.ErrMisconfigured)})
		to.Inject(faulty.Rule{Ops: faulty.Delete, Err: faulty.ErrInjected})
		_, err := restoreTo(t, h, rev, to, dataDir)
		if err == nil || !strings.Contains(err.Error(), "run the same restore again") {
			t.Fatalf("first run = %v, want an error saying to rerun", err)
		}
		if snaps := snapshotRevs(t, inner); len(snaps) != 1 {
			t.Fatalf("the failed run left snapshots %v in the target, want the seeded one", snaps)
		}
		if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a failed restore left the data directory: %v", err)
		}
		to.Clear()
		if _, err := restoreTo(t, h, rev, to, dataDir); err != nil {
			t.Fatalf("rerun: %v", err)
		}
		checkRestored(t, dataDir, inner, h.states[rev], rev)
	})
	t.Run("node ran on it", func(t *testing.T) {
		to, dataDir := mem.New(nil), filepath.Join(t.TempDir(), "data")
		crashAt = func(s string) bool { return s == "seeded" }
		_, err := restoreTo(t, h, rev, to, dataDir)
		crashAt = nil
		if !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
		if _, err := to.PutIfAbsent(t.Context(), "wal/00000000000000000009", encodeOneEntry(t)); err != nil {
			t.Fatal(err)
		}
		_, err = restoreTo(t, h, rev, to, filepath.Join(t.TempDir(), "other"))
		if !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "wal/00000000000000000009") || !strings.Contains(err.Error(), MarkerKey) {
			t.Fatalf("rerun onto a target a node wrote to = %v, want a refusal listing what to delete", err)
		}
	})
}

// encodeOneEntry is a chunk with one entry, as a node running on a
// restored bucket uploads.
func encodeOneEntry(t *testing.T) []byte {
	t.Helper()
	b, err := datafile.EncodeChunk([]*netsyv1.Entry{{Index: 500, Revision: 500, Ops: []*netsyv1.Op{{Type: netsyv1.Op_PUT, Key: []byte("x")}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
