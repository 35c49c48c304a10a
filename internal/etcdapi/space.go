package etcdapi

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// etcd's space gauges, with etcd's names, help and semantics, read from
// the Backend's Status so that they and `etcdctl endpoint status` always
// report the same numbers.
var (
	dbTotalSizeDesc = prometheus.NewDesc("etcd_mvcc_db_total_size_in_bytes",
		"Total size of the underlying database physically allocated in bytes.", nil, nil)
	dbInUseDesc = prometheus.NewDesc("etcd_mvcc_db_total_size_in_use_in_bytes",
		"Total size of the underlying database logically in use in bytes.", nil, nil)
	quotaDesc = prometheus.NewDesc("etcd_server_quota_backend_bytes",
		"Current backend storage quota size in bytes.", nil, nil)
)

// spaceCollector exports the store's space and quota: total is what the
// store holds (values dropped but not yet reclaimed from its spill files
// included), in use what its data takes after compaction (the quota's
// measure), as engine.Engine.Space defines them.
type spaceCollector struct{ b Backend }

// SpaceCollector returns etcd's gauges of the store's space and quota
// (etcd_mvcc_db_total_size_in_bytes, etcd_mvcc_db_total_size_in_use_in_bytes,
// etcd_server_quota_backend_bytes) for the caller to register once per
// node: the client API's Server, not the peer port's.
func (s *Server) SpaceCollector() prometheus.Collector { return spaceCollector{s.b} }

func (spaceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dbTotalSizeDesc
	ch <- dbInUseDesc
	ch <- quotaDesc
}

func (c spaceCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.b.Status(context.Background())
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(dbTotalSizeDesc, prometheus.GaugeValue, float64(st.DbSize))
	ch <- prometheus.MustNewConstMetric(dbInUseDesc, prometheus.GaugeValue, float64(st.DbSizeInUse))
	ch <- prometheus.MustNewConstMetric(quotaDesc, prometheus.GaugeValue, float64(st.DbSizeQuota))
}
