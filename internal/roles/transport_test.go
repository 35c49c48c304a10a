package roles

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/heartbeat"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/peer/memnet"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// The gRPC Transport, over an in-memory network, reaches the peer
// services a node's roles register: the Node service answers with the
// node's own state and takes a pushed Cluster State into its view, and
// the Elector service of a node that is not the Elector refuses with
// ReasonNotElector, which the roles read as "no Elector here" by its
// reason alone.
func TestGRPCTransportReachesTheRolesPeerServices(t *testing.T) {
	n := newTestNode(t, nil)
	// Registered: a heartbeat follows the registration.
	n.calls.next(t, "heartbeat")

	net := memnet.New()
	defer net.Close()
	l, err := net.Host("n1").Listen("n1:2380")
	if err != nil {
		t.Fatal(err)
	}
	g := peer.NewServer(peer.ServerOptions()...)
	n.r.RegisterPeerServices(g)
	serving := peer.Serve(g, l)
	defer serving.Close()
	pool := peer.NewPool(net.Host("client"))
	defer pool.Close()
	tr := GRPCTransport{Conn: pool.Conn}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	node, err := tr.Node(&netsyv1.NodeInfo{NodeId: "n1", PeerAddr: "n1:2380"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := node.NodeState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetInfo().GetNodeId() != "n1" || st.GetInfo().GetMemberId() != 7 || st.GetState().GetHealth() != netsyv1.HealthState_HEALTHY {
		t.Fatalf("node state over gRPC: %v", st)
	}
	push := &netsyv1.ClusterState{Elector: &netsyv1.NodeInfo{NodeId: "el", PeerAddr: "el:2380"}, ElectorTerm: 1, Version: 2,
		Primary: &netsyv1.NodeInfo{NodeId: "n9", PeerAddr: "n9:2380"}, PrimaryTerm: 1}
	resp, err := node.PushClusterState(ctx, push)
	if err != nil || !resp.Accepted || resp.GetCurrent().GetVersion() != 2 {
		t.Fatalf("push over gRPC: %v %v", resp, err)
	}
	if p, term := n.r.Primary(); p.GetNodeId() != "n9" || term != 1 {
		t.Fatalf("the pushed Primary is not in the view: %v %d", p, term)
	}

	el, err := tr.Elector("n1:2380")
	if err != nil {
		t.Fatal(err)
	}
	_, err = el.Heartbeat(ctx, &netsyv1.Heartbeat{NodeId: "x"})
	if peer.ReasonOf(err) != peer.ReasonNotElector {
		t.Fatalf("a node that is not the Elector answered %v, want ReasonNotElector", err)
	}
	if got := n.r.electorRefusal(err); !errors.Is(got, heartbeat.ErrNoElector) {
		t.Fatalf("the roles read %v as %v, want heartbeat.ErrNoElector", err, got)
	}
}
