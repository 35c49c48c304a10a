package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

const deregisterUsage = "usage: netsyctl deregister [--endpoints E | --peer-endpoints P] [--timeout D] [-o table|json] NODE"

// deregistered is what `deregister -o json` prints.
type deregistered struct {
	NodeID  string               `json:"node_id"`
	Elector *clusterview.NodeRef `json:"elector"`
}

func runDeregister(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	fs := newFlagSet("deregister", stdout)
	c.bind(fs)
	c.bindPeer(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		return errors.New(deregisterUsage)
	}
	if err := c.check(); err != nil {
		return err
	}
	node := pos[0]
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	p, err := c.peers(ctx)
	if err != nil {
		return err
	}
	defer p.close()
	a, err := p.anyNode(ctx)
	if err != nil {
		return err
	}
	// The Elector decides whether a node may go (a Healthy node re-registers
	// when it next starts); netsyctl reports what it answered.
	el, err := p.withElector(ctx, a, func(ctx context.Context, ec netsyv1.ElectorClient) error {
		_, err := ec.DeregisterNode(ctx, &netsyv1.DeregisterNodeRequest{NodeId: node})
		return err
	})
	if err != nil {
		return fmt.Errorf("deregister %s: %w", node, err)
	}
	out := deregistered{NodeID: node, Elector: clusterview.Ref(el)}
	if c.output == "json" {
		return writeJSON(stdout, out)
	}
	_, err = fmt.Fprintf(stdout, "deregistered %s (Elector %s at %s)\n", node, el.GetNodeId(), el.GetPeerAddr())
	return err
}
