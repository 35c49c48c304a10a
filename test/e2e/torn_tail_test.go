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
	"time"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// TestTornTailAfterAcknowledgedUpload is the regression of a node in sync
// mode on the embedded file store whose newest local segment lost the end
// of its last record (a power loss takes what was written but not yet
// fsync'd, and in sync mode the local fsync runs beside the chunk PUT, so
// the bucket can hold an entry the local log lost). It used to serve
// without the acknowledged last key, time out the next put and upload a
// second, different entry at the same index, after which a fresh node
// could no longer restore from the bucket.
func TestTornTailAfterAcknowledgedUpload(t *testing.T) {
	if target != procutil.KindNetsy {
		t.Skip("object storage is netsy's own")
	}
	s := procutil.StartNetsy(t, procutil.Options{Args: []string{"--quorum", "0"}})
	c := newCtl(t, s)
	var revs [101]int64
	for i := 1; i <= 100; i++ {
		revs[i] = c.putRev(fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	seg := cutLastRecord(t, filepath.Join(s.DataDir, "wal"))
	t.Logf("cut %s in the middle of its last record", seg)

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	out := c.ok("get", "k100", "-w", "json")
	if !strings.Contains(out, fmt.Sprintf(`"mod_revision":%d`, revs[100])) {
		t.Fatalf("k100 after the restart: %s; want it at revision %d", out, revs[100])
	}
	start := time.Now()
	rev := c.putRev("k101", "v101")
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the first put after the restart took %v", d)
	}
	if rev != revs[100]+1 {
		t.Fatalf("k101 got revision %d, want %d", rev, revs[100]+1)
	}
	if log := s.LogTail(200); !strings.Contains(log, "restored from there") || strings.Contains(log, "never acknowledged") {
		t.Errorf("the restart's log does not say the torn record was restored from object storage:\n%s", log)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	// A fresh node on the same bucket restores the one linear history.
	fresh := procutil.StartNetsy(t, procutil.Options{Args: []string{"--quorum", "0",
		"--storage", "file://" + filepath.Join(s.DataDir, "objects")}})
	fc := newCtl(t, fresh)
	for _, i := range []int{1, 50, 100} {
		fc.expect(fmt.Sprintf("k%d\nv%d\n", i, i), "get", fmt.Sprintf("k%d", i))
	}
	fc.expect("k101\nv101\n", "get", "k101")
	if out := fc.ok("get", "k101", "-w", "json"); !strings.Contains(out, fmt.Sprintf(`"mod_revision":%d`, rev)) {
		t.Fatalf("k101 on the restored node: %s; want revision %d", out, rev)
	}
}

// cutLastRecord truncates the newest segment in dir in the middle of its
// last record and returns its path.
func cutLastRecord(t *testing.T, dir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments in %s: %v", dir, err)
	}
	sort.Strings(segs)
	path := segs[len(segs)-1]
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := datafile.NewReader(path, f)
	if err != nil {
		t.Fatal(err)
	}
	var start, end int64 = -1, -1
	for {
		off := r.Offset()
		_, err := r.NextEntry()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		start, end = off, r.Offset()
	}
	if start < 0 {
		t.Fatalf("%s holds no record", path)
	}
	if err := f.Truncate(start + (end-start)/2); err != nil {
		t.Fatal(err)
	}
	return path
}
