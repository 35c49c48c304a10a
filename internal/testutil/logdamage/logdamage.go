// Package logdamage damages a node's local log the way a crash can: it
// zeroes one record in the middle of the newest segment, leaving valid
// records after it, which no torn-tail rule explains. Tests only.
package logdamage

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/netsy-io/netsy/internal/datafile"
)

// Damage says which record ZeroThirdLast zeroed.
type Damage struct {
	Path   string // the segment
	Offset int64  // where the zeroed record starts
	// Index and Revision are the zeroed entry's; LastIndex and
	// LastRevision the segment's last entry's.
	Index, LastIndex       uint64
	Revision, LastRevision int64
}

// ZeroThirdLast zeroes the third record from the end of the newest
// segment (*.seg) in walDir.
func ZeroThirdLast(t testing.TB, walDir string) Damage {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(walDir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments in %s: %v", walDir, err)
	}
	sort.Strings(segs)
	path := segs[len(segs)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := datafile.NewReader(path, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		start, end int64
		index      uint64
		rev        int64
	}
	var recs []rec
	for {
		e, err := r.NextEntry()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{r.RecordOffset(), r.Offset(), e.Index, e.Revision})
	}
	if len(recs) < 3 {
		t.Fatalf("%s holds %d records, the test needs 3", path, len(recs))
	}
	d, last := recs[len(recs)-3], recs[len(recs)-1]
	clear(data[d.start:d.end])
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return Damage{Path: path, Offset: d.start, Index: d.index, Revision: d.rev, LastIndex: last.index, LastRevision: last.rev}
}
