package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/wal"
)

type fakeEtcdEngine struct {
	committed, applied, pending, failed uint64
	keys                                int64
}

func (f fakeEtcdEngine) KnownCommitted() uint64 { return f.committed }
func (f fakeEtcdEngine) CommittedIndex() uint64 { return f.applied }
func (f fakeEtcdEngine) Pending() uint64        { return f.pending }
func (f fakeEtcdEngine) WritesFailed() uint64   { return f.failed }
func (f fakeEtcdEngine) Keys() int64            { return f.keys }

type fakeEtcdLog struct{ st wal.SyncStats }

func (f fakeEtcdLog) WALSyncStats() wal.SyncStats { return f.st }

// The etcd collector reports each engine number under etcd's name and
// type, the fsync histogram with etcd's bucket bounds, and the member id
// in hex once the node has one.
func TestEtcdCollectorReportsTheEngineUnderEtcdNames(t *testing.T) {
	buckets := make([]uint64, len(wal.SyncBuckets))
	for i := range buckets {
		buckets[i] = 3 // three fsyncs, all within 1 ms
	}
	var id uint64
	c := etcdCollector{
		eng:      fakeEtcdEngine{committed: 12, applied: 10, pending: 2, failed: 4, keys: 7},
		log:      fakeEtcdLog{wal.SyncStats{Syncs: 3, Time: 1500 * time.Microsecond, Buckets: buckets}},
		memberID: func() uint64 { return id },
	}
	want := `
# HELP etcd_server_proposals_committed_total The total number of consensus proposals committed (the newest log index this node knows the Primary committed).
# TYPE etcd_server_proposals_committed_total gauge
etcd_server_proposals_committed_total 12
# HELP etcd_server_proposals_applied_total The total number of consensus proposals applied (the newest log index applied to this node's state).
# TYPE etcd_server_proposals_applied_total gauge
etcd_server_proposals_applied_total 10
# HELP etcd_server_proposals_pending The current number of pending proposals to commit (entries in this node's log not yet committed and applied).
# TYPE etcd_server_proposals_pending gauge
etcd_server_proposals_pending 2
# HELP etcd_server_proposals_failed_total The total number of failed proposals seen (writes that failed or were refused after this node, as the Primary, took them).
# TYPE etcd_server_proposals_failed_total counter
etcd_server_proposals_failed_total 4
# HELP etcd_debugging_mvcc_keys_total Total number of keys.
# TYPE etcd_debugging_mvcc_keys_total gauge
etcd_debugging_mvcc_keys_total 7
`
	names := []string{"etcd_server_proposals_committed_total", "etcd_server_proposals_applied_total",
		"etcd_server_proposals_pending", "etcd_server_proposals_failed_total", "etcd_debugging_mvcc_keys_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "etcd_server_id"); n != 0 {
		t.Fatalf("%d etcd_server_id series before the node has a member id, want 0", n)
	}
	id = 0xbeef
	ids := `
# HELP etcd_server_id Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.
# TYPE etcd_server_id gauge
etcd_server_id{server_id="beef"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(ids), "etcd_server_id"); err != nil {
		t.Fatal(err)
	}

	reg := newTestRegistry(t, c)
	fsync := reg["etcd_disk_wal_fsync_duration_seconds"]
	if fsync == nil || fsync.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("fsync histogram: %v", fsync)
	}
	h := fsync.Metric[0].Histogram
	if h.GetSampleCount() != 3 || h.GetSampleSum() != 0.0015 || len(h.Bucket) != 14 ||
		h.Bucket[0].GetUpperBound() != 0.001 || h.Bucket[13].GetUpperBound() != 8.192 {
		t.Fatalf("fsync histogram %v, want 3 samples summing to 1.5 ms in etcd's 14 buckets (1 ms to 8.192 s)", h)
	}
}

// newTestRegistry gathers c into name → family.
func newTestRegistry(t *testing.T, c etcdCollector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// scrapeMetrics parses a node's /metrics.
func scrapeMetrics(t *testing.T, n *Node) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, n, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// series finds the value of the series of name whose labels include want.
func series(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// A single node on a file bucket is its own leader; a put through the
// client port moves the gRPC server metrics (with etcd's label names),
// etcd's mvcc and proposal numbers, and the keys gauge.
func TestNodeExportsEtcdMetrics(t *testing.T) {
	n := startNode(t, "file://"+filepath.Join(t.TempDir(), "bucket"), nil)
	cli := client(t, n)
	before := scrapeMetrics(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	after := scrapeMetrics(t, n)
	put := map[string]string{"grpc_type": "unary", "grpc_service": "etcdserverpb.KV", "grpc_method": "Put"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		delta  float64
	}{
		{"grpc_server_started_total", put, 1},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "Put", "grpc_code": "OK"}, 1},
		{"grpc_server_msg_received_total", put, 1},
		{"grpc_server_msg_sent_total", put, 1},
		{"etcd_mvcc_put_total", nil, 1},
		{"etcd_debugging_mvcc_keys_total", nil, 1},
		{"etcd_server_proposals_applied_total", nil, 1},
		{"etcd_server_proposals_committed_total", nil, 1},
	} {
		b, _ := series(before, c.name, c.labels)
		a, ok := series(after, c.name, c.labels)
		if !ok || a-b != c.delta {
			t.Errorf("%s%v: %v → %v (present %v), want +%v", c.name, c.labels, b, a, ok, c.delta)
		}
	}
	// As etcd's default (--metrics=basic): no handling-time histogram.
	if _, ok := series(after, "grpc_server_handling_seconds", put); ok {
		t.Error("grpc_server_handling_seconds is exported at --metrics=basic; etcd exports it only at extensive")
	}
	// grpc_server_handled_total is there for every method and code from
	// the start, as etcd's, so rate() over it never starts from nothing.
	if _, ok := series(before, "grpc_server_handled_total", map[string]string{"grpc_method": "Range", "grpc_code": "Unavailable"}); !ok {
		t.Error("grpc_server_handled_total lacks the Range/Unavailable series before any call")
	}
	memberID := n.roles.MemberID()
	for name, labels := range map[string]map[string]string{
		"etcd_server_is_leader":                 nil,
		"etcd_server_has_leader":                nil,
		"etcd_server_id":                        {"server_id": formatMemberID(memberID)},
		"etcd_server_version":                   {"server_version": engine.Version},
		"etcd_server_leader_changes_seen_total": nil,
	} {
		if v, ok := series(after, name, labels); !ok || v != 1 {
			t.Errorf("%s%v = %v (present %v), want 1", name, labels, v, ok)
		}
	}
	if v, ok := series(after, "etcd_server_proposals_pending", nil); !ok || v != 0 {
		t.Errorf("pending = %v (present %v), want 0 once the put is acknowledged", v, ok)
	}
	if v, ok := series(after, "netsy_objstore_requests_total", map[string]string{"op": "put_if_absent", "result": "ok"}); !ok || v == 0 {
		t.Errorf("object-storage creates = %v (present %v), want some (registration, the WAL)", v, ok)
	}
	// The peer port's calls are counted apart, under netsy_peer_.
	if _, ok := series(after, "netsy_peer_grpc_server_handled_total", map[string]string{"grpc_service": "etcdserverpb.KV", "grpc_method": "Put", "grpc_code": "OK"}); !ok {
		t.Error("netsy_peer_grpc_server_handled_total lacks the forwarded Put series")
	}
	if v, ok := series(after, "netsy_quorum", nil); !ok || v != -1 {
		t.Errorf("netsy_quorum = %v (present %v), want -1 (the default)", v, ok)
	}
	if v, ok := series(after, "etcd_disk_wal_fsync_duration_seconds", nil); !ok || v == 0 {
		t.Errorf("wal fsyncs = %v (present %v), want some", v, ok)
	}
}

// At --metrics=extensive, as etcd, the client port's calls are also timed
// in the grpc_server_handling_seconds histogram.
func TestExtensiveMetricsTimeClientCalls(t *testing.T) {
	n := startNode(t, "file://"+filepath.Join(t.TempDir(), "bucket"), func(c *config.Config) { c.Metrics = config.MetricsExtensive })
	cli := client(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	put := map[string]string{"grpc_type": "unary", "grpc_service": "etcdserverpb.KV", "grpc_method": "Put"}
	if v, ok := series(scrapeMetrics(t, n), "grpc_server_handling_seconds", put); !ok || v != 1 {
		t.Fatalf("grpc_server_handling_seconds%v = %v (present %v), want 1 call timed", put, v, ok)
	}
}
