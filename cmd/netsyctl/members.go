package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/clusterview"
)

type memberRow struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peer_urls"`
	ClientURLs []string `json:"client_urls"`
	// The Elector's record of the member, when the Elector answered.
	Elector        bool   `json:"elector,omitempty"`
	Primary        bool   `json:"primary,omitempty"`
	Health         string `json:"health,omitempty"`
	PrimaryState   string `json:"primary_state,omitempty"`
	LatestRevision *int64 `json:"latest_revision,omitempty"`
}

func runMembers(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	fs := newFlagSet("members", stdout)
	c.bind(fs)
	c.bindPeer(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	if err := c.check(); err != nil {
		return err
	}
	cli, ctx, closeCli, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeCli()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("member list from %s: %w", c.endpoints, err)
	}
	rows := make([]memberRow, 0, len(resp.Members))
	for _, m := range resp.Members {
		rows = append(rows, memberRow{ID: clusterview.MemberID(m.ID), Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs})
	}

	// The member list is the answer; the Elector's view only adds columns.
	// It gets half the time left, so a silent peer port costs the command
	// its extra columns, never its answer.
	p := newPeers(peersOf(resp), "the member list from "+c.endpoints)
	if c.peerEndpoints != "" {
		if p, err = c.peers(ctx); err != nil {
			return err
		}
	}
	defer p.close()
	enriched := false
	if len(p.addrs) > 0 {
		ectx, cancel := context.WithTimeout(ctx, remaining(ctx)/2)
		v, fromElector, err := p.clusterState(ectx)
		cancel()
		if err == nil && fromElector {
			enriched = true
			addStatus(rows, v)
		}
	}

	if c.output == "json" {
		return writeJSON(stdout, rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if enriched {
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tHEALTH\tSTATE\tLATEST REV\tPEER URLS\tCLIENT URLS")
		for _, r := range rows {
			rev := "-"
			if r.LatestRevision != nil {
				rev = fmt.Sprint(*r.LatestRevision)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, memberRole(r), or(r.Health, "-"), or(r.PrimaryState, "-"), rev,
				strings.Join(r.PeerURLs, ","), strings.Join(r.ClientURLs, ","))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "ID\tNAME\tPEER URLS\tCLIENT URLS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Name, strings.Join(r.PeerURLs, ","), strings.Join(r.ClientURLs, ","))
	}
	return tw.Flush()
}

// addStatus copies the Elector's record of each member into its row,
// matched by member id, else by name (a member's name is its node id).
func addStatus(rows []memberRow, v clusterview.View) {
	byMember, byName := map[string]clusterview.NodeRow{}, map[string]clusterview.NodeRow{}
	for _, n := range v.Nodes {
		byMember[n.MemberID] = n
		byName[n.NodeID] = n
	}
	for i := range rows {
		n, ok := byMember[rows[i].ID]
		if !ok {
			n, ok = byName[rows[i].Name]
		}
		if !ok || n.Source == clusterview.SourceMember {
			continue
		}
		rows[i].Elector, rows[i].Primary = n.Elector, n.Primary
		rows[i].Health, rows[i].PrimaryState = n.Health, n.PrimaryState
		if n.PrimaryState != "Unknown" {
			rev := n.LatestRevision
			rows[i].LatestRevision = &rev
		}
	}
}

func memberRole(r memberRow) string {
	switch {
	case r.Elector && r.Primary:
		return "Elector,Primary"
	case r.Elector:
		return "Elector"
	case r.Primary:
		return "Primary"
	}
	return "-"
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// remaining is the time left before ctx's deadline.
func remaining(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Minute
	}
	return dl.Sub(clock.Real().Now())
}
