package datafile

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// encodeSnapshotPlain writes s uncompressed, as builds before compression
// did.
func encodeSnapshotPlain(t testing.TB, s *Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, s, false); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func snapshotsEqual(a, b *Snapshot) bool {
	if a.Header.Index != b.Header.Index || a.Header.Revision != b.Header.Revision ||
		a.Header.CompactRevision != b.Header.CompactRevision || a.Header.WalSeq != b.Header.WalSeq ||
		len(a.KVs) != len(b.KVs) || len(a.Leases) != len(b.Leases) {
		return false
	}
	for i := range a.KVs {
		if !proto.Equal(a.KVs[i], b.KVs[i]) {
			return false
		}
	}
	for i := range a.Leases {
		if !proto.Equal(a.Leases[i], b.Leases[i]) {
			return false
		}
	}
	return true
}

// bigSnapshot holds n keys whose 256-byte values are random but shared by
// groups of keys, as objects stored under many names are.
func bigSnapshot(t testing.TB, n int) *Snapshot {
	t.Helper()
	vals := make([][]byte, 16)
	for i := range vals {
		vals[i] = make([]byte, 256)
		if _, err := rand.Read(vals[i]); err != nil {
			t.Fatal(err)
		}
	}
	s := &Snapshot{Header: &netsyv1.SnapshotHeader{Index: uint64(n), Revision: int64(n) + 1}}
	for i := range n {
		s.KVs = append(s.KVs, &netsyv1.KeyVersion{
			Key: []byte(fmt.Sprintf("/registry/pods/ns-%d/pod-%08d", i%7, i)), Value: vals[i%len(vals)],
			CreateRevision: int64(i) + 2, ModRevision: int64(i) + 2, Version: 1,
		})
	}
	return s
}

func TestSnapshotIsWrittenCompressedAndReadBack(t *testing.T) {
	s := bigSnapshot(t, 20000)
	plain := encodeSnapshotPlain(t, s)
	packed := encodeSnapshotBytes(t, s)
	info, err := Inspect("packed", bytes.NewReader(packed))
	if err != nil {
		t.Fatal(err)
	}
	if info.Compression != CompressionZstd || !info.Sealed {
		t.Fatalf("header says compression %s sealed %v, want zstd and sealed", info.Compression, info.Sealed)
	}
	if len(packed)*4 > len(plain) {
		t.Fatalf("compressed snapshot is %d bytes, uncompressed %d: want at most a quarter", len(packed), len(plain))
	}
	got, err := DecodeSnapshot("packed", bytes.NewReader(packed))
	if err != nil {
		t.Fatal(err)
	}
	if !snapshotsEqual(got, s) {
		t.Fatal("compressed snapshot decodes to a different snapshot")
	}
}

// A snapshot written before compression existed (the committed fuzz seed,
// made by the old encoder) still decodes.
func TestUncompressedSnapshotFromOlderBuildDecodes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecode", "valid-snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(raw), "\n", 3)
	q := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
	data, err := strconv.Unquote(q)
	if err != nil {
		t.Fatal(err)
	}
	if Compression(data[6]) != CompressionNone {
		t.Fatalf("fixture is compressed (%d): it must stay the old format", data[6])
	}
	got, err := DecodeSnapshot("old", strings.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !snapshotsEqual(got, testSnapshot()) {
		t.Fatal("old snapshot decodes to a different snapshot")
	}
}

func TestCompressedSnapshotCutShortIsCorruption(t *testing.T) {
	data := encodeSnapshotBytes(t, bigSnapshot(t, 2000))
	for _, cut := range []int{HeaderSize + 1, HeaderSize + 7, len(data) / 2, len(data) - 1} {
		_, err := DecodeSnapshot("snap", bytes.NewReader(data[:cut]))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "snap") {
			t.Fatalf("cut at %d of %d: want corruption naming the file, got %v", cut, len(data), err)
		}
	}
}

// A read error of the source is passed on as itself, not as damage: a
// download that fails half-way is retried, never taken for corruption.
func TestCompressedSnapshotSourceErrorIsNotCorruption(t *testing.T) {
	data := encodeSnapshotBytes(t, bigSnapshot(t, 2000))
	boom := errors.New("connection reset")
	_, err := DecodeSnapshot("snap", &failingReader{data: data[:len(data)/2], err: boom})
	if !errors.Is(err, boom) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("want the source's error, got %v", err)
	}
}

type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestSegmentsAreNeverCompressed(t *testing.T) {
	if _, err := NewCompressedWriter(&bytes.Buffer{}, KindSegment); err == nil {
		t.Fatal("a compressed segment writer was created")
	}
}

func BenchmarkDecodeSnapshot(b *testing.B) {
	s := bigSnapshot(b, 50000)
	for _, tc := range []struct {
		name string
		data []byte
	}{{"plain", encodeSnapshotPlain(b, s)}, {"zstd", encodeSnapshotBytes(b, s)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(encodeSnapshotPlain(b, s)))) // decoded MB/s
			for b.Loop() {
				if _, err := DecodeSnapshot("b", bytes.NewReader(tc.data)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncodeSnapshot(b *testing.B) {
	s := bigSnapshot(b, 50000)
	plain := len(encodeSnapshotPlain(b, s))
	for _, compress := range []bool{false, true} {
		b.Run(fmt.Sprintf("compress=%v", compress), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(plain)) // MB/s of snapshot encoded, either way
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := encodeSnapshot(&buf, s, compress); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestSealCompressedChunkDecodesToTheSameEntries(t *testing.T) {
	entries := testEntries(7, 300)
	fatten(entries, bytes.Repeat([]byte("pod spec "), 100))
	build := func() ([]byte, Footer) {
		file := AppendHeader(nil, KindChunk)
		for _, e := range entries {
			var err error
			if file, err = FrameEntry(file, e); err != nil {
				t.Fatal(err)
			}
		}
		last := entries[len(entries)-1]
		return file, Footer{Records: uint64(len(entries)), FirstIndex: entries[0].Index, FirstRevision: entries[0].Revision,
			LastIndex: last.Index, LastRevision: last.Revision}
	}
	file, sum := build()
	plain, err := Seal(bytes.Clone(file), sum)
	if err != nil {
		t.Fatal(err)
	}
	packed, err := SealCompressed(file, sum)
	if err != nil {
		t.Fatal(err)
	}
	file2, _ := build()
	again, err := SealCompressed(file2, sum)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(packed, again) {
		t.Fatal("the same chunk compressed twice gave different bytes: a retried PUT would look like another writer's")
	}
	if Compression(packed[6]) != CompressionZstd || len(packed)*4 > len(plain) {
		t.Fatalf("compressed chunk: compression %d, %d bytes (plain %d)", packed[6], len(packed), len(plain))
	}
	got, f, err := DecodeChunk("chunk", packed)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(entries) || f.FirstIndex != sum.FirstIndex || f.LastIndex != sum.LastIndex {
		t.Fatalf("decoded %d entries %d..%d, want %d %d..%d", len(got), f.FirstIndex, f.LastIndex, len(entries), sum.FirstIndex, sum.LastIndex)
	}
	for i := range got {
		if !proto.Equal(got[i], entries[i]) {
			t.Fatalf("entry %d differs", i)
		}
	}
	// Every bit of the compressed chunk matters or changes nothing.
	for bit := 0; bit < len(packed)*8; bit += 7 {
		data := bytes.Clone(packed)
		data[bit/8] ^= 1 << (bit % 8)
		es, _, err := DecodeChunk("chunk", data)
		if err == nil && bit/8 >= HeaderSize {
			same := len(es) == len(entries)
			for i := 0; same && i < len(es); i++ {
				same = proto.Equal(es[i], entries[i])
			}
			if same {
				continue
			}
		}
		if err == nil || !strings.Contains(err.Error(), "chunk") {
			t.Fatalf("bit %d flipped: want an error naming the chunk, got %v", bit, err)
		}
	}
}

// A sealer and a body buffer kept from chunk to chunk (objwal's uploader)
// give each chunk exactly the bytes a fresh sealer gives it, whatever the
// buffer held before, and the body shares no memory with the frames: the
// pending buffer they came from is refilled while the body is uploaded.
func TestReusedSealerAndBufferSealLikeFreshOnes(t *testing.T) {
	build := func(first uint64, n int, v []byte) ([]byte, Footer) {
		entries := testEntries(first, n)
		fatten(entries, v)
		return frameEntries(t, entries)
	}
	sl, err := NewChunkSealer()
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte{0xee}, 1<<16)[:0]
	next := uint64(1)
	// Large, then small, then empty, then large again: a shorter chunk
	// sealed into a longer one's buffer must not keep its tail.
	for i, n := range []int{2000, 3, 0, 1, 500, 2000} {
		v := bytes.Repeat([]byte{byte('a' + i)}, 40+i*50)
		file, sum := build(next, n, v)
		next += uint64(n)
		fresh, _ := build(sum.FirstIndex, n, v)
		want, err := SealCompressed(fresh, sum)
		if err != nil {
			t.Fatal(err)
		}
		body, err = sl.AppendSeal(body[:0], file, sum)
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		for j := range file[:cap(file)] {
			file[:cap(file)][j] = 0xaa // the pending buffer, refilled
		}
		if !bytes.Equal(body, want) {
			t.Fatalf("chunk %d (%d entries): reused sealer and buffer gave %d bytes that differ from a fresh sealer's %d",
				i, n, len(body), len(want))
		}
		if got, f, err := DecodeChunk("chunk", body); err != nil || len(got) != n || f.Records != uint64(n) {
			t.Fatalf("chunk %d: decoded %d entries, footer %+v, %v", i, len(got), f, err)
		}
	}
	// AppendSeal appends: what dst holds stays in front.
	file, sum := build(1, 10, []byte("x"))
	want, err := SealCompressed(bytes.Clone(file), sum)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sl.AppendSeal([]byte("prefix"), file, sum)
	if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("AppendSeal after a prefix: %q..., %v", got[:min(len(got), 8)], err)
	}
}

// BenchmarkSealCompressedChunk seals a chunk of 1000 entries: plain, with a
// sealer made per call (SealCompressed), with one sealer kept (objwal's
// Log), and with one sealer and one body buffer kept (objwal's uploader).
func BenchmarkSealCompressedChunk(b *testing.B) {
	entries := testEntries(1, 1000)
	fatten(entries, bytes.Repeat([]byte{7}, 256))
	file := AppendHeader(nil, KindChunk)
	for _, e := range entries {
		file, _ = FrameEntry(file, e)
	}
	sum := Footer{Records: 1000, FirstIndex: entries[0].Index, FirstRevision: entries[0].Revision,
		LastIndex: entries[999].Index, LastRevision: entries[999].Revision}
	sl, err := NewChunkSealer()
	if err != nil {
		b.Fatal(err)
	}
	var body []byte
	for _, how := range []string{"false", "fresh", "reused", "reused-dst"} {
		b.Run("compress="+how, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(file)))
			buf := make([]byte, len(file), len(file)+FooterSize)
			for b.Loop() {
				copy(buf, file)
				var err error
				switch how {
				case "false":
					_, err = Seal(buf[:len(file)], sum)
				case "fresh":
					_, err = SealCompressed(buf[:len(file)], sum)
				case "reused":
					_, err = sl.Seal(buf[:len(file)], sum)
				case "reused-dst":
					body, err = sl.AppendSeal(body[:0], buf[:len(file)], sum)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fatten gives every put in entries the value v.
func fatten(entries []*netsyv1.Entry, v []byte) {
	for _, e := range entries {
		for _, op := range e.Ops {
			op.Value = v
		}
	}
}
