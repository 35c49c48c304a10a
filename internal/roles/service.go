package roles

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/primary"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// RegisterPeerServices puts the netsy peer services on g: the Elector
// (answered by the Elector this node runs, refused otherwise), the Node
// service and the Primary's Follow service.
func (r *Roles) RegisterPeerServices(g *grpc.Server) {
	netsyv1.RegisterElectorServer(g, r.ElectorServer())
	netsyv1.RegisterNodeServer(g, nodeService{r: r})
	netsyv1.RegisterFollowServer(g, r.follow)
}

// ElectorServer is the Elector service as the peer port serves it: the
// Elector this node runs, refusals (peer.ReasonNotElector) otherwise. A
// Transport that does not go over gRPC (a simulation's) calls it.
func (r *Roles) ElectorServer() netsyv1.ElectorServer {
	return &elector.Service{Current: r.RunningElector, ElectorAddr: r.electorAddr}
}

// LocalNode is this node as a NodeAPI, what the peer port's Node service
// answers. A Transport that does not go over gRPC (a simulation's) calls
// it.
func (r *Roles) LocalNode() NodeAPI { return localNode{r} }

// nodeService serves the Node gRPC service on the peer port: localNode,
// and what only the peer port asks.
type nodeService struct {
	netsyv1.UnsafeNodeServer
	r *Roles
}

var _ netsyv1.NodeServer = nodeService{}

func (s nodeService) PushClusterState(ctx context.Context, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	return localNode{s.r}.PushClusterState(ctx, cs)
}

func (s nodeService) GetNodeState(ctx context.Context, _ *netsyv1.GetNodeStateRequest) (*netsyv1.NodeState, error) {
	return localNode{s.r}.NodeState(ctx)
}

func (s nodeService) Drain(ctx context.Context, _ *netsyv1.HandoffRequest) (*netsyv1.HandoffResponse, error) {
	if err := (localNode{s.r}).Drain(ctx); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &netsyv1.HandoffResponse{ClusterState: s.r.view.Current()}, nil
}

func (s nodeService) ResignElector(ctx context.Context, _ *netsyv1.ResignRequest) (*netsyv1.ResignResponse, error) {
	if err := s.r.lock.Resign(ctx); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &netsyv1.ResignResponse{}, nil
}

func (s nodeService) ReadIndex(ctx context.Context, _ *netsyv1.ReadIndexRequest) (*netsyv1.ReadIndexResponse, error) {
	resp, err := s.r.prim.ReadIndex(ctx)
	switch {
	case errors.Is(err, primary.ErrNotActive):
		// Refused unevaluated: the reader asks again (by the reason).
		return nil, peer.Error(codes.Unavailable, peer.ReasonNotPrimary, err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return resp, nil
}

func (s nodeService) LeaseRenew(ctx context.Context, r *netsyv1.LeaseRenewRequest) (*netsyv1.LeaseRenewResponse, error) {
	ttl, err := s.r.prim.LeaseRenew(ctx, r.Id)
	switch {
	case errors.Is(err, engine.ErrLeaseNotFound):
		return nil, status.Error(codes.NotFound, err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &netsyv1.LeaseRenewResponse{Ttl: ttl}, nil
}

// Collectors are the roles' metrics: events, the Primary's quorum and
// replication, catch-ups, and the role gauges.
func (r *Roles) Collectors() []prometheus.Collector {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	return []prometheus.Collector{
		r.eventsC, r.fallbacksC, r.receiptH, r.catchUpsC, replicationCollector{r},
		gauge("netsy_primary_state", "This node's primary state: 1 Replica, 2 Starting, 3 Active, 4 Draining.",
			func() float64 { s, _ := r.prim.State(); return float64(s) }),
		gauge("netsy_primary_term", "The primary term this node holds or follows.",
			func() float64 { _, t := r.Primary(); return float64(t) }),
		gauge("netsy_elector", "1 while this node is the Elector.",
			func() float64 { return b2f(r.RunningElector() != nil) }),
		gauge("netsy_elector_term", "The highest Elector term this node has seen.",
			func() float64 { return float64(r.view.ElectorTerm()) }),
		gauge("netsy_healthy", "1 while this node's heartbeats reach the Elector.",
			func() float64 { return b2f(r.Healthy()) }),
		gauge("netsy_following", "1 while this replica's Follow stream to the Primary is open.",
			func() float64 { ok, _, _ := r.follower.Connected(); return b2f(ok) }),
		// etcd's names, with leader read as the Primary (docs/operations.md).
		r.leaderChangesC, r.hbFailuresC, r.peerRTTH,
		gauge("etcd_server_has_leader", "Whether or not a leader exists. 1 is existence, 0 is not (this node is the Active Primary, or follows one).",
			func() float64 { return b2f(r.HasLeader()) }),
		gauge("etcd_server_is_leader", "Whether or not this member is a leader. 1 if is, 0 otherwise (1 while this node is the Active Primary).",
			func() float64 { return b2f(r.prim.Active()) }),
	}
}

// HasLeader reports whether this node has a Primary to commit its writes:
// it is the Active Primary itself, or its Follow stream to the Primary is
// open. A Primary named in the Cluster State that this node cannot reach
// does not count, as an etcd follower that lost its leader's heartbeats
// has none.
func (r *Roles) HasLeader() bool {
	if r.prim.Active() {
		return true
	}
	ok, _, _ := r.follower.Connected()
	return ok
}

var (
	lagEntriesDesc = prometheus.NewDesc("netsy_replication_lag_entries", "Log entries a replica lacks behind this Primary (reported by the Primary only).", []string{"replica"}, nil)
	lagSecondsDesc = prometheus.NewDesc("netsy_replication_lag_seconds", "How long ago this Primary appended the first entry a replica lacks.", []string{"replica"}, nil)
	countedDesc    = prometheus.NewDesc("netsy_replica_counted", "1 while a replica counts toward this Primary's write quorum.", []string{"replica"}, nil)
	fallbackDesc   = prometheus.NewDesc("netsy_quorum_fallback", "1 while this Primary acknowledges writes through object storage because its quorum cannot be met.", nil, nil)
)

// replicationCollector reports the Primary's view of its replicas.
type replicationCollector struct{ r *Roles }

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
