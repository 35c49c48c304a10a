package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/objwal"
)

// noWrites is a store that fails the test on any write: a read-only node
// must only ever read the bucket.
type noWrites struct {
	objstore.Store
	t *testing.T
}

func (s noWrites) refuse(op, key string) error {
	s.t.Errorf("read-only node wrote to the bucket: %s %s", op, key)
	return fmt.Errorf("%s %s: the bucket is read-only in this test", op, key)
}

func (s noWrites) PutIfAbsent(_ context.Context, key string, _ []byte) (string, error) {
	return "", s.refuse("PutIfAbsent", key)
}

func (s noWrites) PutIfAbsentFrom(_ context.Context, key string, _ io.ReadSeeker, _ int64) (string, error) {
	return "", s.refuse("PutIfAbsentFrom", key)
}

func (s noWrites) PutIfMatch(_ context.Context, key string, _ []byte, _ string) (string, error) {
	return "", s.refuse("PutIfMatch", key)
}

func (s noWrites) Delete(_ context.Context, key string) error { return s.refuse("Delete", key) }

// bucketContents is every object of s with its body.
func bucketContents(t *testing.T, s objstore.Store) map[string][]byte {
	t.Helper()
	ctx := t.Context()
	out := map[string][]byte{}
	after := ""
	for {
		page, err := s.List(ctx, "", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			body, _, err := s.Get(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			out[o.Key] = body
		}
		if len(page) < 1000 {
			return out
		}
		after = page[len(page)-1].Key
	}
}

// pastHistory is a bucket a real engine wrote through objwal across
// several snapshots, with what a full range returned at each revision.
type pastHistory struct {
	bucket *mem.Store
	kvs    map[int64][]*mvccpb.KeyValue
	lease  int64 // granted at leaseRev with a 600 s TTL, never revoked
	leaseRev,
	tip int64
	snaps int
}

func writePastHistory(t *testing.T) *pastHistory {
	t.Helper()
	ctx := t.Context()
	h := &pastHistory{bucket: mem.New(clock.Real()), kvs: map[int64][]*mvccpb.KeyValue{}}
	l, err := objwal.Open(ctx, objwal.Options{Store: h.bucket, WALDir: t.TempDir(), Mode: objwal.ModeSync,
		Clock: clock.Real(), SnapshotKeep: 100})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Config{Storage: l, Clock: clock.Real(), SnapshotEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer eng.Close()
	record := func(rev int64) {
		r, err := eng.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		h.kvs[rev], h.tip = r.Kvs, rev
	}
	for i := range 45 {
		k := []byte(fmt.Sprintf("k%d", i%7))
		var rev int64
		switch {
		case i == 12:
			g, err := eng.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
			if err != nil {
				t.Fatal(err)
			}
			h.lease, h.leaseRev, rev = g.ID, g.Header.Revision, g.Header.Revision
		case i == 13:
			r, err := eng.Put(ctx, &pb.PutRequest{Key: []byte("leased"), Value: []byte("v"), Lease: h.lease})
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		case i%9 == 4:
			r, err := eng.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: k})
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		default:
			r, err := eng.Put(ctx, &pb.PutRequest{Key: k, Value: []byte(fmt.Sprint("v", i))})
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		}
		record(rev)
	}
	// Let the snapshots the engine took reach the bucket.
	clk := clock.Real()
	deadline := clk.Now().Add(10 * time.Second)
	for {
		objs, err := h.bucket.List(ctx, "snapshots/", "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if h.snaps = len(objs); h.snaps >= 2 {
			break
		}
		if clk.Now().After(deadline) {
			t.Fatalf("the history holds %d snapshots, want several", h.snaps)
		}
		runtime.Gosched()
	}
	return h
}

func startReadOnlyNode(t *testing.T, store objstore.Store, rev int64) (*Node, error) {
	t.Helper()
	return startReadOnlyNodeWith(t, store, func(c *config.Config) { c.ReadOnlyAt = rev })
}

func startReadOnlyNodeWith(t *testing.T, store objstore.Store, at func(*config.Config)) (*Node, error) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr = freePeerAddr(t)
	cfg.HTTPAddr = freePeerAddr(t)
	cfg.PeerAddr = freePeerAddr(t)
	cfg.Storage = "s3://past/prefix"
	at(&cfg)
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testLog{t}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return StartWith(ctx, cfg, logger, Deps{Clock: clock.Real(), Store: store})
}

func sameKVs(a, b []*mvccpb.KeyValue) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Value, y.Value) || x.CreateRevision != y.CreateRevision ||
			x.ModRevision != y.ModRevision || x.Version != y.Version || x.Lease != y.Lease {
			return false
		}
	}
	return true
}

// A node started with --read-only-at R on a bucket serves exactly what a
// range returned at R and below when it was written, its leases, Status
// and MemberList; it refuses every write with FailedPrecondition, and the
// bucket's objects and bodies are the same after it ran as before.
func TestReadOnlyAtServesThePastAndNeverWritesTheBucket(t *testing.T) {
	h := writePastHistory(t)
	before := bucketContents(t, h.bucket)
	rev := h.tip - 8 // inside the history, past several snapshots
	if rev <= h.leaseRev+1 {
		t.Fatalf("history too short: tip %d, lease at %d", h.tip, h.leaseRev)
	}
	n, err := startReadOnlyNode(t, noWrites{h.bucket, t}, rev)
	if err != nil {
		t.Fatal(err)
	}
	cli := client(t, n)
	ctx := t.Context()

	for _, at := range []int64{rev, rev - 3, h.leaseRev + 1, 2} {
		r, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(at))
		if err != nil {
			t.Fatalf("get --rev=%d: %v", at, err)
		}
		if r.Header.Revision != rev || !sameKVs(r.Kvs, h.kvs[at]) {
			t.Fatalf("get --rev=%d: header %d, %v; want header %d, %v", at, r.Header.Revision, r.Kvs, rev, h.kvs[at])
		}
	}
	if r, err := cli.Get(ctx, "\x00", clientv3.WithFromKey()); err != nil || !sameKVs(r.Kvs, h.kvs[rev]) {
		t.Fatalf("get at the current revision: %v, %v; want the state at %d", r, err, rev)
	}
	if _, err := cli.Get(ctx, "k1", clientv3.WithRev(rev+1)); err == nil || !strings.Contains(err.Error(), "future revision") {
		t.Fatalf("get --rev=R+1: %v, want the future-revision error", err)
	}
	txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("leased"), ">", 0)).Then(clientv3.OpGet("leased")).Commit()
	if err != nil || !txn.Succeeded || len(txn.Responses[0].GetResponseRange().Kvs) != 1 {
		t.Fatalf("read-only txn: %v, %v", txn, err)
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(h.lease), clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 600 || ttl.TTL <= 0 || len(ttl.Keys) != 1 {
		t.Fatalf("lease time-to-live: %+v, %v", ttl, err)
	}
	if ls, err := cli.Leases(ctx); err != nil || len(ls.Leases) != 1 || int64(ls.Leases[0].ID) != h.lease {
		t.Fatalf("lease list: %+v, %v", ls, err)
	}
	st, err := cli.Status(ctx, n.ClientAddr())
	if err != nil || st.Header.Revision != rev {
		t.Fatalf("status: %+v, %v; want revision %d", st, err, rev)
	}
	ml, err := cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || ml.Members[0].ID != st.Leader || len(ml.Members[0].ClientURLs) != 1 {
		t.Fatalf("member list: %+v, %v (status leader %x)", ml, err, st.Leader)
	}

	snap, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nb, err := io.Copy(io.Discard, snap); err != nil || nb == 0 {
		t.Fatalf("snapshot of the state at %d: %d bytes, %v", rev, nb, err)
	}
	snap.Close()

	// Watch from revision 2: the history up to R, then a progress report
	// at R (nothing is pending below it).
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := cli.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(2))
	var last int64
	for last < rev {
		wr, ok := <-wch
		if !ok || wr.Err() != nil {
			t.Fatalf("watch ended: %v", wr.Err())
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision > rev {
				t.Fatalf("watch sent an event at %d, past %d", ev.Kv.ModRevision, rev)
			}
			last = ev.Kv.ModRevision
		}
		if len(wr.Events) == 0 {
			break
		}
	}
	if err := cli.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	for wr := range wch {
		if len(wr.Events) > 0 {
			t.Fatalf("watch sent events past the history: %v", wr.Events)
		}
		if wr.IsProgressNotify() {
			if wr.Header.Revision != rev {
				t.Fatalf("progress at %d, want %d", wr.Header.Revision, rev)
			}
			break
		}
	}

	writes := map[string]func() error{
		"put":    func() error { _, err := cli.Put(ctx, "k1", "new"); return err },
		"delete": func() error { _, err := cli.Delete(ctx, "k1"); return err },
		"write txn": func() error {
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("nope"), ">", 0)).
				Then(clientv3.OpPut("k1", "x")).Commit()
			return err
		},
		"compact":      func() error { _, err := cli.Compact(ctx, rev-1); return err },
		"lease grant":  func() error { _, err := cli.Grant(ctx, 60); return err },
		"lease revoke": func() error { _, err := cli.Revoke(ctx, clientv3.LeaseID(h.lease)); return err },
		"keep-alive":   func() error { _, err := cli.KeepAliveOnce(ctx, clientv3.LeaseID(h.lease)); return err },
		"alarm disarm": func() error {
			_, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: st.Leader, Alarm: pb.AlarmType_NOSPACE})
			return err
		},
	}
	for name, write := range writes {
		err := write()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), fmt.Sprintf("read-only at revision %d", rev)) {
			t.Errorf("%s: %v, want FailedPrecondition saying the node is read-only at %d", name, err, rev)
		}
	}
	if r, err := cli.Get(ctx, "\x00", clientv3.WithFromKey()); err != nil || r.Header.Revision != rev || !sameKVs(r.Kvs, h.kvs[rev]) {
		t.Fatalf("after the refused writes: %v, %v; want the state at %d unchanged", r, err, rev)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	after := bucketContents(t, h.bucket)
	if len(after) != len(before) {
		t.Fatalf("the bucket held %d objects, %d after the read-only node ran", len(before), len(after))
	}
	for k, b := range before {
		if !bytes.Equal(after[k], b) {
			t.Fatalf("object %s changed while the read-only node ran", k)
		}
	}
}

// A revision the bucket cannot rebuild is refused at start, with the
// window in the message, and the bucket is left alone.
func TestReadOnlyAtRefusesRevisionOutsideWindow(t *testing.T) {
	h := writePastHistory(t)
	_, err := startReadOnlyNode(t, noWrites{h.bucket, t}, h.tip+1)
	want := fmt.Sprintf("can restore revisions 1..%d only", h.tip)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--read-only-at") {
		t.Fatalf("start at %d: %v, want a refusal naming --read-only-at and %q", h.tip+1, err, want)
	}
}

// --read-only-at T serves the last revision committed at or before T, as
// the bucket's timeline says; a T before the history is refused with the
// window's times, a T in the future as such, and the bucket is left alone.
func TestReadOnlyAtTimeServesTheRevisionCommittedByThen(t *testing.T) {
	h := writePastHistory(t)
	ctx := t.Context()
	mid, err := objwal.TimeOf(ctx, h.bucket, h.tip-8)
	if err != nil || mid.Time.IsZero() {
		t.Fatalf("time of revision %d: %v, %v", h.tip-8, mid, err)
	}
	// Several revisions can share a millisecond: the answer is the last.
	want, err := objwal.RevisionAt(ctx, h.bucket, mid.Time)
	if err != nil || want.Revision < h.tip-8 || want.Time != mid.Time {
		t.Fatalf("revision at %v: %v, %v", mid.Time, want, err)
	}
	n, err := startReadOnlyNodeWith(t, noWrites{h.bucket, t}, func(c *config.Config) { c.ReadOnlyAtTime = mid.Time })
	if err != nil {
		t.Fatal(err)
	}
	cli := client(t, n)
	r, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil || r.Header.Revision != want.Revision || !sameKVs(r.Kvs, h.kvs[want.Revision]) {
		t.Fatalf("get: %v, %v; want the state at revision %d", r, err, want.Revision)
	}
	if _, err := cli.Put(ctx, "k1", "x"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("read-only at revision %d", want.Revision)) {
		t.Fatalf("put: %v, want a refusal naming revision %d", err, want.Revision)
	}

	oldest, newest, err := objwal.Window(ctx, h.bucket)
	if err != nil {
		t.Fatal(err)
	}
	before := oldest.Time.Add(-time.Minute)
	_, err = startReadOnlyNodeWith(t, noWrites{h.bucket, t}, func(c *config.Config) { c.ReadOnlyAtTime = before })
	if w := "from " + oldest.String() + " to " + newest.String(); err == nil || !strings.Contains(err.Error(), "--read-only-at") || !strings.Contains(err.Error(), w) {
		t.Fatalf("start at %v: %v, want a refusal naming --read-only-at and %q", before, err, w)
	}
	future := clock.Real().Wall().Add(time.Hour)
	if _, err = startReadOnlyNodeWith(t, noWrites{h.bucket, t}, func(c *config.Config) { c.ReadOnlyAtTime = future }); err == nil || !strings.Contains(err.Error(), "in the future") {
		t.Fatalf("start at %v: %v, want a refusal of a future time", future, err)
	}
}
