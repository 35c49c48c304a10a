package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	fsstore "github.com/netsy-io/netsy/internal/objstore/fs"
	"github.com/netsy-io/netsy/internal/objwal"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// testSnapshot is a small store: a key overwritten, a key deleted, a key
// with a lease, and a compaction floor.
func testSnapshot() *datafile.Snapshot {
	return &datafile.Snapshot{
		Header: &netsyv1.SnapshotHeader{Index: 9, Revision: 6, CompactRevision: 2, WalSeq: 4},
		KVs: []*netsyv1.KeyVersion{
			{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1},
			{Key: []byte("b"), Value: []byte("x"), CreateRevision: 3, ModRevision: 3, Version: 1},
			{Key: []byte("a"), Value: []byte("2"), CreateRevision: 2, ModRevision: 4, Version: 2},
			{Key: []byte("b"), CreateRevision: 3, ModRevision: 5, Tombstone: true},
			{Key: []byte("c"), Value: []byte("leased"), CreateRevision: 6, ModRevision: 6, Version: 1, Lease: 0x77},
		},
		Leases: []*netsyv1.SnapshotLease{{Id: 0x77, Ttl: 60}},
	}
}

func encode(t *testing.T, s *datafile.Snapshot) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := datafile.EncodeSnapshot(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// frame adds what etcdctl keeps of the Snapshot stream: zero padding to
// a multiple of 512 bytes and the SHA-256 of everything before it.
func frame(data []byte) []byte {
	out := append([]byte(nil), data...)
	if r := len(out) % 512; r != 0 {
		out = append(out, make([]byte, 512-r)...)
	}
	sum := sha256.Sum256(out)
	return append(out, sum[:]...)
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadFile(t *testing.T) {
	data := encode(t, testSnapshot())
	for _, tc := range []struct {
		name   string
		file   []byte
		format Format
	}{
		{"netsyctl", data, FormatNetsyctl},
		{"etcdctl", frame(data), FormatEtcdctl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, format, err := ReadFile(writeFile(t, tc.file))
			if err != nil || format != tc.format {
				t.Fatalf("ReadFile = %v, %v; want format %s", format, err, tc.format)
			}
			if h := snap.Header; h.Index != 9 || h.Revision != 6 || h.CompactRevision != 2 || h.WalSeq != 4 || len(snap.KVs) != 5 {
				t.Fatalf("header %v, %d versions", h, len(snap.KVs))
			}
			if got := Summarize(snap); got.Keys != 2 || got.KeyVersions != 5 || got.Leases != 1 || got.Revision != 6 || got.Index != 9 || got.CompactRevision != 2 {
				t.Fatalf("Summarize = %+v", got)
			}
			// Any flipped byte fails the integrity check.
			for _, off := range []int{0, len(tc.file) / 3, len(tc.file) / 2, len(tc.file) - 1} {
				bad := append([]byte(nil), tc.file...)
				bad[off] ^= 0x40
				path := writeFile(t, bad)
				if _, _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "integrity check failed") || !strings.Contains(err.Error(), path) {
					t.Errorf("byte %d flipped: ReadFile = %v, want an integrity error naming the file", off, err)
				}
			}
		})
	}
}

func TestReadFileRecognisesEtcd(t *testing.T) {
	// The first page of a bbolt file: page header, then the meta magic.
	page := make([]byte, 4096)
	binary.LittleEndian.PutUint16(page[8:10], 0x04) // meta page
	binary.LittleEndian.PutUint32(page[16:20], 0xED0CDAED)
	binary.LittleEndian.PutUint32(page[20:24], 2)
	_, _, err := ReadFile(writeFile(t, frame(page)))
	if !errors.Is(err, ErrEtcdSnapshot) || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("ReadFile(etcd snapshot) = %v", err)
	}
}

func TestRestore(t *testing.T) {
	ctx := context.Background()
	snap := testSnapshot()
	for _, tc := range []struct {
		name    string
		storage func(dataDir string) (url, root string)
	}{
		{"default file store in the data dir", func(dataDir string) (string, string) { return "", filepath.Join(dataDir, "objects") }},
		{"file store elsewhere", func(string) (string, string) {
			root := filepath.Join(t.TempDir(), "bucket")
			return "file://" + root, root
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			url, root := tc.storage(dataDir)
			res, err := Restore(ctx, snap, Target{DataDir: dataDir, Storage: url})
			if err != nil {
				t.Fatal(err)
			}
			if res.Revision != 6 || res.Index != 9 || res.Keys != 2 || res.Leases != 1 || res.Storage != "file://"+root {
				t.Fatalf("result %+v", res)
			}
			store, err := fsstore.Open(root)
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, store, filepath.Join(dataDir, "wal"), snap)
			// The bucket alone restores it too (a node whose disk is lost).
			wantState(t, store, filepath.Join(t.TempDir(), "wal"), snap)
		})
	}
}

// wantState opens the log in walDir on store and checks it starts from
// snap, with nothing after it.
func wantState(t *testing.T, store objstore.Store, walDir string, snap *datafile.Snapshot) {
	t.Helper()
	l, err := objwal.Open(context.Background(), objwal.Options{Store: store, WALDir: walDir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.LoadSnapshot()
	if err != nil || got == nil {
		t.Fatalf("LoadSnapshot = %v, %v", got, err)
	}
	h := proto.Clone(snap.Header).(*netsyv1.SnapshotHeader)
	h.WalSeq = 0
	h.KeyVersions, h.Leases = int64(len(snap.KVs)), int64(len(snap.Leases))
	if !proto.Equal(got.Header, h) || len(got.KVs) != len(snap.KVs) || len(got.Leases) != len(snap.Leases) {
		t.Fatalf("restored snapshot %v with %d versions and %d leases, want %v with %d and %d",
			got.Header, len(got.KVs), len(got.Leases), h, len(snap.KVs), len(snap.Leases))
	}
	for i := range snap.KVs {
		if !proto.Equal(got.KVs[i], snap.KVs[i]) {
			t.Errorf("version %d: %v, want %v", i, got.KVs[i], snap.KVs[i])
		}
	}
	for i := range snap.Leases {
		if !proto.Equal(got.Leases[i], snap.Leases[i]) {
			t.Errorf("lease %d: %v, want %v", i, got.Leases[i], snap.Leases[i])
		}
	}
	n := 0
	if err := l.Replay(h.Index+1, func(*netsyv1.Entry) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("entries after the snapshot: %d, %v", n, err)
	}
}

func TestRestoreRefusesNonEmptyTargets(t *testing.T) {
	ctx := context.Background()
	snap := testSnapshot()

	// A data directory holding anything is left alone.
	dataDir := t.TempDir()
	os.WriteFile(filepath.Join(dataDir, "identity.json"), []byte("{}"), 0o644)
	_, err := Restore(ctx, snap, Target{DataDir: dataDir})
	if !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "identity.json") {
		t.Fatalf("restore into a non-empty dir = %v", err)
	}
	if ents, _ := os.ReadDir(dataDir); len(ents) != 1 {
		t.Fatalf("the non-empty dir was changed: %v", ents)
	}

	// A store that holds a log already is refused before anything is
	// written, and the new data directory is removed again.
	root := filepath.Join(t.TempDir(), "bucket")
	first := filepath.Join(t.TempDir(), "first")
	if _, err := Restore(ctx, snap, Target{DataDir: first, Storage: "file://" + root}); err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(t.TempDir(), "second")
	_, err = Restore(ctx, snap, Target{DataDir: second, Storage: "file://" + root})
	if !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "already holds") {
		t.Fatalf("restore into a non-empty store = %v", err)
	}
	if _, err := os.Stat(second); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused restore left %s behind: %v", second, err)
	}
	// An empty existing directory is fine, and stays after a refusal.
	empty := t.TempDir()
	if _, err := Restore(ctx, snap, Target{DataDir: empty, Storage: "file://" + root}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore into a non-empty store = %v", err)
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Fatalf("the refused restore left %v in the empty directory (%v)", ents, err)
	}
}
