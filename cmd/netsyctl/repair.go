package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/netsy-io/netsy/internal/node"
	"github.com/netsy-io/netsy/internal/wal"
)

const repairUsage = "usage: netsyctl repair [-o table|json] DATA_DIR"

// repairResult is what `repair -o json` prints.
type repairResult struct {
	DataDir string `json:"data_dir"`
	// Intact is true when there was nothing to cut.
	Intact bool `json:"intact"`
	// Path and Offset say where the log was cut; Reason why.
	Path   string `json:"path,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	Reason string `json:"reason,omitempty"`
	// KeptTo is the last entry kept before the damage.
	KeptTo uint64 `json:"kept_to_index"`
	// Dropped are the dropped entries that could still be read; Missing
	// the index ranges between them (and after KeptTo) that could not.
	Dropped []runJSON   `json:"dropped,omitempty"`
	Missing []indexSpan `json:"missing,omitempty"`
	// UnreadBytes could not be read at all.
	UnreadBytes     int64    `json:"unread_bytes,omitempty"`
	RemovedSegments []string `json:"removed_segments,omitempty"`
	// SnapshotIndex is the newest local snapshot: dropped entries at or
	// below it are covered by it.
	SnapshotIndex uint64 `json:"snapshot_index,omitempty"`
	// TornPath and TornOffset describe a torn tail cut off as every start
	// does (never acknowledged).
	TornPath   string `json:"torn_path,omitempty"`
	TornOffset int64  `json:"torn_offset,omitempty"`
	// First and Last are the entries the log holds now.
	First uint64 `json:"first_index"`
	Last  uint64 `json:"last_index"`
}

type runJSON struct {
	FirstIndex    uint64 `json:"first_index"`
	LastIndex     uint64 `json:"last_index"`
	FirstRevision int64  `json:"first_revision"`
	LastRevision  int64  `json:"last_revision"`
}

type indexSpan struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

func runRepair(_ context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("repair", stdout)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nCuts the local log of a stopped node at its first damaged record, with everything after it,\n"+
			"and prints the revisions it dropped. Run it when netsy refuses to start because of a damaged log.\n\nFlags:\n", repairUsage)
		fs.PrintDefaults()
	}
	output := fs.String("o", "table", "output format: table or json")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New(repairUsage)
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o: %q is not table or json", *output)
	}
	dataDir := pos[0]
	rep, err := node.RepairLog(dataDir)
	if err != nil {
		return err
	}
	res := repairSummary(dataDir, rep)
	if *output == "json" {
		return writeJSON(stdout, res)
	}
	printRepair(stdout, res)
	return nil
}

func repairSummary(dataDir string, rep *wal.Report) repairResult {
	res := repairResult{DataDir: dataDir, Intact: rep.Cut == nil && rep.Torn == nil, First: rep.First, Last: rep.Last, KeptTo: rep.Last}
	if t := rep.Torn; t != nil {
		res.TornPath, res.TornOffset = t.Path, t.Offset
	}
	c := rep.Cut
	if c == nil {
		return res
	}
	d := c.Damage
	res.Path, res.Offset, res.Reason, res.KeptTo = d.Path, d.Offset, d.Reason, d.After
	res.RemovedSegments, res.SnapshotIndex, res.UnreadBytes = c.Removed, c.Snapshot, c.UnreadBytes()
	next := d.After + 1
	for _, r := range c.Dropped {
		if r.FirstIndex > next {
			res.Missing = append(res.Missing, indexSpan{From: next, To: r.FirstIndex - 1})
		}
		res.Dropped = append(res.Dropped, runJSON{FirstIndex: r.FirstIndex, LastIndex: r.LastIndex, FirstRevision: r.FirstRevision, LastRevision: r.LastRevision})
		next = max(next, r.LastIndex+1)
	}
	return res
}

func printRepair(w io.Writer, r repairResult) {
	if r.Intact {
		fmt.Fprintf(w, "the local log in %s is intact (entries %d-%d): nothing to repair\n", r.DataDir, r.First, r.Last)
		return
	}
	if r.TornPath != "" {
		fmt.Fprintf(w, "cut a torn record off the end of %s at offset %d (never acknowledged: a write is acknowledged only once its record is fsync'd whole)\n",
			r.TornPath, r.TornOffset)
	}
	if r.Path == "" {
		fmt.Fprintf(w, "the local log now holds entries %d-%d\n", r.First, r.Last)
		return
	}
	fmt.Fprintf(w, "cut the local log at offset %d of %s\n", r.Offset, r.Path)
	fmt.Fprintf(w, "damage:             %s\n", r.Reason)
	fmt.Fprintf(w, "kept:               entries up to index %d\n", r.KeptTo)
	for _, p := range r.RemovedSegments {
		fmt.Fprintf(w, "removed segment:    %s\n", p)
	}
	if len(r.Dropped) == 0 {
		fmt.Fprintln(w, "dropped revisions:  none could be read after the damage")
	}
	for i, d := range r.Dropped {
		label := "dropped revisions: "
		if i > 0 {
			label = "                   "
		}
		fmt.Fprintf(w, "%s %s (index %s)\n", label, span(d.FirstRevision, d.LastRevision), span(d.FirstIndex, d.LastIndex))
	}
	for _, m := range r.Missing {
		fmt.Fprintf(w, "unreadable:         index %s (its records are damaged: their revisions cannot be told)\n", span(m.From, m.To))
	}
	if r.UnreadBytes > 0 {
		fmt.Fprintf(w, "unreadable bytes:   %d after the damage held no record that could be read\n", r.UnreadBytes)
	}
	if r.SnapshotIndex > 0 && r.SnapshotIndex > r.KeptTo {
		fmt.Fprintf(w, "local snapshot:     index %d covers the dropped entries up to it: they are not lost\n", r.SnapshotIndex)
	}
	fmt.Fprintf(w, "next: start the node on %s as before. It fetches back from object storage every dropped entry the\n"+
		"bucket holds, and its log says how far (\"caught up with object storage\", index=...). Dropped revisions\n"+
		"beyond that were acknowledged on this node only and are lost: have their writers write them again.\n", r.DataDir)
}

// span prints a range of numbers, a single one as itself.
func span[T int64 | uint64](a, b T) string {
	if a == b {
		return fmt.Sprint(a)
	}
	return fmt.Sprintf("%d-%d", a, b)
}
