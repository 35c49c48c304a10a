//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// TestDamagedLogRepair is the operator's path through a damaged local log
// on a single node with --quorum -1 (writes acknowledged on their local
// fsync): zeros over one record with valid records after it make the
// stopped node refuse to start with an error naming the segment, the
// offset and `netsyctl repair DATA_DIR`; netsyctl repair cuts the log there
// and prints the revisions it dropped; the node then starts and, since
// its orderly stop had uploaded them, serves every write again.
func TestDamagedLogRepair(t *testing.T) {
	if target != procutil.KindNetsy {
		t.Skip("netsy's own local log")
	}
	s := procutil.StartNetsy(t, procutil.Options{})
	c := newCtl(t, s)
	var revs [31]int64
	for i := 1; i <= 30; i++ {
		revs[i] = c.putRev(fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	seg, off, damagedRev, lastRev := zeroThirdLastRecord(t, filepath.Join(s.DataDir, "wal"))
	t.Logf("zeroed the record of revision %d at offset %d of %s", damagedRev, off, seg)

	if err := s.Restart(); err == nil {
		t.Fatal("the node started on a damaged log")
	}
	log := s.LogTail(20)
	for _, want := range []string{seg, fmt.Sprintf("offset %d", off), "netsyctl repair " + s.DataDir} {
		if !strings.Contains(log, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, log)
		}
	}

	out := netsyctlOK(t, nil, "repair", s.DataDir)
	t.Logf("netsyctl repair:\n%s", out)
	for _, want := range []string{
		fmt.Sprintf("cut the local log at offset %d of %s", off, seg),
		fmt.Sprintf("dropped revisions:  %d-%d", damagedRev+1, lastRev),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("netsyctl repair does not say %q", want)
		}
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 28, 30} {
		out := c.ok("get", fmt.Sprintf("k%d", i), "-w", "json")
		if !strings.Contains(out, fmt.Sprintf(`"mod_revision":%d`, revs[i])) {
			t.Fatalf("k%d after the repair: %s; want it at revision %d (fetched back from object storage)", i, out, revs[i])
		}
	}
	if rev := c.putRev("k31", "v31"); rev != revs[30]+1 {
		t.Fatalf("k31 got revision %d, want %d", rev, revs[30]+1)
	}
}

// zeroThirdLastRecord zeroes the third record from the end of the newest
// segment in dir and returns the segment, the record's offset, its
// revision and the last revision in the segment.
func zeroThirdLastRecord(t *testing.T, dir string) (path string, off, rev, last int64) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments in %s: %v", dir, err)
	}
	sort.Strings(segs)
	path = segs[len(segs)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := datafile.NewReader(path, strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	type rec struct{ start, end, rev int64 }
	var recs []rec
	for {
		e, err := r.NextEntry()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{r.RecordOffset(), r.Offset(), e.Revision})
	}
	if len(recs) < 3 {
		t.Fatalf("%s holds %d records, the test needs 3", path, len(recs))
	}
	d := recs[len(recs)-3]
	clear(data[d.start:d.end])
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, d.start, d.rev, recs[len(recs)-1].rev
}
