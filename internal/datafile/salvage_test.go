package datafile

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

func TestSalvage(t *testing.T) {
	entries := testEntries(100, 30)
	sealed := encodeSegment(t, entries, true)
	b := boundaries(sealed) // b[i] is where record i starts (b[0] the header's end)
	tests := []struct {
		name    string
		damage  func(data []byte) []byte
		from    int      // record the scan starts at
		want    []uint64 // indices found
		wantGap []Gap
	}{
		{"zeros over records 10, 11 and half of 12, then the rest, a footer and padding", func(d []byte) []byte {
			mid := (b[12] + b[13]) / 2
			clear(d[b[10]:mid])
			return append(d, make([]byte, 4096)...)
		}, 10, seq(113, 129), []Gap{{Offset: int64(b[10]), Length: int64(b[13] - b[10])}}},
		{"a flipped byte in record 10's payload", func(d []byte) []byte {
			d[b[10]+RecordHeaderSize+1] ^= 0x40
			return d
		}, 10, seq(111, 129), []Gap{{Offset: int64(b[10]), Length: int64(b[11] - b[10])}}},
		{"a damaged length", func(d []byte) []byte {
			d[b[20]+3] = 0x7f
			return d
		}, 20, seq(121, 129), []Gap{{Offset: int64(b[20]), Length: int64(b[21] - b[20])}}},
		{"an intact rest", func(d []byte) []byte { return d }, 25, seq(125, 129), nil},
		{"zeros to the end", func(d []byte) []byte {
			clear(d[b[5]:])
			return d
		}, 5, nil, nil},
		{"garbage to the end", func(d []byte) []byte {
			for i := b[5]; i < len(d); i++ {
				d[i] = byte(i*7 + 3)
			}
			return d
		}, 5, nil, []Gap{{Offset: int64(b[5]), Length: int64(len(sealed) - b[5])}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.damage(append([]byte(nil), sealed...))
			off := b[tc.from]
			recs, gaps := Salvage(data[off:], int64(off))
			var got []uint64
			for _, r := range recs {
				e := &netsyv1.Entry{}
				if err := proto.Unmarshal(r.Payload, e); err != nil {
					t.Fatalf("record at %d: %v", r.Offset, err)
				}
				want := entries[e.Index-100]
				if !proto.Equal(e, want) {
					t.Fatalf("record at %d: got %v, want %v", r.Offset, e, want)
				}
				if r.Offset != int64(b[e.Index-100]) {
					t.Fatalf("entry %d reported at offset %d, it starts at %d", e.Index, r.Offset, b[e.Index-100])
				}
				got = append(got, e.Index)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("found entries %v, want %v", got, tc.want)
			}
			if len(gaps) != len(tc.wantGap) {
				t.Fatalf("gaps %v, want %v", gaps, tc.wantGap)
			}
			for i := range gaps {
				if gaps[i] != tc.wantGap[i] {
					t.Fatalf("gaps %v, want %v", gaps, tc.wantGap)
				}
			}
		})
	}
}

func seq(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// FuzzSalvage: on any input Salvage never panics, every record it reports
// verifies where it says it is, and records and gaps never overlap and
// stay inside the input, in order.
func FuzzSalvage(f *testing.F) {
	for _, seed := range corpusSeeds(f) {
		f.Add(seed.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const base = 1000
		recs, gaps := Salvage(data, base)
		type span struct{ from, to int64 }
		var spans []span
		for _, r := range recs {
			p := int(r.Offset - base)
			if !recordAt(data, p) || !bytes.Equal(data[p+RecordHeaderSize:p+RecordHeaderSize+len(r.Payload)], r.Payload) {
				t.Fatalf("record at %d does not verify", r.Offset)
			}
			spans = append(spans, span{r.Offset, r.Offset + int64(RecordHeaderSize+len(r.Payload))})
		}
		for _, g := range gaps {
			if g.Length <= 0 {
				t.Fatalf("empty gap %+v", g)
			}
			spans = append(spans, span{g.Offset, g.Offset + g.Length})
		}
		slices.SortFunc(spans, func(a, b span) int { return int(a.from - b.from) })
		for i, s := range spans {
			if s.from < base || s.to > base+int64(len(data)) || (i > 0 && s.from < spans[i-1].to) {
				t.Fatalf("spans overlap or leave the input: %v", spans)
			}
		}
	})
}
