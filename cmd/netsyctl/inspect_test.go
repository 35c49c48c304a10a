package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/datafile"
	fsstore "github.com/netsy-io/netsy/internal/objstore/fs"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func writeChunk(t *testing.T) string {
	t.Helper()
	data, err := datafile.EncodeChunk([]*netsyv1.Entry{
		{Index: 1, Revision: 1, Ops: []*netsyv1.Op{{Type: netsyv1.Op_PUT, Key: []byte("a"), Value: []byte("hello")}}},
		{Index: 2, Revision: 1, LeaseGrants: []*netsyv1.LeaseGrant{{Id: 0x10, Ttl: 30}}},
		{Index: 3, Revision: 2, Ops: []*netsyv1.Op{{Type: netsyv1.Op_DELETE, Key: []byte("a")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "00000000000000000001")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestInspectTableAndJSON(t *testing.T) {
	path := writeChunk(t)
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"inspect", path}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"kind:        chunk", "index 1..3, revision 1..2", `put "a" (5 B)`, "grant lease 10 ttl 30s", `delete "a"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := Run(context.Background(), []string{"inspect", "-o", "json", path}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var info struct {
		Sealed  bool `json:"sealed"`
		Records []struct {
			Entry struct {
				Index string `json:"index"`
			} `json:"entry"`
		} `json:"records"`
	}
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		t.Fatalf("json output: %v\n%s", err, out.String())
	}
	if !info.Sealed || len(info.Records) != 3 || info.Records[2].Entry.Index != "3" {
		t.Fatalf("json output %+v", info)
	}
}

func TestInspectCorruptFileNamesIt(t *testing.T) {
	path := writeChunk(t)
	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 0xff
	os.WriteFile(path, data, 0o644)
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"inspect", path}, &out, &errb); code == 0 {
		t.Fatal("a corrupt file inspected cleanly")
	}
	if !strings.Contains(errb.String(), path) {
		t.Fatalf("error does not name the file: %s", errb.String())
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

func TestInspectObjectFromStore(t *testing.T) {
	dir := t.TempDir()
	path := writeChunk(t)
	data, _ := os.ReadFile(path)
	st, err := fsstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutIfAbsent(context.Background(), "wal/00000000000000000001", data); err != nil {
		t.Fatal(err)
	}
	st.Close()
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"inspect", "--storage", "file://" + dir, "wal/00000000000000000001"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "index 1..3") {
		t.Fatalf("object inspect output:\n%s", out.String())
	}
	if code := Run(context.Background(), []string{"inspect", "--storage", "file://" + dir, "wal/00000000000000000009"}, &out, &errb); code == 0 {
		t.Fatal("a missing object inspected cleanly")
	}
}

// TestInspectFileStoreObjectByPath inspects a chunk by its path on disk
// under the file store, as an operator finds it under the data directory.
func TestInspectFileStoreObjectByPath(t *testing.T) {
	root := filepath.Join(t.TempDir(), "objects")
	data, _ := os.ReadFile(writeChunk(t))
	st, err := fsstore.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutIfAbsent(context.Background(), "wal/00000000000000000001", data); err != nil {
		t.Fatal(err)
	}
	st.Close()
	path := filepath.Join(root, "objects", "wal.dir", "00000000000000000001.obj")
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"inspect", path}, &out, &errb); code != 0 {
		t.Fatalf("inspect %s: exit %d: %s", path, code, errb.String())
	}
	if !strings.Contains(out.String(), "kind:        chunk") || !strings.Contains(out.String(), "index 1..3") {
		t.Fatalf("inspect output:\n%s", out.String())
	}

	// A damaged object file is reported as such, naming it.
	raw, _ := os.ReadFile(path)
	raw[len(raw)-1] ^= 0xff
	os.WriteFile(path, raw, 0o644)
	out.Reset()
	errb.Reset()
	if code := Run(context.Background(), []string{"inspect", path}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), path) || !strings.Contains(errb.String(), "corrupt") {
		t.Fatalf("damaged object file: exit %d: %s", code, errb.String())
	}
}

func TestInspectForeignFileSaysHowToNameObjects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(path, []byte("not a data file at all"), 0o644)
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"inspect", path}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "netsyctl inspect --storage URL KEY") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

func TestDescribeEntryNamesLeaseCheckpoints(t *testing.T) {
	e := &netsyv1.Entry{Index: 9, LeaseCheckpoints: []*netsyv1.LeaseCheckpoint{{Id: 1, RemainingMs: 2000}, {Id: 2, RemainingMs: 500}}}
	if got, want := describeEntry(e), "checkpoint 2 leases"; got != want {
		t.Fatalf("describeEntry = %q, want %q", got, want)
	}
}

func TestDescribeEntryNamesAlarms(t *testing.T) {
	e := &netsyv1.Entry{Index: 9, Alarm: &netsyv1.AlarmChange{Activate: true, MemberId: 0xab, Type: 1}}
	if got, want := describeEntry(e), "alarm activate NOSPACE member ab"; got != want {
		t.Fatalf("describeEntry = %q, want %q", got, want)
	}
}
