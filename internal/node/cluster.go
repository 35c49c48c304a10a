package node

import (
	"context"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/roles"
)

// checkRegistration writes nodes/{node_id}.json and checks the cluster id
// against members.json, before anything is served. It returns how many
// other nodes are registered.
func checkRegistration(ctx context.Context, cfg config.Config, store objstore.Store, clk clock.Clock) (others int, err error) {
	// Load refuses a members.json of another cluster id.
	if _, _, err := discovery.NewMembersFile(store, cfg.ClusterID).Load(ctx); err != nil {
		return 0, err
	}
	if err := discovery.Register(ctx, store, roles.Registration(cfg, clk.Wall())); err != nil {
		return 0, err
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
