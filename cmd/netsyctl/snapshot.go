package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/netsy-io/netsy/internal/backup"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/etcdapi"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
)

const (
	saveUsage    = "usage: netsyctl snapshot save [--endpoints E --timeout D -o table|json] FILE"
	restoreUsage = "usage: netsyctl snapshot restore FILE --data-dir DIR [--storage URL --s3-endpoint URL --s3-region R --s3-path-style] [-o table|json]"
)

func runSnapshot(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "save":
			return runSnapshotSave(ctx, args[1:], stdout)
		case "restore":
			return runSnapshotRestore(ctx, args[1:], stdout)
		}
	}
	return errors.New(saveUsage + "\n       " + restoreUsage[len("usage: "):])
}

// savedSnapshot is what `snapshot save -o json` prints.
type savedSnapshot struct {
	Path     string `json:"path"`
	Bytes    int64  `json:"bytes"`
	Revision int64  `json:"revision"`
	Index    uint64 `json:"index"`
}

func runSnapshotSave(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	fs := newFlagSet("snapshot save", stdout)
	c.bind(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New(saveUsage)
	}
	if err := c.check(); err != nil {
		return err
	}
	path := pos[0]
	cli, ctx, closeCli, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeCli()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("start snapshot: %w", err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".snapshot-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, rc)
	if err != nil {
		tmp.Close()
		return fmt.Errorf("receive snapshot: %w", err)
	}
	// The stream carries etcd's padding and SHA-256 trailer (etcdctl
	// insists on them); the file we keep is the bare, verified data file.
	size, err := etcdapi.SnapshotDataSize(tmp, n)
	if err != nil {
		tmp.Close()
		return fmt.Errorf("check snapshot: %w", err)
	}
	if err := tmp.Truncate(size); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return err
	}
	snap, err := datafile.DecodeSnapshot(path, tmp)
	if err != nil {
		tmp.Close()
		return fmt.Errorf("verify snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	saved := savedSnapshot{Path: path, Bytes: size, Revision: snap.Header.Revision, Index: snap.Header.Index}
	if c.output == "json" {
		return writeJSON(stdout, saved)
	}
	fmt.Fprintf(stdout, "snapshot saved to %s (%d bytes, revision %d, index %d)\n", path, size, saved.Revision, saved.Index)
	return nil
}

// restoredSnapshot is what `snapshot restore -o json` prints.
type restoredSnapshot struct {
	File   string        `json:"file"`
	Format backup.Format `json:"format"`
	backup.Result
}

func runSnapshotRestore(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("snapshot restore", stdout)
	output := fs.String("o", "table", "output format: table or json")
	dataDir := fs.String("data-dir", "", "the new node's data directory: must not exist or be empty")
	storage := fs.String("storage", "", "the new node's permanent store, which must hold no wal/ or snapshots/ objects: file:///abs/path or s3://bucket[/prefix] (default file://<data-dir>/objects, as for netsy)")
	var so objopen.Options
	fs.StringVar(&so.S3Endpoint, "s3-endpoint", "", "S3 endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS)")
	fs.StringVar(&so.S3Region, "s3-region", "", "S3 region (default from the AWS environment, else us-east-1)")
	fs.BoolVar(&so.S3PathStyle, "s3-path-style", false, "address buckets by path (MinIO needs this)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New(restoreUsage)
	}
	if *dataDir == "" {
		return errors.New("--data-dir: required (the directory the restored node will run on)")
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o: %q is not table or json", *output)
	}
	file := pos[0]
	snap, format, err := backup.ReadFile(file)
	if err != nil {
		return err
	}
	res, err := backup.Restore(ctx, snap, backup.Target{DataDir: *dataDir, Storage: *storage, StoreOptions: so})
	if err != nil {
		return err
	}
	out := restoredSnapshot{File: file, Format: format, Result: res}
	if *output == "json" {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "restored %s (%s format, verified) into %s\n", file, format, res.DataDir)
	fmt.Fprintf(stdout, "storage:           %s\n", res.Storage)
	fmt.Fprintf(stdout, "revision:          %d\n", res.Revision)
	fmt.Fprintf(stdout, "compact revision:  %d\n", res.CompactRevision)
	fmt.Fprintf(stdout, "index:             %d\n", res.Index)
	fmt.Fprintf(stdout, "keys:              %d\n", res.Keys)
	fmt.Fprintf(stdout, "key versions:      %d\n", res.KeyVersions)
	fmt.Fprintf(stdout, "leases:            %d\n", res.Leases)
	fmt.Fprintf(stdout, "start the node with: netsy --data-dir %s%s\n", res.DataDir, storageFlags(*storage, so))
	return nil
}

// storageFlags repeats the storage flags a node needs to run on what
// restore wrote.
func storageFlags(storage string, so objopen.Options) string {
	if storage == "" {
		return ""
	}
	s := " --storage " + storage
	if so.S3Endpoint != "" {
		s += " --s3-endpoint " + so.S3Endpoint
	}
	if so.S3Region != "" {
		s += " --s3-region " + so.S3Region
	}
	if so.S3PathStyle {
		s += " --s3-path-style"
	}
	return s
}
