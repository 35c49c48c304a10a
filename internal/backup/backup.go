package backup

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/etcdapi"
	"github.com/netsy-io/netsy/internal/objstore"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/wal"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// Format is how a snapshot file was saved.
type Format string

const (
	// FormatNetsyctl is a bare data file, as `netsyctl snapshot save` keeps it.
	FormatNetsyctl Format = "netsyctl"
	// FormatEtcdctl is the data file followed by etcd's zero padding and
	// SHA-256 trailer, as `etcdctl snapshot save` keeps it.
	FormatEtcdctl Format = "etcdctl"
)

var (
	// ErrEtcdSnapshot means the file is a snapshot of etcd's own database.
	ErrEtcdSnapshot = errors.New("importing a snapshot of etcd's own database (bbolt) is not supported: " +
		"netsy restores only snapshots saved from a netsy node (netsyctl snapshot save, or etcdctl snapshot save against netsy)")
	// ErrNotEmpty means the data directory or the store of a restore
	// already holds something.
	ErrNotEmpty = errors.New("restore target is not empty")
)

// boltMagic is what bbolt writes at offset 16 of its first (meta) page.
const boltMagic = 0xED0CDAED

func isBolt(head []byte) bool {
	if len(head) < 20 {
		return false
	}
	return binary.LittleEndian.Uint32(head[16:20]) == boltMagic || binary.BigEndian.Uint32(head[16:20]) == boltMagic
}

// ReadFile reads and verifies the snapshot saved at path.
func ReadFile(path string) (*datafile.Snapshot, Format, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	var head [20]byte
	n, err := io.ReadFull(f, head[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, "", fmt.Errorf("read %s: %w", path, err)
	}
	if isBolt(head[:n]) {
		return nil, "", fmt.Errorf("%s is a snapshot of etcd's own database: %w", path, ErrEtcdSnapshot)
	}
	size, format := st.Size(), FormatEtcdctl
	dataSize, terr := etcdapi.SnapshotDataSize(f, size)
	if terr != nil {
		dataSize, format = size, FormatNetsyctl
	}
	snap, derr := datafile.DecodeSnapshot(path, bufio.NewReaderSize(io.NewSectionReader(f, 0, dataSize), 256<<10))
	switch {
	case derr == nil:
		return snap, format, nil
	case errors.Is(terr, etcdapi.ErrSnapshotDigest):
		// A trailer was there and its hash does not match.
		return nil, "", fmt.Errorf("%s: integrity check failed: %w", path, terr)
	default:
		return nil, "", fmt.Errorf("integrity check failed: %w", derr)
	}
}

// Target is where Restore puts a snapshot.
type Target struct {
	// DataDir is the new node's --data-dir; it must not exist or be empty.
	DataDir string
	// Storage is the new node's --storage URL; empty means
	// file://<DataDir>/objects, netsy's default.
	Storage      string
	StoreOptions objopen.Options
	// Store, when set, is used instead of opening Storage (which then
	// only names it); the caller closes it.
	Store  objstore.Store
	Logger hclog.Logger
	Clock  clock.Clock
}

// Result describes a snapshot, and where Restore put it.
type Result struct {
	DataDir         string `json:"data_dir,omitempty"`
	Storage         string `json:"storage,omitempty"`
	Revision        int64  `json:"revision"`
	CompactRevision int64  `json:"compact_revision"`
	Index           uint64 `json:"index"`
	// Keys counts the keys live at Revision; KeyVersions every version
	// the snapshot holds (history above the compaction floor, deletions).
	Keys        int `json:"keys"`
	KeyVersions int `json:"key_versions"`
	Leases      int `json:"leases"`
}

// Summarize describes snap.
func Summarize(snap *datafile.Snapshot) Result {
	live := map[string]bool{}
	for _, kv := range snap.KVs {
		// KVs are in (mod_revision, sub) order: the last version wins.
		live[string(kv.Key)] = !kv.Tombstone
	}
	keys := 0
	for _, l := range live {
		if l {
			keys++
		}
	}
	h := snap.Header
	return Result{Revision: h.Revision, CompactRevision: h.CompactRevision, Index: h.Index,
		Keys: keys, KeyVersions: len(snap.KVs), Leases: len(snap.Leases)}
}

// Restore puts snap into an empty data directory and an empty store.
func Restore(ctx context.Context, snap *datafile.Snapshot, t Target) (_ Result, err error) {
	if snap == nil || snap.Header == nil {
		return Result{}, errors.New("restore: no snapshot")
	}
	if snap.Header.Index == 0 {
		return Result{}, errors.New("restore: the snapshot is of an empty store (index 0); start netsy on an empty data directory instead")
	}
	if t.DataDir == "" {
		return Result{}, errors.New("restore: --data-dir is required")
	}
	if t.Logger == nil {
		t.Logger = hclog.NewNullLogger()
	}
	if t.Clock == nil {
		t.Clock = clock.Real()
	}
	cfg := config.Default()
	cfg.DataDir, cfg.Storage = t.DataDir, t.Storage
	storageURL, err := cfg.StorageURL()
	if err != nil {
		return Result{}, err
	}
	res := Summarize(snap)
	res.DataDir, res.Storage = t.DataDir, storageURL

	created, err := claimDir(t.DataDir)
	if err != nil {
		return Result{}, err
	}
	lock, err := lockDir(t.DataDir)
	if err != nil {
		return Result{}, err
	}
	seeding := false
	defer func() {
		lock.Close()
		if err == nil {
			return
		}
		// Leave the target as it was found: everything in the directory
		// is ours, since it was empty and we held its lock.
		if created {
			os.RemoveAll(t.DataDir)
		} else if ents, rerr := os.ReadDir(t.DataDir); rerr == nil {
			for _, e := range ents {
				os.RemoveAll(filepath.Join(t.DataDir, e.Name()))
			}
		}
		if seeding && !strings.HasPrefix(storageURL, "file://"+filepath.Clean(absOr(t.DataDir))+"/") {
			err = fmt.Errorf("%w (the storage %s may hold part of this restore: delete its wal/ and snapshots/ objects before trying again)", err, storageURL)
		}
	}()

	store := t.Store
	if store == nil {
		if store, err = openStore(ctx, storageURL, t.StoreOptions); err != nil {
			return Result{}, fmt.Errorf("--storage: %w", err)
		}
		defer store.Close()
	}
	if err := checkEmptyStore(ctx, store, storageURL); err != nil {
		return Result{}, err
	}

	seeding = true
	walDir := filepath.Join(t.DataDir, "wal")
	if err := saveLocal(walDir, snap, t); err != nil {
		return Result{}, err
	}
	l, err := objwal.Open(ctx, objwal.Options{
		Store:  store,
		WALDir: walDir,
		Mode:   objwal.ModeSync,
		Clock:  t.Clock,
		Logger: t.Logger.Named("objwal"),
	})
	if err != nil {
		return Result{}, fmt.Errorf("seed storage %s: %w", storageURL, err)
	}
	if err := l.Close(); err != nil {
		return Result{}, fmt.Errorf("seed storage %s: %w", storageURL, err)
	}
	// The bucket must now start from this snapshot, or a node would
	// restore something else from it.
	got, err := store.List(ctx, "snapshots/", "", 0)
	if err != nil {
		return Result{}, fmt.Errorf("check the seeded storage %s: %w", storageURL, err)
	}
	if want := fmt.Sprintf("snapshots/%020d", snap.Header.Revision); len(got) != 1 || got[0].Key != want {
		return Result{}, fmt.Errorf("the seeded storage %s holds %d snapshots, want exactly %s", storageURL, len(got), want)
	}
	return res, nil
}

func openStore(ctx context.Context, url string, o objopen.Options) (objstore.Store, error) {
	return objopen.Open(ctx, url, o)
}

func absOr(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// claimDir makes sure dir does not exist or is empty, and creates it.
func claimDir(dir string) (created bool, err error) {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("create data directory: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("data directory %s: %w", dir, err)
	case len(ents) > 0:
		names := make([]string, 0, 3)
		for _, e := range ents[:min(3, len(ents))] {
			names = append(names, e.Name())
		}
		more := ""
		if len(ents) > 3 {
			more = ", ..."
		}
		return false, fmt.Errorf("data directory %s holds %s%s: %w; restore into a new or empty directory", dir, strings.Join(names, ", "), more, ErrNotEmpty)
	}
	return false, nil
}

// lockDir takes the data directory's LOCK the way a netsy node does.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by a netsy process: %w", dir, err)
	}
	return f, nil
}

// checkEmptyStore refuses a store that holds a log already.
func checkEmptyStore(ctx context.Context, store objstore.Store, url string) error {
	for _, prefix := range []string{"wal/", "snapshots/"} {
		objs, err := store.List(ctx, prefix, "", 1)
		if err != nil {
			return fmt.Errorf("check that storage %s is empty: %w", url, err)
		}
		if len(objs) > 0 {
			return fmt.Errorf("storage %s already holds %s objects (%s): %w; restore into an empty bucket, or a new prefix (s3://bucket/new-prefix)",
				url, prefix, objs[0].Key, ErrNotEmpty)
		}
	}
	return nil
}

// saveLocal makes snap the local log's snapshot. Its wal_seq is 0: it
// covers no chunk of the new bucket.
func saveLocal(walDir string, snap *datafile.Snapshot, t Target) error {
	h := proto.Clone(snap.Header).(*netsyv1.SnapshotHeader)
	h.WalSeq = 0
	w, err := wal.Open(wal.Options{Dir: walDir, Logger: t.Logger.Named("wal"), Clock: t.Clock})
	if err != nil {
		return err
	}
	err = w.SaveSnapshot(&datafile.Snapshot{Header: h, KVs: snap.KVs, Leases: snap.Leases})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save the snapshot in %s: %w", walDir, err)
	}
	return nil
}
