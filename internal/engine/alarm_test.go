package engine

import (
	"errors"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/internal/mvcc"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// quota sizes the quota to n versions of the keys and values fill writes.
func fillQuota(n int) int64 {
	return int64(n) * (mvcc.VersionOverhead + mvcc.KeyOverhead + 4 + 100)
}

// fill updates key "kkkk" with 100-byte values until a write is refused,
// and returns how many were written and the refusal. Its history is what
// a compaction then frees.
func fill(h *harness) (int, error) {
	h.t.Helper()
	for i := 0; i < 10000; i++ {
		_, err := h.e.Put(ctx(h.t), &pb.PutRequest{Key: []byte("kkkk"), Value: make([]byte, 100)})
		if err != nil {
			return i, err
		}
	}
	h.t.Fatal("the quota never refused a write")
	return 0, nil
}

func nospace(h *harness) []*pb.AlarmMember { return h.e.Alarms(pb.AlarmType_NOSPACE) }

// A write over the quota is refused with etcd's error before it is
// logged, and raises NOSPACE under this member's id; from then on writes
// that add data are refused while deletes, compactions and reads work,
// until a disarm; the next write over the quota raises it again.
func TestQuotaRaisesNoSpaceAndRefusesOnlyWritesThatAddData(t *testing.T) {
	h := newHarness(t, nil, func(c *Config) { c.QuotaBackendBytes = fillQuota(10) })
	n, err := fill(h)
	if !errors.Is(err, ErrNoSpace) || err.Error() != "etcdserver: mvcc: database space exceeded" {
		t.Fatalf("write over the quota: %v, want etcd's ErrNoSpace", err)
	}
	if n < 5 || n > 20 {
		t.Fatalf("%d writes fit a quota of 10 new keys' worth", n)
	}
	if _, used := h.e.Space(); used > h.e.QuotaBackendBytes() {
		t.Fatalf("in use %d past the quota %d: the refused write was applied", used, h.e.QuotaBackendBytes())
	}
	revBefore := h.e.CurrentRevision()
	if a := nospace(h); len(a) != 1 || a[0].MemberID != 2 || a[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("alarms %v, want NOSPACE of member 2", a)
	}
	// Nothing of the refused write is in the log: n puts, then the
	// key-less alarm entry at the same revision.
	if ents := h.st.Entries(1); len(ents) != n+1 || ents[n].Alarm == nil || len(ents[n].Ops) != 0 || ents[n].Revision != revBefore {
		t.Fatalf("log after %d puts and a refusal: %v", n, ents)
	}

	// A small write that would fit is refused too while the alarm is on.
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("x")}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put under NOSPACE: %v", err)
	}
	h.e.cfg.QuotaBackendBytes = 0 // the alarm refuses by itself
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("x")}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put under NOSPACE without a quota: %v", err)
	}
	h.e.cfg.QuotaBackendBytes = fillQuota(10)
	if _, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{TTL: 10}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("lease grant under NOSPACE: %v", err)
	}
	putTxn := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("y")}}}}}
	if _, err := h.e.Txn(ctx(t), putTxn); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("txn with a put under NOSPACE: %v", err)
	}
	delTxn := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("kkkk")}}}}}
	if _, err := h.e.Txn(ctx(t), delTxn); err != nil {
		t.Fatalf("txn with only a delete under NOSPACE: %v", err)
	}
	if _, err := h.e.Range(ctx(t), &pb.RangeRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("read under NOSPACE: %v", err)
	}
	_, usedBefore := h.e.Space()
	if _, err := h.e.Compact(ctx(t), &pb.CompactionRequest{Revision: h.e.CurrentRevision()}); err != nil {
		t.Fatalf("compact under NOSPACE: %v", err)
	}
	if _, used := h.e.Space(); used >= usedBefore/2 {
		t.Fatalf("in use %d after compacting the history, %d before", used, usedBefore)
	}
	if h.e.CurrentRevision() <= revBefore {
		t.Fatal("the delete did not commit")
	}
	// Still refused: space was freed but nobody disarmed.
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("x")}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put after compaction, before disarm: %v", err)
	}

	resp, err := h.e.Alarm(ctx(t), &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: 2, Alarm: pb.AlarmType_NOSPACE})
	if err != nil || len(resp.Alarms) != 1 {
		t.Fatalf("disarm: %v %v", resp, err)
	}
	if a := nospace(h); len(a) != 0 {
		t.Fatalf("alarms after disarm: %v", a)
	}
	h.put("x", "after disarm")
	// Disarming refuses nothing; the next write over the quota raises again.
	if _, err := fill(h); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("refill: %v", err)
	}
	if a := nospace(h); len(a) != 1 {
		t.Fatalf("alarm not raised again: %v", a)
	}
}

// The alarm is state of the log: a restart keeps it (replayed, and from a
// snapshot), and a follower applying the writer's log lists it, then
// refuses writes with it once promoted; its disarm replicates too.
func TestNoSpaceAlarmSurvivesRestartSnapshotAndPromotion(t *testing.T) {
	quota := fillQuota(5)
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, func(c *Config) { c.QuotaBackendBytes = quota; c.Term = 1 })
	if _, err := fill(w); !errors.Is(err, ErrNoSpace) {
		t.Fatal(err)
	}
	w.reopen()
	if a := nospace(w); len(a) != 1 {
		t.Fatalf("after a restart (replay): %v", a)
	}
	hdr, err := capturedSnapshot(w)
	if err != nil {
		t.Fatal(err)
	}
	if len(hdr.Alarms) != 1 {
		t.Fatalf("snapshot header alarms %v", hdr.Alarms)
	}

	f := follower(t, nil, func(c *Config) { c.QuotaBackendBytes = quota; c.MemberID = 7 })
	last, _, _ := w.e.LastAppended()
	shipAll(t, wst, f, 1, last)
	if a := nospace(f); len(a) != 1 || a[0].MemberID != 2 {
		t.Fatalf("follower lists %v, want the writer's NOSPACE (member 2)", a)
	}
	if err := f.e.Promote(ctx(t), 2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Put(ctx(t), &pb.PutRequest{Key: []byte("x")}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put on the promoted follower: %v", err)
	}
}

// capturedSnapshot captures the writer's state as a local snapshot would.
func capturedSnapshot(h *harness) (*netsyv1.SnapshotHeader, error) {
	o := &snapshotOp{}
	if err := h.e.submit(ctx(h.t), o); err != nil {
		return nil, err
	}
	defer o.snap.Release()
	return o.snap.Header, nil
}

// A store already past the quota does not open, and says what it holds
// and what the quota is.
func TestOpenRefusesQuotaSmallerThanTheData(t *testing.T) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, nil)
	for i := 0; i < 20; i++ {
		h.put(string(rune('a'+i)), strings.Repeat("v", 100))
	}
	h.e.Close()
	_, err := Open(Config{Storage: st, Clock: h.clk, QuotaBackendBytes: 1000})
	if !errors.Is(err, ErrQuotaTooSmall) {
		t.Fatalf("open: %v, want ErrQuotaTooSmall", err)
	}
	for _, want := range []string{"20 keys", "quota of 1000 bytes", "at least"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	h.open() // no quota: opens, for the harness's cleanup
}

// A client may raise NOSPACE (as etcd allows), which refuses writes as a
// raised one does; CORRUPT is refused with a clear error.
func TestClientActivatesNoSpaceButNotCorrupt(t *testing.T) {
	h := newHarness(t, nil, nil)
	if _, err := h.e.Alarm(ctx(t), &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 9, Alarm: pb.AlarmType_CORRUPT}); !errors.Is(err, ErrAlarmNotSupported) {
		t.Fatalf("activate CORRUPT: %v", err)
	}
	resp, err := h.e.Alarm(ctx(t), &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 9, Alarm: pb.AlarmType_NOSPACE})
	if err != nil || len(resp.Alarms) != 1 {
		t.Fatalf("activate NOSPACE: %v %v", resp, err)
	}
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("x")}); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("put after a client's NOSPACE: %v", err)
	}
	st, _ := h.e.Status(ctx(t))
	if len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "NOSPACE") {
		t.Fatalf("status errors %v, want the alarm", st.Errors)
	}
	// Disarming an alarm that is not set changes nothing and answers none.
	resp, err = h.e.Alarm(ctx(t), &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: 1, Alarm: pb.AlarmType_NOSPACE})
	if err != nil || len(resp.Alarms) != 0 {
		t.Fatalf("disarm of an unset alarm: %v %v", resp, err)
	}
}

// Status reports the measure the quota uses: in use shrinks with
// compaction, total is at least in use, and the quota is reported.
func TestStatusReportsSpaceInUseAndQuota(t *testing.T) {
	h := newHarness(t, nil, func(c *Config) { c.QuotaBackendBytes = 1 << 30 })
	for i := 0; i < 50; i++ {
		h.put("k", strings.Repeat("v", 1000))
	}
	st, _ := h.e.Status(ctx(t))
	if st.DbSizeInUse < 50*1000 || st.DbSize < st.DbSizeInUse || st.DbSizeQuota != 1<<30 {
		t.Fatalf("status sizes: total %d in use %d quota %d", st.DbSize, st.DbSizeInUse, st.DbSizeQuota)
	}
	if _, err := h.e.Compact(ctx(t), &pb.CompactionRequest{Revision: h.e.CurrentRevision()}); err != nil {
		t.Fatal(err)
	}
	after, _ := h.e.Status(ctx(t))
	if after.DbSizeInUse >= st.DbSizeInUse/10 {
		t.Fatalf("in use %d after compacting 49 of 50 versions, %d before", after.DbSizeInUse, st.DbSizeInUse)
	}
}
