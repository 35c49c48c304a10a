package objwal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/wal"
)

// zeroLocalRecord zeroes the record of entry index wherever it is in the
// local log in dir, leaving the records after it intact: damage a torn
// tail rule cannot explain. It returns the segment and the offset.
func zeroLocalRecord(t *testing.T, dir string, index uint64) (string, int64) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments in %s: %v", dir, err)
	}
	sort.Strings(segs)
	for _, path := range segs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := datafile.NewReader(path, strings.NewReader(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		for {
			e, err := r.NextEntry()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Index == index {
				start := r.RecordOffset()
				clear(data[start:r.Offset()])
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				return path, start
			}
		}
	}
	t.Fatalf("entry %d is not in %s", index, dir)
	return "", 0
}

// A local log damaged in the middle (zeros with valid records after them,
// in an older segment and in the newest one) is refused without CutDamage,
// with the wal's error naming the segment and offset; with CutDamage Open
// cuts it, fetches everything after the cut back from the bucket, and the
// log holds every entry the bucket has and goes on from there. A writer
// and a follower (a cluster replica) both do so.
func TestDamagedLocalLogIsCutAndFetchedBack(t *testing.T) {
	const last = 400
	for _, tc := range []struct {
		name     string
		damaged  uint64 // entry whose record is zeroed; 0: the newest segment's second
		follower bool
	}{
		{"older segment, writer", 50, false},
		{"older segment, follower", 50, true},
		{"newest segment, writer", 0, false},
		{"newest segment, follower", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			dir := t.TempDir()
			a := e.node(dir, ModeSync, nil).open()
			a.appendRange(1, last, "a")
			if err := a.rec.wait(t, last); err != nil {
				t.Fatal(err)
			}
			a.close()
			segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
			if len(segs) < 3 {
				t.Fatalf("%d segments, the test needs 3", len(segs))
			}
			idx := tc.damaged
			if idx == 0 {
				sort.Strings(segs)
				var first uint64
				if _, err := fmt.Sscanf(filepath.Base(segs[len(segs)-1]), "%020d.seg", &first); err != nil {
					t.Fatal(err)
				}
				idx = first + 1
			}
			path, off := zeroLocalRecord(t, dir, idx)

			edit := func(o *Options) { o.Follower = tc.follower }
			_, err := e.node(dir, ModeSync, edit).tryOpen()
			var d *wal.DamageError
			if !errors.As(err, &d) || d.Path != path || d.Offset != off || d.After != idx-1 {
				t.Fatalf("open without CutDamage: %v, want the damage at %s offset %d after index %d", err, path, off, idx-1)
			}

			b := e.node(dir, ModeSync, func(o *Options) { edit(o); o.CutDamage = true }).open()
			if c := b.l.wal.Cut(); c == nil || c.Damage.Path != path || c.Damage.After != idx-1 {
				t.Fatalf("cut %+v", c)
			}
			_, got := b.replay()
			checkEntries(t, got, 1, last, tag("a"))
			hist, _ := history(t, e.inner)
			if len(hist) != last {
				t.Fatalf("bucket holds %d entries, want %d", len(hist), last)
			}
			if tc.follower {
				if err := b.l.Claim(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			b.appendRange(last+1, last+2, "b")
			if err := b.rec.wait(t, last+2); err != nil {
				t.Fatal(err)
			}
			b.close()
			if hist, _ := history(t, e.inner); len(hist) != last+2 || string(hist[last+2].Ops[0].Value) != "b-402" {
				t.Fatalf("bucket history after the cut node wrote: %d entries", len(hist))
			}
		})
	}
}

// A log whose local fsync acknowledged entries must never be cut.
func TestCutDamageRefusesAckOnFsync(t *testing.T) {
	e := newEnv(t)
	_, err := e.node("", ModeAsync, func(o *Options) { o.AckOnFsync, o.CutDamage = true, true }).tryOpen()
	if err == nil || !strings.Contains(err.Error(), "CutDamage") {
		t.Fatalf("open with CutDamage and AckOnFsync: %v", err)
	}
}
