package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/etcdapi"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func runInspect(_ context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("inspect", stdout)
	output := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o: %q is not table or json", *output)
	}
	if fs.NArg() != 1 {
		return errors.New("usage: netsyctl inspect [-o table|json] FILE")
	}
	path := fs.Arg(0)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	// A snapshot saved by etcdctl keeps the stream's padding and digest
	// trailer; inspect the data file inside it.
	var r io.Reader = f
	if size, err := etcdapi.SnapshotDataSize(f, st.Size()); err == nil {
		r = io.NewSectionReader(f, 0, size)
	}
	info, ierr := datafile.Inspect(path, r)
	if info == nil {
		return ierr
	}
	if *output == "json" {
		if err := writeJSON(stdout, info); err != nil {
			return err
		}
	} else {
		printInfo(stdout, info)
	}
	// The valid part is shown either way; the damage is still an error.
	return ierr
}

func printInfo(w io.Writer, info *datafile.Info) {
	fmt.Fprintf(w, "file:        %s\n", info.Name)
	fmt.Fprintf(w, "kind:        %s (format v%d, compression %s)\n", info.Kind, info.Version, info.Compression)
	fmt.Fprintf(w, "valid bytes: %d\n", info.Size)
	if info.Footer != nil {
		f := info.Footer
		fmt.Fprintf(w, "sealed:      yes, %d records, index %d..%d, revision %d..%d, crc %08x\n",
			f.Records, f.FirstIndex, f.LastIndex, f.FirstRevision, f.LastRevision, f.CRC)
	} else {
		fmt.Fprintf(w, "sealed:      no (%d records)\n", len(info.Records))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if info.Kind == datafile.KindSnapshot {
		fmt.Fprintln(tw, "OFFSET\tRECORD")
		for _, r := range info.Records {
			fmt.Fprintf(tw, "%d\t%s\n", r.Offset, describeSnapshotRecord(r.Snapshot))
		}
	} else {
		fmt.Fprintln(tw, "INDEX\tREVISION\tTERM\tCONTENT")
		for _, r := range info.Records {
			e := r.Entry
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\n", e.Index, e.Revision, e.Term, describeEntry(e))
		}
	}
	tw.Flush()
}

func describeEntry(e *netsyv1.Entry) string {
	var parts []string
	for _, op := range e.Ops {
		switch op.Type {
		case netsyv1.Op_PUT:
			s := fmt.Sprintf("put %s (%d B)", strconv.Quote(string(op.Key)), len(op.Value))
			if op.Lease != 0 {
				s += fmt.Sprintf(" lease %x", op.Lease)
			}
			parts = append(parts, s)
		case netsyv1.Op_DELETE:
			parts = append(parts, "delete "+strconv.Quote(string(op.Key)))
		}
	}
	for _, g := range e.LeaseGrants {
		parts = append(parts, fmt.Sprintf("grant lease %x ttl %ds", g.Id, g.Ttl))
	}
	for _, id := range e.LeaseRevokes {
		parts = append(parts, fmt.Sprintf("revoke lease %x", id))
	}
	if e.CompactRevision > 0 {
		parts = append(parts, fmt.Sprintf("compact %d", e.CompactRevision))
	}
	return strings.Join(parts, "; ")
}

func describeSnapshotRecord(r *netsyv1.SnapshotRecord) string {
	switch v := r.Record.(type) {
	case *netsyv1.SnapshotRecord_Header:
		h := v.Header
		return fmt.Sprintf("header index %d revision %d compact %d versions %d leases %d wal seq %d",
			h.Index, h.Revision, h.CompactRevision, h.KeyVersions, h.Leases, h.WalSeq)
	case *netsyv1.SnapshotRecord_Kv:
		kv := v.Kv
		if kv.Tombstone {
			return fmt.Sprintf("tombstone %s at %d.%d", strconv.Quote(string(kv.Key)), kv.ModRevision, kv.Sub)
		}
		return fmt.Sprintf("version %s at %d.%d (create %d, version %d, %d B)",
			strconv.Quote(string(kv.Key)), kv.ModRevision, kv.Sub, kv.CreateRevision, kv.Version, len(kv.Value))
	case *netsyv1.SnapshotRecord_Lease:
		return fmt.Sprintf("lease %x ttl %ds", v.Lease.Id, v.Lease.Ttl)
	}
	return "unknown record"
}
