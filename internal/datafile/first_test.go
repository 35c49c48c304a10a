package datafile

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// chunkOf builds a chunk of entries, compressed or not.
func chunkOf(t testing.TB, entries []*netsyv1.Entry, compressed bool) []byte {
	t.Helper()
	file := AppendHeader(nil, KindChunk)
	var sum Footer
	for _, e := range entries {
		var err error
		if file, err = FrameEntry(file, e); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(entries); n > 0 {
		sum = Footer{Records: uint64(n), FirstIndex: entries[0].Index, FirstRevision: entries[0].Revision,
			LastIndex: entries[n-1].Index, LastRevision: entries[n-1].Revision}
	}
	var out []byte
	var err error
	if compressed {
		out, err = SealCompressed(file, sum)
	} else {
		out, err = Seal(file, sum)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// randomEntries are n entries from first with incompressible 1 KiB values,
// so a compressed chunk of them spans many zstd blocks.
func randomEntries(first uint64, n int) []*netsyv1.Entry {
	rnd := rand.New(rand.NewPCG(first, 7))
	entries := testEntries(first, n)
	for _, e := range entries {
		for _, op := range e.Ops {
			op.Value = make([]byte, 1024)
			for i := range op.Value {
				op.Value[i] = byte(rnd.Uint32())
			}
		}
	}
	return entries
}

// The first entry of a chunk is read from its first record alone: a
// search through chunks by their first index (objwal's follower
// checkpoint) no longer downloads and decodes each chunk whole. One
// FirstEntryReader reads file after file, compressed or not.
func TestFirstEntryReadsOnlyTheStartOfAChunk(t *testing.T) {
	var fr FirstEntryReader
	for i, compressed := range []bool{true, false, true} {
		entries := randomEntries(uint64(1000*i+5), 600)
		body := chunkOf(t, entries, compressed)
		src := &countingReader{r: bytes.NewReader(body)}
		e, err := fr.FirstEntry("wal/1", src)
		if err != nil {
			t.Fatalf("compressed=%v: %v", compressed, err)
		}
		if !proto.Equal(e, entries[0]) {
			t.Fatalf("compressed=%v: first entry %v, want %v", compressed, e, entries[0])
		}
		// A zstd block is at most 128 KiB; the chunk is about 600 KiB.
		if src.n > 200<<10 || src.n*2 > len(body) {
			t.Fatalf("compressed=%v: read %d bytes of a %d-byte chunk for its first entry", compressed, src.n, len(body))
		}
	}
}

// A claim's empty chunk has no first entry; its footer is still checked.
func TestFirstEntryOfAnEmptyChunk(t *testing.T) {
	var fr FirstEntryReader
	for _, compressed := range []bool{false, true} {
		body := chunkOf(t, nil, compressed)
		e, err := fr.FirstEntry("wal/1", bytes.NewReader(body))
		if err != nil || e != nil {
			t.Fatalf("compressed=%v: empty chunk gave %v, %v; want nil, nil", compressed, e, err)
		}
	}
	body := chunkOf(t, nil, false)
	body[HeaderSize+4]++ // the footer's record count
	if _, err := fr.FirstEntry("wal/1", bytes.NewReader(body)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("empty chunk with a damaged footer: %v, want corruption", err)
	}
}

// Damage where the first entry is read is corruption naming the file; a
// failing source is passed on as itself (a broken transfer, worth a
// retry); a file that holds no entries is refused.
func TestFirstEntryDamageAndErrors(t *testing.T) {
	var fr FirstEntryReader
	entries := randomEntries(3, 50)
	plain := chunkOf(t, entries, false)
	flipped := bytes.Clone(plain)
	flipped[HeaderSize+RecordHeaderSize+3] ^= 1
	packed := chunkOf(t, entries, true)
	for name, body := range map[string][]byte{
		"flipped payload":       flipped,
		"cut in the first one":  plain[:HeaderSize+RecordHeaderSize+2],
		"cut in the header":     plain[:HeaderSize-1],
		"compressed, cut short": packed[:HeaderSize+20],
	} {
		_, err := fr.FirstEntry("wal/9", bytes.NewReader(body))
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Name != "wal/9" {
			t.Errorf("%s: %v, want a *CorruptError naming wal/9", name, err)
		}
	}
	boom := errors.New("connection reset")
	for _, body := range [][]byte{plain, packed} {
		_, err := fr.FirstEntry("wal/9", io.MultiReader(bytes.NewReader(body[:HeaderSize+4]), &failingReader{err: boom}))
		if !errors.Is(err, boom) || errors.Is(err, ErrCorrupt) {
			t.Errorf("failing source: %v, want the source's error and no corruption", err)
		}
	}
	if _, err := fr.FirstEntry("snapshots/1", bytes.NewReader(encodeSnapshotBytes(t, testSnapshot()))); err == nil {
		t.Error("a snapshot was read as a chunk")
	}
	// After an error the reader still reads the next file.
	if e, err := fr.FirstEntry("wal/10", bytes.NewReader(packed)); err != nil || e.Index != 3 {
		t.Fatalf("after errors: %v, %v; want entry 3", e, err)
	}
}

// BenchmarkFirstEntry reads the first entry of a 600 KiB compressed chunk
// with a reused FirstEntryReader (objwal's follower checkpoint search).
func BenchmarkFirstEntry(b *testing.B) {
	body := chunkOf(b, randomEntries(1, 600), true)
	var fr FirstEntryReader
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fr.FirstEntry("wal/1", bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}
