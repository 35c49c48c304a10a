package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/netsy-io/netsy/internal/backup"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
)

const branchUsage = `usage: netsyctl branch --from URL (--revision R | --time T) --to URL [--s3-endpoint URL --s3-region R --s3-path-style] [-o table|json]
       netsyctl branch list --from URL
       netsyctl branch delete --from URL --branch ID`

// s3Flags adds the S3 flags every storage command takes, as netsy does.
func s3Flags(fs *flag.FlagSet, so *objopen.Options) {
	fs.StringVar(&so.S3Endpoint, "s3-endpoint", "", "S3 endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS); credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, as for netsy")
	fs.StringVar(&so.S3Region, "s3-region", "", "S3 region (default from the AWS environment, else us-east-1)")
	fs.BoolVar(&so.S3PathStyle, "s3-path-style", false, "address buckets by path (MinIO needs this)")
}

// runBranch makes, lists or deletes branches: new databases that start
// from a revision of a bucket and share its objects instead of copying
// them.
func runBranch(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "delete":
			return runBranchDelete(ctx, args[1:], stdout)
		case "list":
			return runBranchList(ctx, args[1:], stdout)
		}
	}
	fs := newFlagSet("branch", stdout)
	output := fs.String("o", "table", "output format: table or json")
	from := fs.String("from", "", "the parent bucket (or prefix), as netsy's --storage; only its pin branches/ID.json is written there")
	to := fs.String("to", "", "the branch's --storage: a new, empty bucket or prefix")
	rev := fs.Int64("revision", 0, "the revision the branch starts from (as etcdctl get --rev shows it)")
	at := fs.String("time", "", "instead of --revision: the last revision committed at or before this time (RFC 3339, e.g. 2026-01-02T14:02:00Z)")
	var so objopen.Options
	s3Flags(fs, &so)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return errors.New(branchUsage)
	case *from == "" || *to == "":
		return errors.New("--from and --to: required\n" + branchUsage)
	case (*rev > 0) == (*at != ""):
		return errors.New("give one of --revision (positive) and --time\n" + branchUsage)
	case *output != "table" && *output != "json":
		return fmt.Errorf("-o: %q is not table or json", *output)
	case *from == *to:
		return errors.New("--to: must differ from --from (branch into a new bucket or prefix)")
	}
	parent, err := objopen.Open(ctx, *from, so)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer parent.Close()
	if *at != "" {
		t, err := parseBranchTime(*at)
		if err != nil {
			return err
		}
		p, err := objwal.RevisionAt(ctx, parent, t)
		if err != nil {
			return fmt.Errorf("--time %s: %w", *at, err)
		}
		*rev = p.Revision
	}
	child, err := objopen.Open(ctx, *to, so)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	defer child.Close()
	res, err := backup.CreateBranch(ctx, backup.Branching{From: parent, FromURL: *from, To: child, ToURL: *to, Revision: *rev})
	if err != nil {
		return err
	}
	if *output == "json" {
		return writeJSON(stdout, res)
	}
	verb := "created"
	if res.Resumed {
		verb = "finished"
	}
	fmt.Fprintf(stdout, "%s branch %s of %s at revision %d in %s\n", verb, res.ID, *from, res.Revision, *to)
	if res.Snapshot != "" {
		fmt.Fprintf(stdout, "starts from:       %s", res.Snapshot)
	} else {
		fmt.Fprintf(stdout, "starts from:       the start of the log")
	}
	if res.FirstSeq > 0 {
		fmt.Fprintf(stdout, " and chunks %d..%d", res.FirstSeq, res.LastSeq)
	}
	fmt.Fprintf(stdout, " of the parent (pinned until the branch's first node holds its own snapshot)\n")
	fmt.Fprintf(stdout, "start its first node alone with: netsy --data-dir NEW_DIR%s\n", storageFlags(*to, so))
	fmt.Fprintf(stdout, "drop it before it started with:  netsyctl branch delete --from %s --branch %s\n", *from, res.ID)
	return nil
}

func runBranchList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("branch list", stdout)
	output := fs.String("o", "table", "output format: table or json")
	from := fs.String("from", "", "the parent bucket (or prefix)")
	var so objopen.Options
	s3Flags(fs, &so)
	if pos, err := parseArgs(fs, args); err != nil {
		return err
	} else if len(pos) > 0 || *from == "" {
		return errors.New(branchUsage)
	}
	parent, err := objopen.Open(ctx, *from, so)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer parent.Close()
	pins, err := backup.ListBranches(ctx, parent)
	if err != nil {
		return err
	}
	if *output == "json" {
		return writeJSON(stdout, pins)
	}
	if len(pins) == 0 {
		fmt.Fprintf(stdout, "%s pins no objects for a branch\n", *from)
	}
	for _, p := range pins {
		fmt.Fprintf(stdout, "%s  revision %d  %s  pins %s, chunks %d..%d  (created %s)\n", p.ID, p.Revision, p.Child, p.Snapshot, p.FirstSeq, p.LastSeq, p.CreatedAt)
	}
	return nil
}

func runBranchDelete(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("branch delete", stdout)
	from := fs.String("from", "", "the parent bucket (or prefix)")
	id := fs.String("branch", "", "the branch id (netsyctl branch list --from URL shows them)")
	var so objopen.Options
	s3Flags(fs, &so)
	if pos, err := parseArgs(fs, args); err != nil {
		return err
	} else if len(pos) > 0 || *from == "" || *id == "" {
		return errors.New(branchUsage)
	}
	parent, err := objopen.Open(ctx, *from, so)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer parent.Close()
	deleted, err := backup.DeleteBranch(ctx, parent, *from, *id)
	if err != nil {
		return err
	}
	if !deleted {
		fmt.Fprintf(stdout, "%s holds no pin for branch %s (released already)\n", *from, *id)
		return nil
	}
	fmt.Fprintf(stdout, "deleted the pin of branch %s from %s: its objects go at the parent's next GC; a branch that had not started can no longer start\n", *id, *from)
	return nil
}

// parseBranchTime reads --time: RFC 3339, with or without fractions.
func parseBranchTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--time %q: not an RFC 3339 time (2026-01-02T14:02:00Z)", s)
	}
	return t, nil
}
