package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/wal"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// damagedDataDir is a data directory whose local log holds entries 1..30
// (entry i at revision i+100) with the record of entry 20 zeroed. It
// returns the directory, the segment and the record's offset.
func damagedDataDir(t *testing.T) (dir, seg string, off int64) {
	t.Helper()
	dir = t.TempDir()
	w, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 30; i++ {
		e := &netsyv1.Entry{Index: i, Revision: int64(i) + 100, Ops: []*netsyv1.Op{{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}}}
		if err := w.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seg = filepath.Join(dir, "wal", "00000000000000000001.seg")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := datafile.NewReader(seg, strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := r.NextEntry()
		if err == io.EOF {
			t.Fatal("entry 20 not found")
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Index == 20 {
			off = r.RecordOffset()
			clear(data[off:r.Offset()])
			break
		}
	}
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, seg, off
}

func TestRepairCommand(t *testing.T) {
	dir, seg, off := damagedDataDir(t)
	out, errOut, code := run(t, "repair", dir)
	if code != 0 {
		t.Fatalf("repair: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("repair output:\n%s", out)
	for _, want := range []string{
		fmt.Sprintf("cut the local log at offset %d of %s", off, seg),
		"kept:               entries up to index 19",
		"dropped revisions:  121-130 (index 21-30)",
		"unreadable:         index 20 ",
		"next: start the node on " + dir,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("repair output lacks %q", want)
		}
	}
	// The log is cut: a second repair finds it intact, and so does Open.
	out, _, code = run(t, "repair", "-o", "json", dir)
	var res repairResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || !res.Intact || res.Last != 19 {
		t.Fatalf("second repair: exit %d: %s", code, out)
	}
	w, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal")})
	if err != nil {
		t.Fatal(err)
	}
	if w.LastIndex() != 19 {
		t.Fatalf("after repair the log ends at %d, want 19", w.LastIndex())
	}
	w.Close()
}

func TestRepairCommandJSON(t *testing.T) {
	dir, seg, off := damagedDataDir(t)
	out, errOut, code := run(t, "repair", dir, "-o", "json")
	var res repairResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("repair -o json: exit %d\n%s%s", code, out, errOut)
	}
	if res.Intact || res.Path != seg || res.Offset != off || res.KeptTo != 19 ||
		len(res.Dropped) != 1 || res.Dropped[0] != (runJSON{FirstIndex: 21, LastIndex: 30, FirstRevision: 121, LastRevision: 130}) ||
		len(res.Missing) != 1 || res.Missing[0] != (indexSpan{From: 20, To: 20}) {
		t.Fatalf("repair -o json: %+v", res)
	}
}

func TestRepairCommandRefuses(t *testing.T) {
	// A running node holds the data directory's lock.
	dir, _, _ := damagedDataDir(t)
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "wal", "00000000000000000001.seg"))
	_, errOut, code := run(t, "repair", dir)
	if code != 1 || !strings.Contains(errOut, "in use") {
		t.Fatalf("repair of a locked data directory: exit %d: %s", code, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "wal", "00000000000000000001.seg")); string(after) != string(before) {
		t.Fatal("repair changed the log of a locked data directory")
	}

	missing := filepath.Join(t.TempDir(), "nope")
	if _, errOut, code := run(t, "repair", missing); code != 1 || !strings.Contains(errOut, "holds no local log") {
		t.Fatalf("repair of a missing directory: exit %d: %s", code, errOut)
	}
	if _, errOut, code := run(t, "repair"); code != 1 || !strings.Contains(errOut, repairUsage) {
		t.Fatalf("repair without a directory: exit %d: %s", code, errOut)
	}
}
