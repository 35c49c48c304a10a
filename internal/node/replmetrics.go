package node

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	lagEntriesDesc = prometheus.NewDesc("netsy_replication_lag_entries", "Log entries a replica lacks behind this Primary (reported by the Primary only).", []string{"replica"}, nil)
	lagSecondsDesc = prometheus.NewDesc("netsy_replication_lag_seconds", "How long ago this Primary appended the first entry a replica lacks.", []string{"replica"}, nil)
	countedDesc    = prometheus.NewDesc("netsy_replica_counted", "1 while a replica counts toward this Primary's write quorum.", []string{"replica"}, nil)
	fallbackDesc   = prometheus.NewDesc("netsy_quorum_fallback", "1 while this Primary acknowledges writes through object storage because its quorum cannot be met.", nil, nil)
)

// replicationCollector reports the Primary's view of its replicas.
type replicationCollector struct{ r *roles }

func (replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagEntriesDesc
	ch <- lagSecondsDesc
	ch <- countedDesc
	ch <- fallbackDesc
}

func (c replicationCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.prim.Replication()
	if st == nil {
		return
	}
	fb := 0.0
	if st.Fallback {
		fb = 1
	}
	ch <- prometheus.MustNewConstMetric(fallbackDesc, prometheus.GaugeValue, fb)
	for _, rs := range st.Replicas {
		ch <- prometheus.MustNewConstMetric(lagEntriesDesc, prometheus.GaugeValue, float64(rs.LagEntries), rs.NodeId)
		ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, float64(rs.LagMs)/1000, rs.NodeId)
		counted := 0.0
		if rs.Counted {
			counted = 1
		}
		ch <- prometheus.MustNewConstMetric(countedDesc, prometheus.GaugeValue, counted, rs.NodeId)
	}
}
