package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/netsy-io/netsy/internal/backup"
	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
)

const pitrUsage = "usage: netsyctl restore --from URL (--revision R | --time T) --to URL --data-dir DIR [--s3-endpoint URL --s3-region R --s3-path-style] [-o table|json]"

// progressOut is where a restore's progress goes, and isTerminal says
// whether to draw it there: only a person watching a terminal wants it,
// never a script reading the output.
var (
	progressOut io.Writer = os.Stderr
	isTerminal            = func(w io.Writer) bool {
		f, ok := w.(*os.File)
		if !ok {
			return false
		}
		st, err := f.Stat()
		return err == nil && st.Mode()&os.ModeCharDevice != 0
	}
)

// runRestore restores a bucket's state at a revision into a new data
// directory and an empty bucket prefix, without a running cluster.
func runRestore(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("restore", stdout)
	output := fs.String("o", "table", "output format: table or json (json prints one result object and no progress)")
	from := fs.String("from", "", "the bucket (or prefix) to restore from, as netsy's --storage: file:///abs/path or s3://bucket[/prefix]; only read")
	to := fs.String("to", "", "the restored node's --storage: a new, empty bucket or prefix (s3://bucket/new-prefix)")
	dataDir := fs.String("data-dir", "", "the restored node's data directory: must not exist or be empty")
	rev := fs.Int64("revision", 0, "the revision to restore (as etcdctl get --rev shows it)")
	at := fs.String("time", "", "instead of --revision, restore the last revision committed at or before this RFC 3339 time (2026-01-02T15:04:05Z, or as date --rfc-3339=seconds prints it)")
	var so objopen.Options
	fs.StringVar(&so.S3Endpoint, "s3-endpoint", "", "S3 endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS); credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, as for netsy")
	fs.StringVar(&so.S3Region, "s3-region", "", "S3 region (default from the AWS environment, else us-east-1)")
	fs.BoolVar(&so.S3PathStyle, "s3-path-style", false, "address buckets by path (MinIO needs this)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return errors.New(pitrUsage)
	case *from == "":
		return errors.New("--from: required (the bucket to restore from)\n" + pitrUsage)
	case *to == "":
		return errors.New("--to: required (a new, empty bucket or prefix for the restored node)\n" + pitrUsage)
	case *dataDir == "":
		return errors.New("--data-dir: required (the directory the restored node will run on)\n" + pitrUsage)
	case *rev != 0 && *at != "":
		return errors.New("--revision and --time: give one, not both\n" + pitrUsage)
	case *rev <= 0 && *at == "":
		return errors.New("--revision or --time: required, a positive revision or a time\n" + pitrUsage)
	case *output != "table" && *output != "json":
		return fmt.Errorf("-o: %q is not table or json", *output)
	case *from == *to:
		return errors.New("--to: must differ from --from (restore into a new bucket or prefix)")
	}
	src, err := objopen.Open(ctx, *from, so)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer src.Close()
	var asked time.Time
	var point objwal.Point
	if *at != "" {
		if asked, err = config.ParseTime(*at); err != nil {
			return fmt.Errorf("--time: %w", err)
		}
		if point, err = backup.RevisionAtTime(ctx, src, asked, clock.Real().Wall()); err != nil {
			return fmt.Errorf("--time: %w", err)
		}
		*rev = point.Revision
	}
	p := backup.PointInTime{From: src, FromURL: *from, Revision: *rev,
		Target: backup.Target{DataDir: *dataDir, Storage: *to, StoreOptions: so}}
	if *output == "table" && isTerminal(progressOut) {
		p.Progress = progressPrinter(progressOut)
	}
	res, err := backup.RestoreAt(ctx, p)
	if err != nil {
		return err
	}
	if *output == "json" {
		if asked.IsZero() {
			return writeJSON(stdout, res)
		}
		return writeJSON(stdout, struct {
			backup.PointInTimeResult
			Time          time.Time `json:"time"`
			CommittedTime time.Time `json:"revision_time"`
		}{res, asked.UTC(), point.Time.UTC()})
	}
	for _, k := range res.Cleaned {
		fmt.Fprintf(stdout, "removed %s, left in %s by an interrupted restore\n", k, *to)
	}
	fmt.Fprintf(stdout, "restored %s at revision %d into %s\n", *from, res.Revision, res.DataDir)
	if !asked.IsZero() {
		fmt.Fprintf(stdout, "time:              %s is revision %d, committed %s\n",
			asked.UTC().Format(time.RFC3339Nano), point.Revision, point.Time.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(stdout, "storage:           %s\n", res.Storage)
	fmt.Fprintf(stdout, "window:            %s (revisions %s could restore)\n", res.Window, *from)
	fmt.Fprintf(stdout, "from snapshot:     %d, then %d entries replayed\n", res.BaseRevision, res.Replayed)
	fmt.Fprintf(stdout, "compact revision:  %d\n", res.CompactRevision)
	fmt.Fprintf(stdout, "index:             %d\n", res.Index)
	fmt.Fprintf(stdout, "keys:              %d\n", res.Keys)
	fmt.Fprintf(stdout, "key versions:      %d\n", res.KeyVersions)
	fmt.Fprintf(stdout, "leases:            %d\n", res.Leases)
	fmt.Fprintf(stdout, "start the node with: netsy --data-dir %s%s\n", res.DataDir, storageFlags(*to, so))
	return nil
}

// progressPrinter redraws one status line on w at most a few times a
// second, and ends it when the replay is done.
func progressPrinter(w io.Writer) func(backup.Progress) {
	var last time.Duration
	shown := false
	return func(p backup.Progress) {
		if !p.Done && shown && p.Elapsed-last < 200*time.Millisecond {
			return
		}
		last, shown = p.Elapsed, true
		fmt.Fprintf(w, "\r%s\x1b[K", progressLine(p))
		if p.Done {
			fmt.Fprintln(w)
		}
	}
}

// progressLine describes p: entries replayed, the revision reached of the
// one asked for, the rate and, from the revisions left, the time left.
func progressLine(p backup.Progress) string {
	s := fmt.Sprintf("replayed %d entries, revision %d of %d", p.Entries, p.Revision, p.To)
	if span := p.To - p.From; span > 0 {
		s += fmt.Sprintf(" (%d%%)", 100*(p.Revision-p.From)/span)
	}
	secs := p.Elapsed.Seconds()
	if secs <= 0 {
		return s
	}
	s += fmt.Sprintf(", %.0f entries/s", float64(p.Entries)/secs)
	if done := p.Revision - p.From; !p.Done && done > 0 {
		left := time.Duration(float64(p.Elapsed) * float64(p.To-p.Revision) / float64(done))
		s += fmt.Sprintf(", %s left", left.Round(time.Second))
	} else if p.Done {
		s += fmt.Sprintf(", done in %s", p.Elapsed.Round(time.Millisecond))
	}
	return s
}
