package node

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/roles"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// checkRegistration writes nodes/{node_id}.json and checks the cluster id
// against members.json, before anything is served. A registration of this
// node id with other addresses is taken over only when its peer address
// does not answer as this node id (the process that wrote it is gone).
// It returns how many other nodes are registered.
func checkRegistration(ctx context.Context, cfg config.Config, store objstore.Store, clk clock.Clock, probe discovery.Prober, log hclog.Logger) (others int, err error) {
	// Load refuses a members.json of another cluster id.
	if _, _, err := discovery.NewMembersFile(store, cfg.ClusterID).Load(ctx); err != nil {
		return 0, err
	}
	old, err := discovery.RegisterTakingOver(ctx, store, roles.Registration(cfg, clk.Wall()), probe)
	if err != nil {
		return 0, err
	}
	if old != nil {
		log.Warn("took over this node id's registration: the process that wrote it no longer answers at its peer address",
			"node", cfg.NodeID, "old_peer_addr", old.PeerAddr, "old_client_urls", old.ClientURLs, "old_http_addr", old.HTTPAddr)
	}
	regs, _, err := discovery.List(ctx, store)
	if err != nil {
		return 0, err
	}
	// Alone (no other node registered) the Elector counts one
	// registration, so the node's majority is itself and it acknowledges
	// on its local fsync. members.json keeps the member id of every node
	// that ever joined, deregistered ones too, so it says nothing about
	// who holds acknowledged writes now.
	for _, reg := range regs {
		if reg.NodeID != cfg.NodeID {
			others++
		}
	}
	return others, nil
}

// probeNode asks the node at a peer address who it is, within two
// heartbeat intervals: a registration whose address does not answer (or
// answers as another node) belongs to a process that is gone.
func probeNode(pool *peer.Pool, clk clock.Clock, hb time.Duration) discovery.Prober {
	return func(ctx context.Context, addr string) (string, error) {
		conn, err := pool.Conn(addr)
		if err != nil {
			return "", err
		}
		ctx, cancel := clock.WithTimeout(ctx, clk, 2*hb)
		defer cancel()
		ns, err := netsyv1.NewNodeClient(conn).GetNodeState(ctx, &netsyv1.GetNodeStateRequest{})
		if err != nil {
			return "", err
		}
		return ns.GetState().GetNodeId(), nil
	}
}
