package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

const clusterStateUsage = "usage: netsyctl cluster-state [--events] [--endpoints E | --peer-endpoints P] [--timeout D] [-o table|json]"

func runClusterState(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	fs := newFlagSet("cluster-state", stdout)
	c.bind(fs)
	c.bindPeer(fs)
	events := fs.Bool("events", false, "also show the event log (role changes), oldest first")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New(clusterStateUsage)
	}
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	p, err := c.peers(ctx)
	if err != nil {
		return err
	}
	defer p.close()
	v, _, err := p.clusterState(ctx)
	if err != nil {
		return err
	}
	if c.output == "json" {
		if !*events {
			v.Events = nil
		}
		return writeJSON(stdout, v)
	}
	return clusterview.WriteTable(stdout, v, *events)
}

// clusterState asks any node for its state (which names the Elector),
// then the Elector for the full Cluster State. When the Elector does not
// answer, the view is the node's own and its Note says so; fromElector
// tells the two apart.
func (p *peers) clusterState(ctx context.Context) (v clusterview.View, fromElector bool, err error) {
	a, err := p.anyNode(ctx)
	if err != nil {
		return clusterview.View{}, false, err
	}
	var cs *netsyv1.ClusterState
	_, err = p.withElector(ctx, a, func(ctx context.Context, ec netsyv1.ElectorClient) error {
		var err error
		cs, err = ec.GetClusterState(ctx, &netsyv1.GetClusterStateRequest{Full: true})
		return err
	})
	if err != nil {
		v = clusterview.FromProto(nil, a.self)
		if errors.Is(err, errNoElector) {
			v.Note = fmt.Sprintf("%s knows no Elector: showing %s's view", a.name(), a.name())
		} else {
			v.Note = fmt.Sprintf("the Elector did not answer: showing %s's view (%v)", a.name(), err)
		}
		return v, false, nil
	}
	return clusterview.FromProto(cs, a.self), true, nil
}
