package etcdapi

import (
	"errors"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
)

// newQuotaEnv serves a real engine with a space quota.
func newQuotaEnv(t *testing.T, quota int64) *testEnv {
	t.Helper()
	eng, err := engine.Open(engine.Config{Storage: &enginetest.MemStorage{}, Clock: clock.Real(),
		ClusterID: testClusterID, MemberID: testMemberID, Term: engineTerm, QuotaBackendBytes: quota})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	srv, addr := serveBackend(t, engineBackend{eng}, nil, nil)
	return &testEnv{t: t, srv: srv, addr: addr}
}

// gauges gathers the space collector.
func gauges(t *testing.T, s *Server) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.SpaceCollector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	return got
}

// Over the quota, a client sees etcd's exact NOSPACE error and the alarm
// under this member; reads, deletes, compaction and defragment work; a
// disarm lets writes in again; the gauges and Status agree throughout.
func TestQuotaExceededAnswersEtcdsNoSpaceAndAlarmList(t *testing.T) {
	e := newQuotaEnv(t, 64<<10)
	cli := e.client()
	ctx := testCtx(t)
	val := strings.Repeat("v", 1024)
	var err error
	var last *clientv3.PutResponse
	for i := 0; i < 1000 && err == nil; i++ {
		var r *clientv3.PutResponse
		if r, err = cli.Put(ctx, "big", val); err == nil {
			last = r
		}
	}
	if !errors.Is(err, rpctypes.ErrNoSpace) || err.Error() != "etcdserver: mvcc: database space exceeded" {
		t.Fatalf("put over the quota: %v, want etcd's ErrNoSpace", err)
	}
	// On the wire: ResourceExhausted with etcd's text, as etcdctl prints it.
	_, err = pb.NewKVClient(e.conn()).Put(ctx, &pb.PutRequest{Key: []byte("x")})
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "etcdserver: mvcc: database space exceeded" {
		t.Fatalf("raw put under NOSPACE: %v, want etcd's ErrGRPCNoSpace", err)
	}
	al, err := cli.AlarmList(ctx)
	if err != nil || len(al.Alarms) != 1 || al.Alarms[0].MemberID != testMemberID || al.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("alarm list %v %v", al, err)
	}
	st, err := cli.Status(ctx, e.addr)
	if err != nil || st.DbSizeQuota != 64<<10 || st.DbSizeInUse > 64<<10 || st.DbSize < st.DbSizeInUse || len(st.Errors) != 1 {
		t.Fatalf("status %+v %v", st, err)
	}
	g := gauges(t, e.srv)
	if g["etcd_server_quota_backend_bytes"] != 64<<10 || g["etcd_mvcc_db_total_size_in_use_in_bytes"] != float64(st.DbSizeInUse) || g["etcd_mvcc_db_total_size_in_bytes"] != float64(st.DbSize) {
		t.Fatalf("gauges %v, status total %d in use %d", g, st.DbSize, st.DbSizeInUse)
	}
	if _, err := cli.Grant(ctx, 10); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("lease grant under NOSPACE: %v", err)
	}
	if r, err := cli.Get(ctx, "big"); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("get under NOSPACE: %v %v", r, err)
	}
	if _, err := cli.Delete(ctx, "missing"); err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	if _, err := cli.Compact(ctx, last.Header.Revision); err != nil {
		t.Fatalf("compact under NOSPACE: %v", err)
	}
	if _, err := cli.Defragment(ctx, e.addr); err != nil {
		t.Fatalf("defragment under NOSPACE: %v", err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatalf("disarm: %v", err)
	}
	if al, err := cli.AlarmList(ctx); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarm list after disarm %v %v", al, err)
	}
	if _, err := cli.Put(ctx, "after", "disarm"); err != nil {
		t.Fatalf("put after compact and disarm: %v", err)
	}
	if g := gauges(t, e.srv); g["etcd_mvcc_db_total_size_in_use_in_bytes"] >= float64(st.DbSizeInUse)/4 {
		t.Fatalf("in use %v after compaction, %d before", g["etcd_mvcc_db_total_size_in_use_in_bytes"], st.DbSizeInUse)
	}
}
