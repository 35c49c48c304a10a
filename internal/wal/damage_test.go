package wal

import (
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/datafile"
)

// segRecords reads where each record of a segment starts and ends.
type segRecords struct {
	path   string
	first  uint64
	starts []int64 // starts[k] is where entry first+k starts
	end    int64   // where the last record ends (the footer or padding starts)
}

func (s segRecords) last() uint64      { return s.first + uint64(len(s.starts)) - 1 }
func (s segRecords) at(i uint64) int64 { return s.starts[i-s.first] }
func (s segRecords) after(i uint64) int64 { // where the record after entry i starts
	if i == s.last() {
		return s.end
	}
	return s.starts[i+1-s.first]
}

func readSegments(t *testing.T, dir string) []segRecords {
	t.Helper()
	var out []segRecords
	for _, p := range segmentFiles(t, dir) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := datafile.NewReader(p, f)
		if err != nil {
			t.Fatal(err)
		}
		s := segRecords{path: p}
		for {
			e, err := r.NextEntry()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.first == 0 {
				s.first = e.Index
			}
			s.starts = append(s.starts, r.RecordOffset())
			s.end = r.Offset()
		}
		f.Close()
		out = append(out, s)
	}
	return out
}

func zeroBytes(t *testing.T, path string, from, to int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(data[from:to])
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDamageIsCutOnlyWhenAsked damages a log of 120 entries in the ways a
// crash or a failing disk can, with valid records after the damage, and
// checks three things each time: Open refuses with a DamageError naming the
// file, offset and last intact entry and touches nothing; Open with
// CutDamage keeps exactly the entries before the damage, removes the newer
// segments, lists the entries after the damage that could be read, and
// goes on appending; Repair does the same cut offline, after which a plain
// Open accepts the log.
func TestDamageIsCutOnlyWhenAsked(t *testing.T) {
	const last = 120
	src := t.TempDir()
	w := open(t, Options{Dir: src, SegmentBytes: 2048})
	appendRange(t, w, 1, last)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segs := readSegments(t, src)
	if len(segs) < 4 || len(segs[len(segs)-1].starts) < 4 {
		t.Fatalf("need 4 segments and 4 entries in the newest: %d segments", len(segs))
	}
	newest, older := segs[len(segs)-1], segs[1]
	base := func(s segRecords) string { return filepath.Base(s.path) }
	newer := func(s segRecords) []string {
		var out []string
		for _, o := range segs {
			if o.first > s.first {
				out = append(out, base(o))
			}
		}
		return out
	}

	type span struct{ from, to int64 }
	tests := []struct {
		name   string
		seg    segRecords
		damage func(path string)
		offset int64  // where the damage is reported
		after  uint64 // the last entry kept
		// The entries after the damage that stay readable, as one run
		// from dropFrom to last (0: none), and what cannot be read.
		dropFrom uint64
		unread   []span
		reason   string
		removed  []string
	}{
		{
			name: "zeros then records in the newest segment", seg: newest,
			damage: func(p string) {
				zeroBytes(t, p, newest.at(newest.first+1), (newest.at(newest.first+2)+newest.after(newest.first+2))/2)
			},
			offset: newest.at(newest.first + 1), after: newest.first,
			dropFrom: newest.first + 3, unread: []span{{newest.at(newest.first + 1), newest.at(newest.first + 3)}},
			reason: "followed by a valid record", removed: nil,
		},
		{
			name: "a torn record then records in the newest segment", seg: newest,
			damage: func(p string) { flipByte(t, p, int(newest.at(newest.first+1))+datafile.RecordHeaderSize+2) },
			offset: newest.at(newest.first + 1), after: newest.first,
			dropFrom: newest.first + 2, unread: []span{{newest.at(newest.first + 1), newest.at(newest.first + 2)}},
			reason: "followed by a valid record", removed: nil,
		},
		{
			name: "zeros then records in an older segment", seg: older,
			damage: func(p string) { zeroBytes(t, p, older.at(older.first+2), older.after(older.first+2)) },
			offset: older.at(older.first + 2), after: older.first + 1,
			dropFrom: older.first + 3, unread: []span{{older.at(older.first + 2), older.at(older.first + 3)}},
			reason: "corrupt", removed: newer(older),
		},
		{
			name: "a torn record then records in an older segment", seg: older,
			damage: func(p string) { flipByte(t, p, int(older.at(older.first+1))+datafile.RecordHeaderSize+1) },
			offset: older.at(older.first + 1), after: older.first,
			dropFrom: older.first + 2, unread: []span{{older.at(older.first + 1), older.at(older.first + 2)}},
			reason: "corrupt", removed: newer(older),
		},
		{
			name: "an older segment lost its footer", seg: older,
			damage: func(p string) {
				if err := os.Truncate(p, older.end); err != nil {
					t.Fatal(err)
				}
			},
			offset: older.end, after: older.last(), dropFrom: older.last() + 1,
			reason: "not sealed", removed: newer(older),
		},
		{
			name: "a bad header on an older segment", seg: older,
			damage: func(p string) { flipByte(t, p, 9) },
			offset: 0, after: older.first - 1, dropFrom: older.first,
			unread: []span{{0, datafile.HeaderSize}},
			reason: "corrupt header", removed: append([]string{base(older)}, newer(older)...),
		},
		{
			name: "the first record of the log", seg: segs[0],
			damage: func(p string) { flipByte(t, p, int(segs[0].at(1))+datafile.RecordHeaderSize) },
			offset: segs[0].at(1), after: 0, dropFrom: 2,
			unread: []span{{segs[0].at(1), segs[0].at(2)}},
			reason: "corrupt", removed: append([]string{base(segs[0])}, newer(segs[0])...),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check := func(dir string, c *Cut) {
				t.Helper()
				path := filepath.Join(dir, base(tc.seg))
				d := c.Damage
				if d.Path != path || d.Offset != tc.offset || d.After != tc.after || !strings.Contains(d.Reason, tc.reason) {
					t.Fatalf("cut %+v, want %s at offset %d after index %d, reason %q", d, path, tc.offset, tc.after, tc.reason)
				}
				var removed []string
				for _, p := range c.Removed {
					removed = append(removed, filepath.Base(p))
				}
				slices.Sort(removed)
				if !slices.Equal(removed, tc.removed) {
					t.Fatalf("removed %v, want %v", removed, tc.removed)
				}
				want := []Run{{FirstIndex: tc.dropFrom, LastIndex: last, FirstRevision: int64(tc.dropFrom) + 1, LastRevision: last + 1}}
				if !slices.Equal(c.Dropped, want) {
					t.Fatalf("dropped %v, want %v", c.Dropped, want)
				}
				var unread []span
				for _, s := range c.Unread {
					if s.Path != path {
						t.Fatalf("unread bytes in %s, want only in %s", s.Path, path)
					}
					unread = append(unread, span{s.Offset, s.Offset + s.Length})
				}
				if !slices.Equal(unread, tc.unread) {
					t.Fatalf("unread %v, want %v", unread, tc.unread)
				}
			}

			// Without CutDamage: an error that says where, and no change.
			dir := copyDir(t, src)
			tc.damage(filepath.Join(dir, base(tc.seg)))
			before := dirSizes(t, dir)
			_, err := Open(Options{Dir: dir, SegmentBytes: 2048})
			var d *DamageError
			if !errors.As(err, &d) {
				t.Fatalf("open: %v, want a DamageError", err)
			}
			if d.Path != filepath.Join(dir, base(tc.seg)) || d.Offset != tc.offset || d.After != tc.after {
				t.Fatalf("damage %+v, want %s at offset %d after index %d", d, base(tc.seg), tc.offset, tc.after)
			}
			if d.Newer != len(newer(tc.seg)) || !strings.Contains(err.Error(), d.Path) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("damage %+v (%v)", d, err)
			}
			if after := dirSizes(t, dir); !maps.Equal(before, after) {
				t.Fatalf("a refused Open changed files: %v -> %v", before, after)
			}

			// With CutDamage: the cut, then the log goes on from it.
			repairDir := copyDir(t, dir)
			w := open(t, Options{Dir: dir, SegmentBytes: 2048, CutDamage: true, Logger: hclog.NewNullLogger()})
			if w.LastIndex() != tc.after || w.Torn() != nil {
				t.Fatalf("after the cut: last %d (want %d), torn %v", w.LastIndex(), tc.after, w.Torn())
			}
			check(dir, w.Cut())
			checkLayout(t, dir, 2048)
			checkReplay(t, w, 1, tc.after)
			appendRange(t, w, tc.after+1, last+10)
			waitSynced(t, w, last+10)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w = open(t, Options{Dir: dir, SegmentBytes: 2048})
			if w.Cut() != nil {
				t.Fatalf("cut again: %+v", w.Cut())
			}
			checkReplay(t, w, 1, last+10)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			// Repair: the same cut, offline.
			rep, err := Repair(repairDir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Cut == nil || rep.Last != tc.after || rep.Torn != nil {
				t.Fatalf("repair: %+v", rep)
			}
			check(repairDir, rep.Cut)
			w = open(t, Options{Dir: repairDir})
			defer w.Close()
			if w.LastIndex() != tc.after {
				t.Fatalf("after repair: last %d, want %d", w.LastIndex(), tc.after)
			}
			checkReplay(t, w, 1, tc.after)
		})
	}
}

// TestCutCoveredBySnapshot damages entries a local snapshot covers: the cut
// keeps nothing the log could continue from, so it restarts after the
// snapshot.
func TestCutCoveredBySnapshot(t *testing.T) {
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, SegmentBytes: 2048})
	appendRange(t, w, 1, 60)
	waitSynced(t, w, 60)
	segs := readSegments(t, dir)
	act := segs[len(segs)-1]
	if len(act.starts) < 6 {
		t.Fatalf("need 6 entries in the newest segment, have %d", len(act.starts))
	}
	// The snapshot covers the first entries of the active segment only, so
	// that segment stays.
	snap := act.first + 3
	if err := w.SaveSnapshot(testSnapshot(snap)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	flipByte(t, act.path, int(act.at(act.first+1))+datafile.RecordHeaderSize)

	w = open(t, Options{Dir: dir, SegmentBytes: 2048, CutDamage: true})
	defer w.Close()
	c := w.Cut()
	if c == nil || c.Snapshot != snap || c.Damage.After != act.first || len(c.Removed) != 1 || c.Removed[0] != act.path {
		t.Fatalf("cut %+v", c)
	}
	if w.FirstIndex() != 0 || w.LastIndex() != 0 {
		t.Fatalf("first %d last %d, want an empty log after snapshot %d", w.FirstIndex(), w.LastIndex(), snap)
	}
	appendRange(t, w, snap+1, snap+5)
	waitSynced(t, w, snap+5)
	checkReplay(t, w, snap+1, snap+5)
}

// TestTornTailIsNoCut: a torn tail with nothing valid after it is cut as
// always, with or without CutDamage, and is not reported as damage.
func TestTornTailIsNoCut(t *testing.T) {
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, SegmentBytes: 2048})
	appendRange(t, w, 1, 10)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segs := readSegments(t, dir)
	act := segs[len(segs)-1]
	zeroBytes(t, act.path, act.at(act.last())+3, act.end)
	w = open(t, Options{Dir: dir, SegmentBytes: 2048, CutDamage: true})
	defer w.Close()
	if w.Cut() != nil || w.Torn() == nil || w.LastIndex() != 9 {
		t.Fatalf("cut %+v torn %+v last %d", w.Cut(), w.Torn(), w.LastIndex())
	}
}

func TestRepairIntactAndMissing(t *testing.T) {
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, SegmentBytes: 2048})
	appendRange(t, w, 1, 30)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Repair(dir, nil)
	if err != nil || rep.Cut != nil || rep.Torn != nil || rep.First != 1 || rep.Last != 30 {
		t.Fatalf("repair of an intact log: %+v %v", rep, err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := Repair(missing, nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("repair of a missing directory: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("repair created %s: %v", missing, err)
	}
}
