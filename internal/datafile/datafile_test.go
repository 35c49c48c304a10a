package datafile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

func testEntries(first uint64, n int) []*netsyv1.Entry {
	out := make([]*netsyv1.Entry, n)
	rev := int64(first) + 10
	for i := range out {
		e := &netsyv1.Entry{Index: first + uint64(i), Revision: rev, Term: 3}
		switch i % 3 {
		case 0:
			e.Ops = []*netsyv1.Op{{Key: []byte(fmt.Sprintf("/registry/pods/p%d", i)), Value: bytes.Repeat([]byte{byte(i)}, i%7+1), Lease: int64(i % 2)}}
			rev++
			e.Revision = rev
		case 1:
			e.LeaseGrants = []*netsyv1.LeaseGrant{{Id: int64(i), Ttl: 30}}
		case 2:
			e.Ops = []*netsyv1.Op{{Type: netsyv1.Op_DELETE, Key: []byte("k")}}
			e.CompactRevision = rev - 1
			rev++
			e.Revision = rev
		}
		out[i] = e
	}
	return out
}

func testSnapshot() *Snapshot {
	return &Snapshot{
		Header: &netsyv1.SnapshotHeader{Index: 42, Revision: 40, CompactRevision: 10, Term: 2, WalSeq: 7},
		KVs: []*netsyv1.KeyVersion{
			{Key: []byte("a"), Value: []byte("1"), CreateRevision: 11, ModRevision: 11, Version: 1},
			{Key: []byte("b"), Value: []byte("2"), CreateRevision: 12, ModRevision: 12, Sub: 0, Version: 1, Lease: 5},
			{Key: []byte("a"), CreateRevision: 11, ModRevision: 12, Sub: 1, Version: 2, Tombstone: true},
		},
		Leases: []*netsyv1.SnapshotLease{{Id: 5, Ttl: 60}},
	}
}

// encodeSegment writes entries as a segment, sealed or not.
func encodeSegment(t testing.TB, entries []*netsyv1.Entry, seal bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, KindSegment)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := w.AppendEntry(e); err != nil {
			t.Fatal(err)
		}
	}
	if seal {
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func encodeSnapshotBytes(t testing.TB, s *Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := EncodeSnapshot(&buf, s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// readEntries reads a file from disk through a Reader, as the WAL does.
func readEntries(path string) (entries []*netsyv1.Entry, r *Reader, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r, err = NewReader(path, f)
	if err != nil {
		return nil, nil, err
	}
	for {
		e, err := r.NextEntry()
		if err == io.EOF {
			return entries, r, nil
		}
		if err != nil {
			return entries, r, err
		}
		entries = append(entries, e)
	}
}

func equalEntries(t *testing.T, got, want []*netsyv1.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("entry %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

// boundaries returns the end offset of the header and of every record.
func boundaries(data []byte) []int {
	out := []int{HeaderSize}
	for off := HeaderSize; off+RecordHeaderSize <= len(data); {
		n := binary.LittleEndian.Uint32(data[off:])
		if n == footerMarker {
			break
		}
		off += RecordHeaderSize + int(n)
		out = append(out, off)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	entries := testEntries(100, 25)
	chunk, err := EncodeChunk(entries)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		data   []byte
		kind   Kind
		sealed bool
	}{
		{"unsealed segment", encodeSegment(t, entries, false), KindSegment, false},
		{"sealed segment", encodeSegment(t, entries, true), KindSegment, true},
		{"empty segment", encodeSegment(t, nil, false), KindSegment, false},
		{"chunk", chunk, KindChunk, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.data)
			got, r, err := readEntries(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Header().Kind != tc.kind || r.Sealed() != tc.sealed {
				t.Fatalf("kind %s sealed %v, want %s %v", r.Header().Kind, r.Sealed(), tc.kind, tc.sealed)
			}
			if tc.name == "empty segment" {
				equalEntries(t, got, nil)
				return
			}
			equalEntries(t, got, entries)
			if tc.sealed {
				f, _ := r.Footer()
				want := Footer{Records: 25, FirstIndex: 100, LastIndex: 124, FirstRevision: entries[0].Revision, LastRevision: entries[24].Revision}
				f.CRC = 0
				if f != want {
					t.Fatalf("footer %+v, want %+v", f, want)
				}
				if got, want := binary.LittleEndian.Uint32(tc.data[len(tc.data)-8:]), crc32.Checksum(tc.data[:len(tc.data)-8], castagnoli); got != want {
					t.Fatalf("footer crc %08x does not cover the file before it (%08x)", got, want)
				}
			}
		})
	}

	t.Run("DecodeChunk", func(t *testing.T) {
		for _, data := range [][]byte{chunk, encodeSegment(t, entries, true)} {
			got, f, err := DecodeChunk("wal/00000000000000000001", data)
			if err != nil {
				t.Fatal(err)
			}
			equalEntries(t, got, entries)
			if f.Records != 25 || f.FirstIndex != 100 || f.LastIndex != 124 {
				t.Fatalf("footer %+v", f)
			}
		}
		if _, _, err := DecodeChunk("seg", encodeSegment(t, entries, false)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "missing footer") {
			t.Fatalf("unsealed segment as chunk: %v", err)
		}
	})

	t.Run("snapshot", func(t *testing.T) {
		s := testSnapshot()
		p := writeFile(t, encodeSnapshotBytes(t, s))
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got, err := DecodeSnapshot(p, f)
		if err != nil {
			t.Fatal(err)
		}
		wantHeader := proto.Clone(s.Header).(*netsyv1.SnapshotHeader)
		wantHeader.KeyVersions, wantHeader.Leases = 3, 1
		if !proto.Equal(got.Header, wantHeader) || len(got.KVs) != 3 || len(got.Leases) != 1 {
			t.Fatalf("got %v", got)
		}
		for i := range got.KVs {
			if !proto.Equal(got.KVs[i], s.KVs[i]) {
				t.Fatalf("kv %d: %v", i, got.KVs[i])
			}
		}
		if !proto.Equal(got.Leases[0], s.Leases[0]) {
			t.Fatalf("lease %v", got.Leases[0])
		}
		if s.Header.KeyVersions != 0 {
			t.Fatal("EncodeSnapshot modified the caller's header")
		}
	})

	t.Run("empty snapshot", func(t *testing.T) {
		s := &Snapshot{Header: &netsyv1.SnapshotHeader{Index: 1, Revision: 1}}
		got, err := DecodeSnapshot("s", bytes.NewReader(encodeSnapshotBytes(t, s)))
		if err != nil || len(got.KVs) != 0 || len(got.Leases) != 0 {
			t.Fatalf("got %v, %v", got, err)
		}
	})
}

func TestTruncatedAtEveryOffset(t *testing.T) {
	entries := testEntries(1, 6)
	chunk, err := EncodeChunk(entries)
	if err != nil {
		t.Fatal(err)
	}
	files := []struct {
		name   string
		data   []byte
		sealed bool
	}{
		{"unsealed segment", encodeSegment(t, entries, false), false},
		{"sealed segment", encodeSegment(t, entries, true), true},
		{"chunk", chunk, true},
		{"snapshot", encodeSnapshotBytes(t, testSnapshot()), true},
	}
	dir := t.TempDir()
	for _, tc := range files {
		t.Run(tc.name, func(t *testing.T) {
			bounds := boundaries(tc.data)
			for cut := 0; cut < len(tc.data); cut++ {
				p := filepath.Join(dir, fmt.Sprintf("%s-%d", strings.ReplaceAll(tc.name, " ", "-"), cut))
				if err := os.WriteFile(p, tc.data[:cut], 0o600); err != nil {
					t.Fatal(err)
				}
				var got []*netsyv1.Entry
				var r *Reader
				switch tc.name {
				case "chunk":
					_, _, err = DecodeChunk(p, tc.data[:cut])
				case "snapshot":
					_, err = DecodeSnapshot(p, bytes.NewReader(tc.data[:cut]))
				default:
					got, r, err = readEntries(p)
				}
				if cut < HeaderSize || tc.name == "chunk" || tc.name == "snapshot" {
					// Nothing that must be sealed may be accepted short.
					if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
						t.Fatalf("cut %d: want corruption naming the file, got %v", cut, err)
					}
					continue
				}
				// The last boundary at or below the cut is where the valid
				// prefix ends.
				valid := 0
				for i, b := range bounds {
					if b <= cut {
						valid = i
					}
				}
				equalEntries(t, got, entries[:valid])
				var torn *TornTailError
				switch {
				case cut == bounds[valid]:
					if err != nil {
						t.Fatalf("cut %d at a record boundary: %v", cut, err)
					}
				case errors.As(err, &torn):
					if torn.Offset != int64(bounds[valid]) || torn.Name != p {
						t.Fatalf("cut %d: torn tail %+v, want offset %d", cut, torn, bounds[valid])
					}
				default:
					t.Fatalf("cut %d: want a torn tail, got %v", cut, err)
				}
				tail, ok := r.Tail()
				if !ok || tail.Offset != int64(bounds[valid]) || tail.Summary.Records != uint64(valid) {
					t.Fatalf("cut %d: tail %+v %v", cut, tail, ok)
				}
			}
		})
	}
}

func TestBitFlips(t *testing.T) {
	entries := testEntries(7, 5)
	chunk, err := EncodeChunk(entries)
	if err != nil {
		t.Fatal(err)
	}
	unsealed := encodeSegment(t, entries, false)
	bounds := boundaries(unsealed)
	lastRecord := bounds[len(bounds)-2]
	files := []struct {
		name string
		data []byte
	}{
		{"chunk", chunk},
		{"sealed-segment", encodeSegment(t, entries, true)},
		{"unsealed-segment", unsealed},
		{"snapshot", encodeSnapshotBytes(t, testSnapshot())},
	}
	for _, tc := range files {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "snapshots", "00000000000000000042")
			for bit := 0; bit < len(tc.data)*8; bit++ {
				data := bytes.Clone(tc.data)
				data[bit/8] ^= 1 << (bit % 8)
				var err error
				switch tc.name {
				case "chunk":
					_, _, err = DecodeChunk(p, data)
				case "snapshot":
					var s *Snapshot
					s, err = DecodeSnapshot(p, bytes.NewReader(data))
					// A few bits of a zstd frame header (an unused flag,
					// the window size) change no decoded byte; every
					// decoded byte is checksummed. What must never happen
					// is a different snapshot read without an error.
					if err == nil && bit/8 >= HeaderSize && snapshotsEqual(s, testSnapshot()) {
						continue
					}
				default:
					_, err = Inspect(p, bytes.NewReader(data))
				}
				if err == nil || !strings.Contains(err.Error(), p) {
					t.Fatalf("bit %d (byte %d) flipped: want an error naming %s, got %v", bit, bit/8, p, err)
				}
				// Damage before the last record of an unsealed segment has
				// acknowledged data behind it: never a truncatable tail.
				if tc.name == "unsealed-segment" && bit/8 >= HeaderSize && bit/8 < lastRecord && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("bit %d (byte %d) flipped before the last record: want corruption, got %v", bit, bit/8, err)
				}
				if tc.name != "unsealed-segment" && errors.Is(err, ErrTornTail) {
					t.Fatalf("bit %d flipped in a sealed file reported as torn tail: %v", bit, err)
				}
			}
		})
	}
}

// header builds a header with a valid checksum, so only the field under test
// is wrong.
func header(magic [4]byte, version, kind, compression byte, flags uint32) []byte {
	var b [HeaderSize]byte
	copy(b[:], magic[:])
	b[4], b[5], b[6] = version, kind, compression
	binary.LittleEndian.PutUint32(b[8:], flags)
	binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
	return b[:]
}

func TestBadHeaders(t *testing.T) {
	good := header(headerMagic, FormatVersion, byte(KindChunk), 0, 0)
	badCRC := bytes.Clone(good)
	badCRC[13] ^= 0xff
	tests := []struct {
		name string
		data []byte
		want error
		text string
	}{
		{"empty", nil, ErrCorrupt, "truncated header"},
		{"short", good[:9], ErrCorrupt, "truncated header"},
		{"magic", header([4]byte{'P', 'K', 3, 4}, 1, 1, 0, 0), ErrCorrupt, "not a netsy data file"},
		{"version", header(headerMagic, 2, 1, 0, 0), ErrUnsupportedVersion, "version 2"},
		{"zstd", header(headerMagic, 1, 1, byte(CompressionZstd), 0), ErrUnsupportedCompression, "unsupported compression zstd"},
		{"compression 9", header(headerMagic, 1, 2, 9, 0), ErrUnsupportedCompression, "compression(9)"},
		{"flags", header(headerMagic, 1, 1, 0, 4), ErrUnsupportedFlags, "0x4"},
		{"kind", header(headerMagic, 1, 9, 0, 0), ErrCorrupt, "unknown kind 9"},
		{"header crc", badCRC, ErrCorrupt, "header checksum"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.data)
			_, _, err := readEntries(p)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), p) {
				t.Fatalf("got %v, want %v mentioning %q and the file", err, tc.want, tc.text)
			}
		})
	}
}

func TestTornTailOrCorruption(t *testing.T) {
	entries := testEntries(1, 8)
	seg := encodeSegment(t, entries, false)
	bounds := boundaries(seg)

	t.Run("garbage after the last record is torn", func(t *testing.T) {
		data := append(bytes.Clone(seg), 0x10, 0, 0, 0, 1, 2, 3, 4, 5, 6)
		_, _, err := readEntries(writeFile(t, data))
		if !errors.Is(err, ErrTornTail) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("bad record followed by valid ones is corruption", func(t *testing.T) {
		data := bytes.Clone(seg)
		data[bounds[3]+RecordHeaderSize+1] ^= 0x40
		p := writeFile(t, data)
		got, _, err := readEntries(p)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Offset != int64(bounds[3]) || ce.Name != p {
			t.Fatalf("got %v", err)
		}
		equalEntries(t, got, entries[:3])
	})
	t.Run("damaged record of a sealed segment is corruption", func(t *testing.T) {
		data := encodeSegment(t, entries, true)
		data[bounds[7]+RecordHeaderSize] ^= 1 // the last record
		_, _, err := readEntries(writeFile(t, data))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "sealed") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("data after footer", func(t *testing.T) {
		data := append(encodeSegment(t, entries, true), 1)
		_, _, err := readEntries(writeFile(t, data))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "after footer") {
			t.Fatalf("got %v", err)
		}
	})
}

// TestZeroPadding pins down the rule for the zeros a preallocated segment
// ends in (see the package doc): zeros to the end are the clean end, zeros
// followed by anything else are damage.
func TestZeroPadding(t *testing.T) {
	entries := testEntries(1, 8)
	seg := encodeSegment(t, entries, false)
	sealed := encodeSegment(t, entries, true)
	footer := sealed[len(seg):]
	bounds := boundaries(seg)
	zeros := func(n int) []byte { return make([]byte, n) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	junk := []byte{0x5a}

	const (
		clean   = "clean"
		torn    = "torn"
		corrupt = "corrupt"
	)
	tests := []struct {
		name    string
		data    []byte
		want    string
		entries int    // entries read before the end or the damage
		offset  int    // Reader.Offset: where padding or damage starts
		sealed  bool   // for clean files
		text    string // in the error
	}{
		{"one zero byte", cat(seg, zeros(1)), clean, 8, len(seg), false, ""},
		{"part of a record header", cat(seg, zeros(7)), clean, 8, len(seg), false, ""},
		{"one record header", cat(seg, zeros(RecordHeaderSize)), clean, 8, len(seg), false, ""},
		{"more than the scan buffer", cat(seg, zeros(300<<10)), clean, 8, len(seg), false, ""},
		{"empty segment", cat(seg[:HeaderSize], zeros(4096)), clean, 0, HeaderSize, false, ""},
		{"after the footer", cat(sealed, zeros(4096)), clean, 8, len(sealed), true, ""},
		{"junk inside the padding", cat(seg, zeros(5000), junk, zeros(3000)), torn, 8, len(seg), false, "nonzero byte at offset " + fmt.Sprint(len(seg)+5000)},
		{"junk at the very end", cat(seg, zeros(70<<10), junk), torn, 8, len(seg), false, "nonzero byte"},
		{"junk right after a zero record header", cat(seg, zeros(RecordHeaderSize), junk, zeros(100)), torn, 8, len(seg), false, "nonzero byte"},
		{"a valid record after zeros", cat(seg[:bounds[6]], zeros(100), seg[bounds[6]:bounds[7]], zeros(100)), corrupt, 6, bounds[6], false, "followed by a valid record"},
		{"zeros in place of a record", cat(seg[:bounds[5]], zeros(bounds[6]-bounds[5]), seg[bounds[6]:]), corrupt, 5, bounds[5], false, "followed by a valid record"},
		{"torn record, then zeros", cat(seg[:bounds[7]+11], zeros(4096)), torn, 7, bounds[7], false, "checksum mismatch"},
		{"torn record header, then zeros", cat(seg[:bounds[7]+2], zeros(4096)), torn, 7, bounds[7], false, "checksum mismatch"},
		{"footer cut short", cat(seg, footer[:30], zeros(4096)), torn, 8, len(seg), false, "truncated footer"},
		{"footer cut short at the end of the file", cat(seg, footer[:30], zeros(FooterSize-30)), torn, 8, len(seg), false, "truncated footer"},
		{"footer cut inside its magic", cat(seg, footer[:FooterSize-2], zeros(4096)), torn, 8, len(seg), false, "truncated footer"},
		{"footer cut after one byte of its magic", cat(seg, footer[:FooterSize-3], zeros(4096)), torn, 8, len(seg), false, "truncated footer"},
		{"zeros before the footer", cat(seg, zeros(64), footer), corrupt, 8, len(seg), false, "in a sealed file"},
		{"junk after the footer's padding", cat(sealed, zeros(100), junk), corrupt, 8, 0, false, "data after footer"},
		{"damaged last record of a padded sealed file", cat(sealed[:bounds[7]+9], []byte{sealed[bounds[7]+9] ^ 1}, sealed[bounds[7]+10:], zeros(4096)), corrupt, 7, bounds[7], false, "in a sealed file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.data)
			got, r, err := readEntries(p)
			equalEntries(t, got, entries[:tc.entries])
			var te *TornTailError
			var ce *CorruptError
			switch tc.want {
			case clean:
				if err != nil || r.Sealed() != tc.sealed || r.Offset() != int64(tc.offset) {
					t.Fatalf("got err %v sealed %v offset %d; want a clean end at %d, sealed %v", err, r.Sealed(), r.Offset(), tc.offset, tc.sealed)
				}
				if tail, ok := r.Tail(); ok != !tc.sealed || (ok && tail.Offset != int64(tc.offset)) {
					t.Fatalf("tail %+v %v", tail, ok)
				}
			case torn:
				if !errors.As(err, &te) || te.Offset != int64(tc.offset) || te.Name != p || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("got %v; want a torn tail at %d saying %q", err, tc.offset, tc.text)
				}
				if tail, ok := r.Tail(); !ok || tail.Offset != int64(tc.offset) || tail.Summary.Records != uint64(tc.entries) {
					t.Fatalf("tail %+v %v", tail, ok)
				}
			case corrupt:
				if !errors.As(err, &ce) || ce.Name != p || !strings.Contains(err.Error(), tc.text) || (tc.offset != 0 && ce.Offset != int64(tc.offset)) {
					t.Fatalf("got %v; want corruption at %d saying %q", err, tc.offset, tc.text)
				}
			}
			// Inspect, which `netsyctl inspect` uses, agrees.
			info, ierr := Inspect(p, bytes.NewReader(tc.data))
			if (ierr == nil) != (err == nil) || info == nil || len(info.Records) != tc.entries {
				t.Fatalf("inspect: %v, %+v", ierr, info)
			}
			if err == nil && (info.Size != int64(tc.offset) || info.Sealed != tc.sealed) {
				t.Fatalf("inspect: size %d sealed %v", info.Size, info.Sealed)
			}
		})
	}

	t.Run("never in a file that must be sealed", func(t *testing.T) {
		chunk, err := EncodeChunk(entries)
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{
			"padded chunk":                   cat(chunk, zeros(100)),
			"padded sealed segment as chunk": cat(sealed, zeros(100)),
		} {
			if _, _, err := DecodeChunk(name, data); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "data after footer") {
				t.Fatalf("%s: got %v", name, err)
			}
		}
		if _, _, err := DecodeChunk("padded", cat(seg, zeros(100))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("unsealed padded segment as chunk: got %v", err)
		}
		if _, err := DecodeSnapshot("padded", bytes.NewReader(cat(encodeSnapshotBytes(t, testSnapshot()), zeros(100)))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("padded snapshot: got %v", err)
		}
	})
}

// rawEntryFile writes entries without the Writer's density check, to prove
// the reader has its own.
func rawEntryFile(t *testing.T, kind Kind, entries []*netsyv1.Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, kind)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := w.appendMessage(e); err != nil {
			t.Fatal(err)
		}
	}
	w.sum.FirstIndex, w.sum.LastIndex = entries[0].Index, entries[len(entries)-1].Index
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestEntryChecks(t *testing.T) {
	t.Run("writer refuses a gap", func(t *testing.T) {
		_, err := EncodeChunk([]*netsyv1.Entry{{Index: 1}, {Index: 3}})
		if err == nil || !strings.Contains(err.Error(), "not dense") {
			t.Fatalf("got %v", err)
		}
		if _, err := EncodeChunk([]*netsyv1.Entry{{Index: 0, Revision: 1}}); err == nil {
			t.Fatal("index 0 accepted")
		}
		if _, err := EncodeChunk(nil); err == nil {
			t.Fatal("empty chunk accepted")
		}
	})
	t.Run("reader refuses a gap", func(t *testing.T) {
		data := rawEntryFile(t, KindChunk, []*netsyv1.Entry{{Index: 1}, {Index: 2}, {Index: 4}})
		_, _, err := DecodeChunk("wal/7", data)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "index 4 does not follow 2") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("footer ranges must match", func(t *testing.T) {
		data := rawEntryFile(t, KindChunk, []*netsyv1.Entry{{Index: 1, Revision: 5}, {Index: 2, Revision: 6}})
		_, _, err := DecodeChunk("wal/7", data)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "footer ranges") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a snapshot is not a chunk", func(t *testing.T) {
		_, _, err := DecodeChunk("x", encodeSnapshotBytes(t, testSnapshot()))
		if err == nil || !strings.Contains(err.Error(), "not a WAL chunk") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestSnapshotChecks(t *testing.T) {
	raw := func(recs ...*netsyv1.SnapshotRecord) []byte {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, KindSnapshot)
		if err != nil {
			t.Fatal(err)
		}
		w.setRange(9, 8)
		for _, r := range recs {
			if err := w.appendMessage(r); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	hdr := func(kvs, leases int64) *netsyv1.SnapshotRecord {
		return &netsyv1.SnapshotRecord{Record: &netsyv1.SnapshotRecord_Header{Header: &netsyv1.SnapshotHeader{Index: 9, Revision: 8, KeyVersions: kvs, Leases: leases}}}
	}
	kv := func(rev int64) *netsyv1.SnapshotRecord {
		return &netsyv1.SnapshotRecord{Record: &netsyv1.SnapshotRecord_Kv{Kv: &netsyv1.KeyVersion{Key: []byte("k"), ModRevision: rev}}}
	}
	lease := &netsyv1.SnapshotRecord{Record: &netsyv1.SnapshotRecord_Lease{Lease: &netsyv1.SnapshotLease{Id: 1, Ttl: 5}}}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"ok", raw(hdr(2, 1), kv(1), kv(2), lease), ""},
		{"header not first", raw(kv(1), hdr(1, 0)), "before the header"},
		{"no header", raw(), "no header"},
		{"two headers", raw(hdr(0, 0), hdr(0, 0)), "second snapshot header"},
		{"kv count", raw(hdr(3, 1), kv(1), kv(2), lease), "header counts 3 key versions"},
		{"lease count", raw(hdr(2, 0), kv(1), kv(2), lease), "0 leases"},
		{"kv after lease", raw(hdr(2, 1), kv(1), lease, kv(2)), "after leases"},
		{"kv order", raw(hdr(2, 0), kv(2), kv(1)), "order"},
		{"chunk kind", encodeSegment(t, testEntries(1, 2), true), "is not a snapshot"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSnapshot("snapshots/9", bytes.NewReader(tc.data))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "snapshots/9") {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("encode rejects wrong counts and order", func(t *testing.T) {
		s := testSnapshot()
		s.Header.KeyVersions = 7
		if err := EncodeSnapshot(io.Discard, s); err == nil {
			t.Fatal("wrong count accepted")
		}
		s = testSnapshot()
		s.KVs[0], s.KVs[2] = s.KVs[2], s.KVs[0]
		if err := EncodeSnapshot(io.Discard, s); err == nil {
			t.Fatal("unordered key versions accepted")
		}
		if err := EncodeSnapshot(io.Discard, &Snapshot{}); err == nil {
			t.Fatal("missing header accepted")
		}
	})
}

func TestResumeWriter(t *testing.T) {
	entries := testEntries(50, 10)
	seg := encodeSegment(t, entries[:6], false)
	// A torn half-record after the valid prefix, as a crash leaves it.
	p := writeFile(t, append(bytes.Clone(seg), encodeSegment(t, entries[6:7], false)[HeaderSize:HeaderSize+9]...))

	got, r, err := readEntries(p)
	var torn *TornTailError
	if !errors.As(err, &torn) {
		t.Fatalf("got %v", err)
	}
	equalEntries(t, got, entries[:6])
	tail, ok := r.Tail()
	if !ok || tail.Summary.LastIndex != 55 {
		t.Fatalf("tail %+v", tail)
	}
	if err := os.Truncate(p, tail.Offset); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ResumeWriter(f, tail)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AppendEntry(entries[7]); err == nil {
		t.Fatal("resumed writer accepted a gap")
	}
	for _, e := range entries[6:] {
		if err := w.AppendEntry(e); err != nil {
			t.Fatal(err)
		}
	}
	footer, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if footer.Records != 10 || footer.FirstIndex != 50 || footer.LastIndex != 59 {
		t.Fatalf("footer %+v", footer)
	}
	got, r, err = readEntries(p)
	if err != nil || !r.Sealed() {
		t.Fatalf("sealed %v err %v", r.Sealed(), err)
	}
	equalEntries(t, got, entries)
	if _, err := ResumeWriter(io.Discard, Tail{}); err == nil {
		t.Fatal("zero tail accepted")
	}
}

func TestWriterBreaksOnError(t *testing.T) {
	fw := &failingWriter{after: HeaderSize}
	w, err := NewWriter(fw, KindSegment)
	if err != nil {
		t.Fatal(err)
	}
	e := testEntries(1, 2)
	if err := w.AppendEntry(e[0]); err == nil {
		t.Fatal("write error lost")
	}
	fw.after = 1 << 30
	if err := w.AppendEntry(e[1]); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("writer not broken after an error: %v", err)
	}
	if _, err := w.Finish(); err == nil {
		t.Fatal("finish after an error succeeded")
	}
}

type failingWriter struct{ n, after int }

func (f *failingWriter) Write(b []byte) (int, error) {
	if f.n+len(b) > f.after {
		return 0, errors.New("disk full")
	}
	f.n += len(b)
	return len(b), nil
}

func TestInspect(t *testing.T) {
	entries := testEntries(1, 3)
	info, err := Inspect("seg", bytes.NewReader(encodeSegment(t, entries, false)))
	if err != nil {
		t.Fatal(err)
	}
	if info.Sealed || info.Footer != nil || info.Kind != KindSegment || len(info.Records) != 3 || info.Records[0].Offset != HeaderSize {
		t.Fatalf("info %+v", info)
	}
	out, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind":"segment"`, `"compression":"none"`, `"sealed":false`, `"entry":{`, `"leaseGrants"`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("json %s lacks %s", out, want)
		}
	}

	info, err = Inspect("snap", bytes.NewReader(encodeSnapshotBytes(t, testSnapshot())))
	if err != nil {
		t.Fatal(err)
	}
	if !info.Sealed || info.Footer.Records != 5 || info.Footer.LastIndex != 42 || info.Records[0].Snapshot.GetHeader() == nil {
		t.Fatalf("info %+v", info)
	}

	// The valid part is still reported when the file is damaged.
	data := encodeSegment(t, entries, false)
	data[len(data)-1] ^= 1
	info, err = Inspect("seg", bytes.NewReader(data))
	if !errors.Is(err, ErrTornTail) || info == nil || len(info.Records) != 2 {
		t.Fatalf("info %+v err %v", info, err)
	}
}

func BenchmarkAppendEntry(b *testing.B) {
	e := testEntries(1, 1)[0]
	e.Ops[0].Value = bytes.Repeat([]byte("v"), 200)
	w, err := NewWriter(io.Discard, KindSegment)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Index = uint64(i + 1)
		if err := w.AppendEntry(e); err != nil {
			b.Fatal(err)
		}
	}
}
