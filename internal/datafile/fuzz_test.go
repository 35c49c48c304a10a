package datafile

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the FuzzDecode seed corpus under testdata/fuzz")

// FuzzDecode feeds arbitrary bytes to the decoders. They must never panic,
// and whatever Inspect accepts must survive a re-encode unchanged: same
// header, same sealing, same footer ranges, equal records.
func FuzzDecode(f *testing.F) {
	for _, seed := range corpusSeeds(f) {
		f.Add(seed.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := Inspect("fuzz", bytes.NewReader(data))
		if _, _, cerr := DecodeChunk("fuzz", data); cerr == nil && (err != nil || !info.Sealed) {
			t.Fatalf("DecodeChunk accepted what Inspect rejects: %v", err)
		}
		if _, serr := DecodeSnapshot("fuzz", bytes.NewReader(data)); serr == nil && err != nil {
			t.Fatalf("DecodeSnapshot accepted what Inspect rejects: %v", err)
		}
		if err != nil {
			// A compressed file's sizes are those of its decoded form.
			if info != nil && info.Compression == CompressionNone && info.Size > int64(len(data)) {
				t.Fatalf("valid size %d beyond input %d", info.Size, len(data))
			}
			return
		}
		re := reencode(t, info)
		info2, err := Inspect("reencoded", bytes.NewReader(re))
		if err != nil {
			t.Fatalf("re-encoded file rejected: %v", err)
		}
		if info2.Header != info.Header || info2.Sealed != info.Sealed || len(info2.Records) != len(info.Records) {
			t.Fatalf("re-encode changed the file: %+v vs %+v", info2, info)
		}
		if info.Sealed {
			a, b := *info.Footer, *info2.Footer
			a.CRC, b.CRC = 0, 0
			if a != b {
				t.Fatalf("re-encode changed the footer: %+v vs %+v", b, a)
			}
		}
		for i, r := range info.Records {
			r2 := info2.Records[i]
			if !proto.Equal(r.Entry, r2.Entry) || !proto.Equal(r.Snapshot, r2.Snapshot) {
				t.Fatalf("record %d changed: %v vs %v", i, r2, r)
			}
		}
	})
}

func reencode(t *testing.T, info *Info) []byte {
	var buf bytes.Buffer
	var w *Writer
	var cw *CompressedWriter
	var err error
	if info.Compression == CompressionZstd {
		if cw, err = NewCompressedWriter(&buf, info.Kind); err == nil {
			w = cw.Writer
		}
	} else {
		w, err = NewWriter(&buf, info.Kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range info.Records {
		if r.Entry != nil {
			err = w.AppendEntry(r.Entry)
		} else {
			err = w.appendMessage(r.Snapshot)
		}
		if err != nil {
			t.Fatalf("re-encode accepted record: %v", err)
		}
	}
	if info.Sealed {
		if info.Kind == KindSnapshot {
			w.setRange(info.Footer.FirstIndex, info.Footer.FirstRevision)
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	if cw != nil {
		if err := cw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

type seed struct {
	name string
	data []byte
}

func corpusSeeds(t testing.TB) []seed {
	entries := testEntries(1, 4)
	chunk, err := EncodeChunk(entries)
	if err != nil {
		t.Fatal(err)
	}
	unsealed := encodeSegment(t, entries, false)
	torn := bytes.Clone(unsealed[:len(unsealed)-3])
	flipped := bytes.Clone(chunk)
	flipped[HeaderSize+10] ^= 0x08
	return []seed{
		{"valid-chunk", chunk},
		{"valid-unsealed-segment", unsealed},
		{"valid-sealed-segment", encodeSegment(t, entries, true)},
		// valid-snapshot is the format before compression, kept readable.
		{"valid-snapshot", encodeSnapshotPlain(t, testSnapshot())},
		{"valid-snapshot-zstd", encodeSnapshotBytes(t, testSnapshot())},
		{"valid-empty-segment", encodeSegment(t, nil, false)},
		{"padded-unsealed-segment", append(bytes.Clone(unsealed), make([]byte, 64)...)},
		{"padded-sealed-segment", append(encodeSegment(t, entries, true), make([]byte, 64)...)},
		{"torn-segment", torn},
		{"flipped-chunk", flipped},
		{"zstd-header", header(headerMagic, 1, byte(KindChunk), byte(CompressionZstd), 0)},
		{"not-a-data-file", []byte("PK\x03\x04 this is a zip file")},
	}
}

// TestFuzzCorpus keeps the committed seed corpus in step with the format:
// run with -update-corpus after a format change.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	for _, s := range corpusSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
		p := filepath.Join(dir, s.name)
		if *updateCorpus {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) || (err == nil && string(got) != body) {
			t.Fatalf("seed %s is stale: go test ./internal/datafile -run TestFuzzCorpus -update-corpus", p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
