package node

import (
	"runtime"
	"strconv"

	"github.com/netsy-io/netsy/internal/config"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/wal"
)

// etcd's metric names for what a node knows, next to the netsy_* ones, so
// that dashboards and alerts written for etcd read a Netsy cluster (the
// mapping is in docs/operations.md). The roles export the leader ones and
// the client API the mvcc operation and watcher ones; this file exports
// the engine's and the log's, the identity gauges, and the gRPC server
// metrics of the client port.

// etcdEngine is what the etcd collector reads of the engine.
type etcdEngine interface {
	KnownCommitted() uint64
	CommittedIndex() uint64
	Pending() uint64
	WritesFailed() uint64
	Keys() int64
}

// etcdLog is what it reads of the log.
type etcdLog interface {
	WALSyncStats() wal.SyncStats
}

var (
	etcdCommittedDesc = prometheus.NewDesc("etcd_server_proposals_committed_total",
		"The total number of consensus proposals committed (the newest log index this node knows the Primary committed).", nil, nil)
	etcdAppliedDesc = prometheus.NewDesc("etcd_server_proposals_applied_total",
		"The total number of consensus proposals applied (the newest log index applied to this node's state).", nil, nil)
	etcdPendingDesc = prometheus.NewDesc("etcd_server_proposals_pending",
		"The current number of pending proposals to commit (entries in this node's log not yet committed and applied).", nil, nil)
	etcdFailedDesc = prometheus.NewDesc("etcd_server_proposals_failed_total",
		"The total number of failed proposals seen (writes that failed or were refused after this node, as the Primary, took them).", nil, nil)
	etcdKeysDesc = prometheus.NewDesc("etcd_debugging_mvcc_keys_total",
		"Total number of keys.", nil, nil)
	etcdFsyncDesc = prometheus.NewDesc("etcd_disk_wal_fsync_duration_seconds",
		"The latency distributions of fsync called by WAL (this node's local log).", nil, nil)
	etcdServerIDDesc = prometheus.NewDesc("etcd_server_id",
		"Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.", []string{"server_id"}, nil)
	etcdVersionDesc = prometheus.NewDesc("etcd_server_version",
		"Which version is running. 1 for 'server_version' label with current version (the etcd API version Netsy serves).", []string{"server_version"}, nil)
	etcdGoVersionDesc = prometheus.NewDesc("etcd_server_go_version",
		"Which Go version server is running with. 1 for 'server_go_version' label with current version.", []string{"server_go_version"}, nil)
)

// etcdCollector exports the engine's and the log's numbers under etcd's
// names. Everything is read at scrape time: the write path keeps no
// metric of its own for them.
type etcdCollector struct {
	eng etcdEngine
	log etcdLog
	// memberID is this node's member id, 0 until it is registered.
	memberID func() uint64
}

func (c etcdCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{etcdCommittedDesc, etcdAppliedDesc, etcdPendingDesc, etcdFailedDesc, etcdKeysDesc,
		etcdFsyncDesc, etcdServerIDDesc, etcdVersionDesc, etcdGoVersionDesc} {
		ch <- d
	}
}

func (c etcdCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(etcdCommittedDesc, prometheus.GaugeValue, float64(c.eng.KnownCommitted()))
	ch <- prometheus.MustNewConstMetric(etcdAppliedDesc, prometheus.GaugeValue, float64(c.eng.CommittedIndex()))
	ch <- prometheus.MustNewConstMetric(etcdPendingDesc, prometheus.GaugeValue, float64(c.eng.Pending()))
	ch <- prometheus.MustNewConstMetric(etcdFailedDesc, prometheus.CounterValue, float64(c.eng.WritesFailed()))
	ch <- prometheus.MustNewConstMetric(etcdKeysDesc, prometheus.GaugeValue, float64(c.eng.Keys()))

	ws := c.log.WALSyncStats()
	buckets := make(map[float64]uint64, len(ws.Buckets))
	for i, n := range ws.Buckets {
		buckets[wal.SyncBuckets[i].Seconds()] = n
	}
	ch <- prometheus.MustNewConstHistogram(etcdFsyncDesc, ws.Syncs, ws.Time.Seconds(), buckets)

	if id := c.memberID(); id != 0 {
		ch <- prometheus.MustNewConstMetric(etcdServerIDDesc, prometheus.GaugeValue, 1, formatMemberID(id))
	}
	ch <- prometheus.MustNewConstMetric(etcdVersionDesc, prometheus.GaugeValue, 1, engine.Version)
	ch <- prometheus.MustNewConstMetric(etcdGoVersionDesc, prometheus.GaugeValue, 1, runtime.Version())
}

// nodeMetrics are what the node measures itself: the gRPC calls of its
// client and peer ports, and its object-storage requests.
type nodeMetrics struct {
	grpc, peerGRPC *grpcprom.ServerMetrics
	store          *storeMetrics
}

// newGRPCMetrics are the gRPC server metrics etcd's dashboards read
// (grpc_server_started_total, grpc_server_handled_total,
// grpc_server_msg_received_total, grpc_server_msg_sent_total, with
// grpc_type, grpc_service, grpc_method and grpc_code), from the
// go-grpc-middleware provider. At --metrics=extensive, as etcd, they add
// the grpc_server_handling_seconds histogram (Prometheus' default
// buckets, as etcd's): a clock read and a histogram update on every call,
// which etcd's default (basic) spares.
func newGRPCMetrics(level string) *grpcprom.ServerMetrics {
	if level == config.MetricsExtensive {
		return grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	}
	return grpcprom.NewServerMetrics()
}

// newPeerGRPCMetrics are the peer port's gRPC call counts (Follow
// streams, heartbeats, forwarded requests), under netsy_peer_ so that
// etcd's dashboards, which read the client port's, do not mix them in.
// No latency histogram: a Follow stream lasts as long as the Primary.
func newPeerGRPCMetrics() *grpcprom.ServerMetrics {
	return grpcprom.NewServerMetrics(grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("netsy_peer")))
}

// grpcMetricsOptions put m's interceptors on a server.
func grpcMetricsOptions(m *grpcprom.ServerMetrics) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.StreamServerInterceptor()),
	}
}

// formatMemberID prints a member id as etcd does (hex, no leading zeros),
// the form etcdctl's member list and the server_id label use.
func formatMemberID(id uint64) string { return strconv.FormatUint(id, 16) }

// etcdCollectors are this file's and storemetrics.go's collectors for the
// node's registry.
func (n *Node) etcdCollectors() []prometheus.Collector {
	quorum := float64(n.cfg.Quorum)
	return append([]prometheus.Collector{
		etcdCollector{eng: n.eng, log: n.objlog, memberID: n.roles.MemberID},
		n.metrics.grpc, n.metrics.peerGRPC,
		// The quorum mode, for dashboards that show it next to the
		// fallbacks (netsy_quorum_fallback).
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "netsy_quorum",
			Help: "This node's --quorum: -1 a majority of the nodes, 0 object storage alone, N that many replicas.",
		}, func() float64 { return quorum }),
	}, n.metrics.store.collectors()...)
}
