package wal

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/datafile"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// checkLayout asserts the shape preallocation promises on disk: every
// sealed segment ends with its footer, and an unsealed segment is the
// newest, preallocated to at least segSize, with only zeros after its
// records (Inspect rejects anything else after them).
func checkLayout(t *testing.T, dir string, segSize int64) {
	t.Helper()
	segs := segmentFiles(t, dir)
	for i, p := range segs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		info, err := datafile.Inspect(p, bytes.NewReader(data))
		switch {
		case err != nil:
			t.Fatal(err)
		case info.Sealed && info.Size != int64(len(data)):
			t.Fatalf("%s: sealed, but %d bytes follow its footer", p, int64(len(data))-info.Size)
		case !info.Sealed && i < len(segs)-1:
			t.Fatalf("%s: unsealed but not the newest segment", p)
		case !info.Sealed && int64(len(data)) < segSize:
			t.Fatalf("%s: %d bytes, not preallocated to %d", p, len(data), segSize)
		}
	}
}

// newestInfo inspects the newest segment in dir.
func newestInfo(t *testing.T, dir string) (path string, data []byte, info *datafile.Info) {
	t.Helper()
	segs := segmentFiles(t, dir)
	path = segs[len(segs)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err = datafile.Inspect(path, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return path, data, info
}

func TestSegmentsArePreallocated(t *testing.T) {
	const segSize = 4096
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: segSize}
	w := open(t, opts)
	appendRange(t, w, 1, 1)
	waitSynced(t, w, 1)
	// Even the first segment of a new log comes preallocated.
	checkLayout(t, dir, segSize)
	// Fill a few segments: each roll renames the spare into place, so the
	// newest is preallocated again straight away. A segment the writer
	// had to create itself would be only as long as its records.
	for last := uint64(1); len(segmentFiles(t, dir)) < 4; last += 20 {
		appendRange(t, w, last+1, last+20)
		waitSynced(t, w, last+20)
		checkLayout(t, dir, segSize)
	}
	last := w.LastIndex()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, before, info := newestInfo(t, dir)
	if info.Sealed || info.Size >= int64(len(before)) {
		t.Fatalf("newest segment: sealed %v, %d valid of %d bytes", info.Sealed, info.Size, len(before))
	}

	// Reopening reads the zeros as the clean end and keeps them, however
	// often it happens.
	for i := range 3 {
		w = open(t, opts)
		if w.LastIndex() != last {
			t.Fatalf("reopen %d: last %d, want %d", i, w.LastIndex(), last)
		}
		checkReplay(t, w, 1, last)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if _, after, _ := newestInfo(t, dir); !bytes.Equal(after, before) {
			t.Fatalf("reopen %d changed the newest segment", i)
		}
	}
	w = open(t, opts)
	defer w.Close()
	appendRange(t, w, last+1, last+5)
	waitSynced(t, w, last+5)
	checkReplay(t, w, 1, last+5)
	checkLayout(t, dir, segSize)
}

// TestPreallocatedTail damages the newest segment the ways a crash (or a
// disk) can, and checks what Open makes of it: the rule is in the doc of
// package datafile.
func TestPreallocatedTail(t *testing.T) {
	const segSize, last = 8192, 250
	src := t.TempDir()
	w := open(t, Options{Dir: src, SegmentBytes: segSize})
	appendRange(t, w, 1, last)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(segmentFiles(t, src)); n < 2 {
		t.Fatalf("want at least 2 segments, have %d", n)
	}
	_, seg, info := newestInfo(t, src)
	if int64(len(seg)) != segSize {
		t.Fatalf("newest segment is %d bytes, want %d", len(seg), segSize)
	}
	end := int(info.Size)                                    // where the padding starts
	lastRec := int(info.Records[len(info.Records)-1].Offset) // the last record
	lastFrame := bytes.Clone(seg[lastRec:end])
	// The newest segment's entries as a sealed file, footer and all.
	var sealedBuf bytes.Buffer
	dw, err := datafile.NewWriter(&sealedBuf, datafile.KindSegment)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range info.Records {
		if err := dw.AppendEntry(r.Entry); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dw.Finish(); err != nil {
		t.Fatal(err)
	}
	sealed := sealedBuf.Bytes()
	footer := sealed[end:]
	if end+len(footer)+len(lastFrame)+200 > segSize {
		t.Fatalf("newest segment ends at %d: too full for the cases below", end)
	}
	pad := func(b []byte) []byte { return append(bytes.Clone(b), make([]byte, segSize-len(b))...) }
	at := func(off int, b []byte) []byte {
		out := bytes.Clone(seg)
		copy(out[off:], b)
		return out
	}

	tests := []struct {
		name   string
		data   []byte
		last   uint64 // LastIndex after Open
		sealed bool   // the newest segment is sealed after Open
		want   string // Open fails naming the file and saying this
	}{
		{"zeros after the last record", seg, last, false, ""},
		{"junk inside the padding", at(end+500, []byte{0x5a, 0x17}), last, false, ""},
		{"junk at the end of the padding", at(segSize-1, []byte{1}), last, false, ""},
		{"torn record, then zeros", at(lastRec+10, make([]byte, end-lastRec-10)), last - 1, false, ""},
		{"torn record header, then zeros", at(lastRec+2, make([]byte, end-lastRec-2)), last - 1, false, ""},
		{"written before preallocation", seg[:end], last, false, ""},
		{"footer cut short", pad(append(seg[:end:end], footer[:30]...)), last, false, ""},
		{"sealed, padding not yet cut", pad(sealed), last, true, ""},
		{"a valid record inside the padding", at(end+100, lastFrame), 0, false, "followed by a valid record"},
		{"zeros in place of an acknowledged record", at(lastRec-len(lastFrame), make([]byte, len(lastFrame))), 0, false, "corrupt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, src)
			path, _, _ := newestInfo(t, dir)
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			opts := Options{Dir: dir, SegmentBytes: segSize}
			if tc.want != "" {
				before := dirSizes(t, dir)
				_, err := Open(opts)
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error naming %s and saying %q", err, path, tc.want)
				}
				if after := dirSizes(t, dir); !maps.Equal(before, after) {
					t.Fatalf("a failed Open changed files: %v -> %v", before, after)
				}
				return
			}
			w := open(t, opts)
			if w.LastIndex() != tc.last {
				t.Fatalf("last %d, want %d", w.LastIndex(), tc.last)
			}
			checkReplay(t, w, 1, tc.last)
			checkLayout(t, dir, segSize)
			if _, _, info := newestInfo(t, dir); info.Sealed != tc.sealed {
				t.Fatalf("newest segment sealed %v, want %v", info.Sealed, tc.sealed)
			}
			appendRange(t, w, tc.last+1, tc.last+5)
			waitSynced(t, w, tc.last+5)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w = open(t, opts)
			defer w.Close()
			checkReplay(t, w, 1, tc.last+5)
			checkLayout(t, dir, segSize)
		})
	}
}

// TestCloseStopsSpare closes the WAL while the spare goroutine is writing
// a spare far too large to finish, then reuses what it left.
func TestCloseStopsSpare(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	filling := make(chan struct{})
	h := &hooks{beforeSpareFill: func() { close(filling) }}
	// Big enough that finishing it would take seconds and show.
	const huge = 1 << 30
	w := open(t, Options{Dir: dir, SegmentBytes: huge, hooks: h})
	<-filling
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	spare := filepath.Join(dir, spareName)
	st, err := os.Stat(spare)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() >= huge {
		t.Fatalf("spare is %d bytes: Close did not interrupt it", st.Size())
	}

	// The next process completes the spare it finds, here cutting it down
	// to a smaller segment size, and rolls into it.
	const segSize = 4096
	w = open(t, Options{Dir: dir, SegmentBytes: segSize})
	appendRange(t, w, 1, 3)
	waitSynced(t, w, 3)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, dir, segSize)
	_, data, info := newestInfo(t, dir)
	if len(data) != segSize || len(info.Records) != 3 {
		t.Fatalf("newest segment: %d bytes, %d records", len(data), len(info.Records))
	}
}

// TestNoSpareFallsBack: when no spare can be made the log still works,
// with segments that grow as they are written.
func TestNoSpareFallsBack(t *testing.T) {
	dir := t.TempDir()
	// A directory where the spare must go makes every preparation fail.
	if err := os.Mkdir(filepath.Join(dir, spareName), 0o700); err != nil {
		t.Fatal(err)
	}
	w := open(t, Options{Dir: dir, SegmentBytes: 1024})
	appendRange(t, w, 1, 100)
	waitSynced(t, w, 100)
	checkReplay(t, w, 1, 100)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segmentFiles(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	if _, data, info := newestInfo(t, dir); int64(len(data)) != info.Size {
		t.Fatalf("newest segment without a spare: %d bytes, %d valid", len(data), info.Size)
	}
	// Reopening preallocates the newest segment in place.
	w = open(t, Options{Dir: dir, SegmentBytes: 1024})
	defer w.Close()
	checkLayout(t, dir, 1024)
	checkReplay(t, w, 1, 100)
}

// TestReplayOfPreallocatedActiveSegment: Replay reads the active segment only up to
// what is durable, never into its padding.
func TestReplayOfPreallocatedActiveSegment(t *testing.T) {
	w := open(t, Options{Dir: t.TempDir(), SegmentBytes: 1 << 20})
	defer w.Close()
	appendRange(t, w, 1, 50)
	waitSynced(t, w, 50)
	n := 0
	if err := w.Replay(0, func(*netsyv1.Entry) error { n++; return nil }); err != nil || n != 50 {
		t.Fatalf("replayed %d entries: %v", n, err)
	}
}

// TestPrepared checks when Prepared closes: after a new log's first spare
// is written, at once for a log that already has a segment, and on a Close
// that stops the fill.
func TestPrepared(t *testing.T) {
	defer goleak.VerifyNone(t)
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	const segSize = 4096
	dir := t.TempDir()
	filling, release := make(chan struct{}), make(chan struct{})
	h := &hooks{beforeSpareFill: func() { close(filling); <-release }}
	w := open(t, Options{Dir: dir, SegmentBytes: segSize, hooks: h})
	<-filling
	if closed(w.Prepared()) {
		t.Fatal("Prepared closed before the first segment was preallocated")
	}
	close(release)
	<-w.Prepared() // the test times out if it never closes
	if _, err := os.Stat(filepath.Join(dir, spareName)); err != nil {
		t.Fatalf("Prepared closed without a spare on disk: %v", err)
	}
	appendRange(t, w, 1, 3)
	waitSynced(t, w, 3)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// A log with an active segment has nothing to wait for.
	w = open(t, Options{Dir: dir, SegmentBytes: segSize, hooks: &hooks{beforeSpareFill: func() {
		t.Error("a reopened log that is far from full asked for a spare")
	}}})
	if !closed(w.Prepared()) {
		t.Fatal("Prepared not closed for a log that already has a segment")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// Close during the first fill closes it too.
	filling = make(chan struct{})
	w = open(t, Options{Dir: t.TempDir(), SegmentBytes: 1 << 30, hooks: &hooks{beforeSpareFill: func() { close(filling) }}})
	<-filling
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(w.Prepared()) {
		t.Fatal("Prepared not closed after Close stopped the fill")
	}
}
