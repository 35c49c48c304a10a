package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/objstore"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

const deregisterUsage = "usage: netsyctl deregister [--endpoints E | --peer-endpoints P] [--force] " +
	"[--storage URL [--s3-endpoint URL --s3-region R --s3-path-style]] [--timeout D] [-o table|json] NODE"

// deregistered is what `deregister -o json` prints.
type deregistered struct {
	NodeID string `json:"node_id"`
	// Elector is the Elector that removed the node; nil when netsyctl
	// deleted the registration from the bucket itself (Storage).
	Elector *clusterview.NodeRef `json:"elector,omitempty"`
	Storage string               `json:"storage,omitempty"`
	// Forced is set when the node went only because of --force; Warning
	// then says what may be lost.
	Forced  bool   `json:"forced,omitempty"`
	Warning string `json:"warning,omitempty"`
}

func runDeregister(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	fs := newFlagSet("deregister", stdout)
	c.bind(fs)
	c.bindPeer(fs)
	force := fs.Bool("force", false, "remove a node that is not answering even when object storage may lack entries it acknowledged (prints what may be lost)")
	storage := fs.String("storage", "", "the cluster's permanent store (file:///abs/path or s3://bucket[/prefix]): when no Elector answers (the cluster is stopped), delete nodes/NODE.json there directly")
	var so objopen.Options
	fs.StringVar(&so.S3Endpoint, "s3-endpoint", "", "S3 endpoint URL (with --storage)")
	fs.StringVar(&so.S3Region, "s3-region", "", "S3 region (with --storage)")
	fs.BoolVar(&so.S3PathStyle, "s3-path-style", false, "address buckets by path (MinIO; with --storage)")
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
	out, noElector, err := deregisterWithElector(ctx, &c, node, *force)
	if err != nil && noElector && *storage != "" {
		fmt.Fprintf(stdout, "no Elector answered (%v)\n", err)
		out, err = deregisterInBucket(ctx, c, node, *force, *storage, so, stdout)
	}
	if err != nil {
		return fmt.Errorf("deregister %s: %w", node, err)
	}
	if c.output == "json" {
		return writeJSON(stdout, out)
	}
	switch {
	case out.Elector != nil:
		fmt.Fprintf(stdout, "deregistered %s (Elector %s at %s)\n", node, out.Elector.NodeID, out.Elector.PeerAddr)
	default:
		fmt.Fprintf(stdout, "deregistered %s (deleted %s from %s; its member id stays in %s)\n", node, discovery.NodeKey(node), out.Storage, discovery.MembersKey)
	}
	if out.Forced {
		_, err = fmt.Fprintf(stdout, "forced: %s\n", out.Warning)
	}
	return err
}

// deregisterWithElector asks the Elector to remove node. noElector reports
// that no Elector could be reached at all (nothing answered, or no node
// knows one), as opposed to an Elector that answered and refused.
func deregisterWithElector(ctx context.Context, c *common, node string, force bool) (out deregistered, noElector bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	p, err := c.peers(ctx)
	if err != nil {
		return out, true, err
	}
	defer p.close()
	a, err := p.anyNode(ctx)
	if err != nil {
		return out, true, err
	}
	// The Elector decides whether a node may go; netsyctl reports what it
	// answered.
	var resp *netsyv1.DeregisterNodeResponse
	var raw error
	el, err := p.withElector(ctx, a, func(ctx context.Context, ec netsyv1.ElectorClient) error {
		resp, raw = ec.DeregisterNode(ctx, &netsyv1.DeregisterNodeRequest{NodeId: node, Force: force})
		return raw
	})
	if err != nil {
		switch {
		case errors.Is(err, errNoElector):
			return out, true, err
		case peer.ReasonOf(raw) == peer.ReasonUnknownNode:
			return out, false, fmt.Errorf("node %s is not registered with the Elector (%s); netsyctl members lists the registered nodes", node, el.GetNodeId())
		}
		switch status.Code(raw) {
		case codes.Unavailable, codes.DeadlineExceeded:
			return out, true, err
		case codes.FailedPrecondition:
			// Still "not the Elector" after following every lead.
			return out, peer.ReasonOf(raw) == peer.ReasonNotElector, err
		}
		return out, false, err
	}
	out = deregistered{NodeID: node, Elector: clusterview.Ref(el), Forced: resp.GetForced()}
	if out.Forced {
		out.Warning = elector.LossSummary(node, resp)
	}
	return out, false, nil
}

// deregisterInBucket deletes nodes/{node}.json itself, for a cluster with
// no Elector running. It cannot know the node's last log index (only an
// Elector heard it), so it never proves the deletion safe: it says what
// the bucket holds and deletes only with --force.
func deregisterInBucket(ctx context.Context, c common, node string, force bool, storage string, so objopen.Options, stdout io.Writer) (deregistered, error) {
	out := deregistered{NodeID: node, Storage: storage}
	if err := discovery.ValidateNodeID(node); err != nil {
		return out, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	st, err := objopen.Open(ctx, storage, so)
	if err != nil {
		return out, fmt.Errorf("--storage: %w", err)
	}
	defer st.Close()
	key := discovery.NodeKey(node)
	if _, _, err := st.Get(ctx, key); err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return out, fmt.Errorf("node %s is not registered in %s (no %s)", node, storage, key)
		}
		return out, fmt.Errorf("read %s from %s: %w", key, storage, err)
	}
	held := "object storage's durable tip could not be read"
	if tip, err := objwal.DurableTip(ctx, st); err == nil {
		held = fmt.Sprintf("object storage holds the log up to index %d", tip)
	} else {
		held += fmt.Sprintf(" (%v)", err)
	}
	warning := fmt.Sprintf("node %s's last log index is unknown without an Elector; %s; entries beyond it that %s acknowledged may be lost", node, held, node)
	if !force {
		return out, fmt.Errorf("no Elector can tell whether object storage holds every entry node %s acknowledged (%s): "+
			"start the cluster and deregister through its Elector, or delete %s from %s with --force", node, held, key, storage)
	}
	fmt.Fprintf(stdout, "deleting %s from %s directly\n", key, storage)
	if err := discovery.Deregister(ctx, st, node); err != nil {
		return out, err
	}
	out.Forced, out.Warning = true, warning
	return out, nil
}
