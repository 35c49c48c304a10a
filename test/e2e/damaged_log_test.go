//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/testutil/logdamage"
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
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
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
	d := logdamage.ZeroThirdLast(t, filepath.Join(s.DataDir, "wal"))
	seg, off, damagedRev, lastRev := d.Path, d.Offset, d.Revision, d.LastRevision
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
