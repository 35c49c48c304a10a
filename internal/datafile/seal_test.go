package datafile

import (
	"bytes"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// frameAll builds a chunk in memory the way objwal does: a header, then
// every entry framed in place.
func frameAll(t *testing.T, n int) ([]byte, Footer) {
	t.Helper()
	return frameEntries(t, testEntries(5, n))
}

// frameEntries frames entries after a chunk header, with the footer's
// summary of them.
func frameEntries(t *testing.T, entries []*netsyv1.Entry) ([]byte, Footer) {
	t.Helper()
	file := AppendHeader(nil, KindChunk)
	for _, e := range entries {
		var err error
		if file, err = FrameEntry(file, e); err != nil {
			t.Fatal(err)
		}
	}
	n := len(entries)
	sum := Footer{Records: uint64(n)}
	if n > 0 {
		sum.FirstIndex, sum.FirstRevision = entries[0].Index, entries[0].Revision
		sum.LastIndex, sum.LastRevision = entries[n-1].Index, entries[n-1].Revision
	}
	return file, sum
}

func TestSealMatchesWriter(t *testing.T) {
	for _, n := range []int{0, 1, 7} {
		var want bytes.Buffer
		w, err := NewWriter(&want, KindChunk)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range testEntries(5, n) {
			if err := w.AppendEntry(e); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}

		file, sum := frameAll(t, n)
		// Room for the footer: Seal appends in place.
		file = append(make([]byte, 0, len(file)+FooterSize), file...)
		got, err := Seal(file, sum)
		if err != nil {
			t.Fatalf("%d entries: %v", n, err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%d entries: Seal's file differs from the Writer's", n)
		}
		if &got[0] != &file[0] {
			t.Fatalf("%d entries: Seal copied a file that had room for the footer", n)
		}
		entries, r, err := readEntries(writeFile(t, got))
		if err != nil || !r.Sealed() {
			t.Fatalf("%d entries: read back: sealed %v, %v", n, r != nil && r.Sealed(), err)
		}
		equalEntries(t, entries, testEntries(5, n))
	}
}

func TestSealRefusesMalformedFiles(t *testing.T) {
	good, sum := frameAll(t, 4)
	short := sum
	short.Records = 3
	gap := sum
	gap.LastIndex++
	for _, tc := range []struct {
		name string
		file []byte
		sum  Footer
		want string
	}{
		{"no header", good[HeaderSize:], sum, "does not start with a header"},
		{"too short", good[:HeaderSize-1], sum, "shorter than a header"},
		{"cut record", good[:len(good)-3], sum, "malformed record"},
		{"stray bytes", append(bytes.Clone(good), 1, 2), sum, "stray bytes"},
		{"count", good, short, "holds 4 records, the summary says 3"},
		{"not dense", good, gap, "do not number 4 entries"},
	} {
		if _, err := Seal(bytes.Clone(tc.file), tc.sum); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
