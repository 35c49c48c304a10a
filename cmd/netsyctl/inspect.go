package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/etcdapi"
	fsstore "github.com/netsy-io/netsy/internal/objstore/fs"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

const inspectUsage = "usage: netsyctl inspect [-o table|json] FILE\n       netsyctl inspect --storage URL [--s3-endpoint URL --s3-region R --s3-path-style] [-o table|json] OBJECT-KEY"

func runInspect(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("inspect", stdout)
	output := fs.String("o", "table", "output format: table or json")
	storage := fs.String("storage", "", "read OBJECT-KEY from this store (file:///abs/path or s3://bucket[/prefix]) instead of a local FILE")
	var so objopen.Options
	fs.StringVar(&so.S3Endpoint, "s3-endpoint", "", "S3 endpoint URL")
	fs.StringVar(&so.S3Region, "s3-region", "", "S3 region")
	fs.BoolVar(&so.S3PathStyle, "s3-path-style", false, "address buckets by path (MinIO)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o: %q is not table or json", *output)
	}
	if len(pos) != 1 {
		return errors.New(inspectUsage)
	}
	name := pos[0]
	data, err := readDataFile(ctx, name, *storage, so)
	if err != nil {
		return err
	}
	// A snapshot saved by etcdctl keeps the stream's padding and digest
	// trailer; inspect the data file inside it.
	var r io.Reader = bytes.NewReader(data)
	if size, err := etcdapi.SnapshotDataSize(bytes.NewReader(data), int64(len(data))); err == nil {
		r = bytes.NewReader(data[:size])
	}
	info, ierr := datafile.Inspect(name, r)
	if info == nil {
		if *storage == "" && errors.Is(ierr, datafile.ErrCorrupt) {
			return fmt.Errorf("%w (to read an object from a bucket, name it by key: netsyctl inspect --storage URL KEY)", ierr)
		}
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

// readDataFile reads a local file, or an object when storage is set. A
// local file may be an object file of the file store
// (<root>/objects/wal.dir/NNN.obj): its body is the data file.
func readDataFile(ctx context.Context, name, storage string, so objopen.Options) ([]byte, error) {
	if storage == "" {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		body, isObject, err := fsstore.ObjectBody(data)
		switch {
		case !isObject:
			return data, nil
		case err != nil:
			return nil, fmt.Errorf("%s: file-store object: %w", name, err)
		}
		return body, nil
	}
	st, err := objopen.Open(ctx, storage, so)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	data, _, err := st.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("get %s from %s: %w", name, storage, err)
	}
	return data, nil
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
	if a := e.Alarm; a != nil {
		verb := "clear"
		if a.Activate {
			verb = "activate"
		}
		parts = append(parts, fmt.Sprintf("alarm %s %s member %x", verb, pb.AlarmType(a.Type), a.MemberId))
	}
	if n := len(e.LeaseCheckpoints); n > 0 {
		parts = append(parts, fmt.Sprintf("checkpoint %d leases", n))
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
