package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/etcdapi"
)

func runSnapshot(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "save" {
		return errors.New("usage: netsyctl snapshot save [flags] FILE")
	}
	var c common
	fs := newFlagSet("snapshot save", stdout)
	c.bind(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: netsyctl snapshot save [flags] FILE")
	}
	path := fs.Arg(0)
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
	if _, err := datafile.DecodeSnapshot(path, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("verify snapshot: %w", err)
	}
	n = size
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
	fmt.Fprintf(stdout, "snapshot saved to %s (%d bytes)\n", path, n)
	return nil
}
