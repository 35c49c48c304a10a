package wal

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTruncateAfter cuts a multi-segment log at several places and checks
// that the result opens, replays exactly the prefix, and takes new entries
// that survive a reopen.
func TestTruncateAfter(t *testing.T) {
	const last = 40
	opts := func(dir string) Options { return Options{Dir: dir, SegmentBytes: 512} }
	build := func(t *testing.T) (dir string, firsts []uint64) {
		dir = t.TempDir()
		w := open(t, opts(dir))
		appendRange(t, w, 1, last)
		waitSynced(t, w, last)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		for _, name := range segmentFiles(t, dir) {
			first, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(name), segmentSuffix), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			firsts = append(firsts, first)
		}
		if len(firsts) < 3 {
			t.Fatalf("want at least 3 segments, got %v", firsts)
		}
		return dir, firsts
	}
	cases := []struct {
		name string
		cut  func(firsts []uint64) uint64
	}{
		{"inside the oldest sealed segment", func(f []uint64) uint64 { return f[0] + 1 }},
		{"at the end of a sealed segment", func(f []uint64) uint64 { return f[1] - 1 }},
		{"at the start of a segment", func(f []uint64) uint64 { return f[1] }},
		{"inside the newest segment", func(f []uint64) uint64 { return last - 1 }},
		{"after the last entry", func([]uint64) uint64 { return last }},
		{"everything", func([]uint64) uint64 { return 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, firsts := build(t)
			cut := tc.cut(firsts)
			if err := TruncateAfter(dir, cut); err != nil {
				t.Fatal(err)
			}
			w := open(t, opts(dir))
			if got := w.LastIndex(); got != cut {
				t.Fatalf("LastIndex after TruncateAfter(%d) = %d", cut, got)
			}
			checkLayout(t, dir, 512)
			if cut > 0 {
				checkReplay(t, w, 1, cut)
			}
			appendRange(t, w, cut+1, cut+3)
			waitSynced(t, w, cut+3)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w = open(t, opts(dir))
			defer w.Close()
			checkReplay(t, w, 1, cut+3)
		})
	}
}

func TestTruncateAfterRefusesBelowSnapshot(t *testing.T) {
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, SegmentBytes: 512})
	appendRange(t, w, 1, 30)
	waitSynced(t, w, 30)
	if err := w.SaveSnapshot(testSnapshot(20)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := TruncateAfter(dir, 10); err == nil || !strings.Contains(err.Error(), "snapshot covers index 20") {
		t.Fatalf("TruncateAfter below the snapshot: %v", err)
	}
	if err := TruncateAfter(dir, 25); err != nil {
		t.Fatal(err)
	}
	w = open(t, Options{Dir: dir, SegmentBytes: 512})
	defer w.Close()
	if got := w.LastIndex(); got != 25 {
		t.Fatalf("LastIndex = %d, want 25", got)
	}
	checkReplay(t, w, 21, 25)
}
