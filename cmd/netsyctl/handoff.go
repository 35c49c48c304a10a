package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

const handoffUsage = "usage: netsyctl handoff [--to NODE] [--if-primary] [--endpoints E | --peer-endpoints P] [--timeout D] [-o table|json]"

// handedOff is what `handoff -o json` prints.
type handedOff struct {
	Primary     *clusterview.NodeRef `json:"primary"`
	PrimaryTerm uint64               `json:"primary_term"`
	// Previous* are the roles as the first node asked knew them before.
	PreviousPrimary     *clusterview.NodeRef `json:"previous_primary"`
	PreviousPrimaryTerm uint64               `json:"previous_primary_term"`
	Requested           string               `json:"requested,omitempty"`
	Elector             *clusterview.NodeRef `json:"elector"`
	TookMS              int64                `json:"took_ms"`
}

func runHandoff(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	fs := newFlagSet("handoff", stdout)
	// The old Primary drains (flushes to object storage) before the new
	// one starts, which can take longer than a read.
	c.bindWith(fs, time.Minute)
	c.bindPeer(fs)
	to := fs.String("to", "", "node id to prefer as the next Primary (default: the Elector picks)")
	ifPrimary := fs.Bool("if-primary", false, "hand off only if the first node to answer (the first of --peer-endpoints) is itself the Primary, else do nothing: a node's own preStop hook, with --peer-endpoints 127.0.0.1:2380")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New(handoffUsage)
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
	a, err := p.anyNode(ctx)
	if err != nil {
		return err
	}
	before := a.self.GetClusterState()
	// The node's own primary state, not its view of the roles, which may
	// lag: a node that is no Primary has nothing to hand off.
	if st := a.self.GetState().GetPrimaryState(); *ifPrimary && st != netsyv1.PrimaryState_ACTIVE && st != netsyv1.PrimaryState_STARTING {
		if c.output == "json" {
			return writeJSON(stdout, map[string]any{"handed_off": false, "node": a.name(), "primary_state": st.String()})
		}
		_, err := fmt.Fprintf(stdout, "%s is not the Primary (%s): nothing to hand off\n", a.name(), st)
		return err
	}
	clk := clock.Real()
	start := clk.Now()
	var resp *netsyv1.HandoffResponse
	el, err := p.withElector(ctx, a, func(ctx context.Context, ec netsyv1.ElectorClient) error {
		var err error
		resp, err = ec.Handoff(ctx, &netsyv1.HandoffRequest{To: *to})
		return err
	})
	if err != nil {
		return err
	}
	cs := resp.GetClusterState()
	if cs.GetPrimary() != nil {
		// The Elector answers once it has named the new Primary; that
		// node serves only after its Starting step. A handoff is over
		// when it is Active, so the next command (another handoff, a
		// stop of the old Primary) finds it serving.
		if err := waitActive(ctx, p, clk, cs.GetPrimary(), cs.GetPrimaryTerm()); err != nil {
			return err
		}
	}
	took := clk.Since(start)
	out := handedOff{
		Primary:             clusterview.Ref(cs.GetPrimary()),
		PrimaryTerm:         cs.GetPrimaryTerm(),
		PreviousPrimary:     clusterview.Ref(before.GetPrimary()),
		PreviousPrimaryTerm: before.GetPrimaryTerm(),
		Requested:           *to,
		Elector:             clusterview.Ref(el),
		TookMS:              took.Milliseconds(),
	}
	if out.Primary == nil {
		return fmt.Errorf("the Elector %s answered after %s with no Primary elected (primary term %d): netsyctl cluster-state --events shows why",
			el.GetNodeId(), clusterview.FormatAge(took), out.PrimaryTerm)
	}
	if c.output == "json" {
		return writeJSON(stdout, out)
	}
	was := "none"
	if out.PreviousPrimary != nil {
		was = out.PreviousPrimary.NodeID
	}
	fmt.Fprintf(stdout, "Primary is now %s (member %s, %s), primary term %d (was %s, term %d); took %s\n",
		out.Primary.NodeID, out.Primary.MemberID, out.Primary.PeerAddr, out.PrimaryTerm, was, out.PreviousPrimaryTerm, clusterview.FormatAge(took))
	if *to != "" && *to != out.Primary.NodeID {
		fmt.Fprintf(stdout, "note: asked for %s; the Elector chose %s\n", *to, out.Primary.NodeID)
	}
	return nil
}

// waitActive asks the node p until it answers that it is the Active
// Primary at term or a later one.
func waitActive(ctx context.Context, p *peers, clk clock.Clock, primary *netsyv1.NodeInfo, term uint64) error {
	var last string
	for {
		cc, err := p.conn(primary.GetPeerAddr())
		if err != nil {
			return err
		}
		ns, err := netsyv1.NewNodeClient(cc).GetNodeState(ctx, &netsyv1.GetNodeStateRequest{})
		if err == nil {
			st := ns.GetState()
			if st.GetPrimaryState() == netsyv1.PrimaryState_ACTIVE && st.GetPrimaryTerm() >= term {
				return nil
			}
			last = fmt.Sprintf("it is %s at primary term %d", st.GetPrimaryState(), st.GetPrimaryTerm())
		} else {
			last = p.explain(primary.GetPeerAddr(), err)
		}
		if err := clk.Sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("the Elector named %s Primary at term %d, but it is not Active yet (%s): %w", primary.GetNodeId(), term, last, err)
		}
	}
}
