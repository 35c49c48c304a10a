package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

type memberRow struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peer_urls"`
	ClientURLs []string `json:"client_urls"`
}

func runMembers(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	fs := newFlagSet("members", stdout)
	c.bind(fs)
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
		rows = append(rows, memberRow{ID: fmt.Sprintf("%x", m.ID), Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs})
	}
	if c.output == "json" {
		return writeJSON(stdout, rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPEER URLS\tCLIENT URLS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Name, strings.Join(r.PeerURLs, ","), strings.Join(r.ClientURLs, ","))
	}
	return tw.Flush()
}
