package datafile

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// The hand-written record must be byte for byte what proto.Marshal
// writes, or snapshots would change format with it.
func TestFrameKVRecordMatchesProtoMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ints := []int64{0, 1, -1, 127, 128, 1 << 35, math.MaxInt64, math.MinInt64}
	pick := func() int64 {
		if r.IntN(2) == 0 {
			return ints[r.IntN(len(ints))]
		}
		return r.Int64() >> r.IntN(64)
	}
	blob := func() []byte {
		b := make([]byte, []int{0, 1, 127, 128, 300, 20000}[r.IntN(6)])
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	for i := range 2000 {
		kv := &netsyv1.KeyVersion{Key: blob(), Value: blob(), CreateRevision: pick(), ModRevision: pick(),
			Sub: pick(), Version: pick(), Lease: pick(), Tombstone: r.IntN(2) == 0}
		want, err := proto.Marshal(&netsyv1.SnapshotRecord{Record: &netsyv1.SnapshotRecord_Kv{Kv: kv}})
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := frameKVRecord([]byte("prefix"), kv)
		if err != nil || !ok {
			t.Fatalf("case %d: ok %v, err %v", i, ok, err)
		}
		if !bytes.Equal(got[:6], []byte("prefix")) {
			t.Fatalf("case %d: dst prefix overwritten", i)
		}
		if !bytes.Equal(got[6:], AppendFrame(nil, want)) {
			t.Fatalf("case %d (%v): framed record differs from proto.Marshal's", i, kv)
		}
	}
}

// A version carrying fields this build does not know is left to
// proto.Marshal, which keeps them.
func TestFrameKVRecordLeavesUnknownFieldsToProto(t *testing.T) {
	kv := &netsyv1.KeyVersion{Key: []byte("k"), ModRevision: 2}
	raw, _ := proto.Marshal(kv)
	raw = protowire.AppendTag(raw, 99, protowire.VarintType)
	raw = protowire.AppendVarint(raw, 7)
	kv = &netsyv1.KeyVersion{}
	if err := proto.Unmarshal(raw, kv); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := frameKVRecord(nil, kv); ok {
		t.Fatal("framed a version with unknown fields by hand")
	}
	var buf bytes.Buffer
	s := &Snapshot{Header: &netsyv1.SnapshotHeader{Index: 3, Revision: 2}, KVs: []*netsyv1.KeyVersion{kv}}
	if err := EncodeSnapshot(&buf, s); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSnapshot("s", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.KVs[0], kv) {
		t.Fatalf("decoded %v, want %v with its unknown field", got.KVs[0], kv)
	}
}

// viewSource serves key versions through View from one reused buffer, as
// the engine's capture does, and counts the calls of each kind.
type viewSource struct {
	kvs        []*netsyv1.KeyVersion
	buf        []byte
	views, ats int
}

func (v *viewSource) Len() int { return len(v.kvs) }
func (v *viewSource) At(i int) (*netsyv1.KeyVersion, error) {
	v.ats++
	return proto.Clone(v.kvs[i]).(*netsyv1.KeyVersion), nil
}
func (v *viewSource) Release() {}
func (v *viewSource) View(i int, kv *netsyv1.KeyVersion) error {
	v.views++
	src := v.kvs[i]
	// Scribble over the previous value first: an encoder that kept it
	// past this call would write garbage.
	for j := range v.buf {
		v.buf[j] = 0xEE
	}
	v.buf = append(v.buf[:0], src.Value...)
	kv.Key, kv.Value = src.Key, v.buf
	kv.CreateRevision, kv.ModRevision, kv.Sub = src.CreateRevision, src.ModRevision, src.Sub
	kv.Version, kv.Lease, kv.Tombstone = src.Version, src.Lease, src.Tombstone
	return nil
}

// A snapshot encoded from a Viewer is the same file as one encoded from
// the versions themselves, and it is read through View only.
func TestEncodeSnapshotFromViewerWritesTheSameFile(t *testing.T) {
	s := testSnapshot()
	var want bytes.Buffer
	if err := EncodeSnapshot(&want, s); err != nil {
		t.Fatal(err)
	}
	src := &viewSource{kvs: s.KVs}
	var got bytes.Buffer
	vs := &Snapshot{Header: s.Header, Leases: s.Leases, Source: src}
	if err := EncodeSnapshot(&got, vs); err != nil {
		t.Fatal(err)
	}
	if src.views != len(s.KVs) || src.ats != 0 {
		t.Fatalf("encoder made %d View and %d At calls, want %d and 0", src.views, src.ats, len(s.KVs))
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("file from a Viewer differs from the file from the versions")
	}
	dec, err := DecodeSnapshot("s", &got)
	if err != nil {
		t.Fatal(err)
	}
	for i, kv := range dec.KVs {
		if !proto.Equal(kv, s.KVs[i]) {
			t.Fatalf("version %d decoded as %v, want %v", i, kv, s.KVs[i])
		}
	}
}

// The order check holds for viewed versions too, though the encoder keeps
// none of them.
func TestEncodeSnapshotFromViewerRejectsDisorder(t *testing.T) {
	s := testSnapshot()
	s.KVs[0], s.KVs[2] = s.KVs[2], s.KVs[0]
	err := EncodeSnapshot(&bytes.Buffer{}, &Snapshot{Header: s.Header, Source: &viewSource{kvs: s.KVs}})
	if err == nil {
		t.Fatal("encoded versions out of (mod_revision, sub) order")
	}
}

// A record of the uncompressed, pre-hand-framing layout still decodes: the
// file from a proto.Marshal-framed writer (kept in the uncompressed form
// older builds wrote) loads to the same versions.
func TestSnapshotFramedByProtoStillLoads(t *testing.T) {
	s := testSnapshot()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, KindSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	w.setRange(s.Header.Index, s.Header.Revision)
	h := proto.Clone(s.Header).(*netsyv1.SnapshotHeader)
	h.KeyVersions, h.Leases = int64(len(s.KVs)), int64(len(s.Leases))
	recs := []*netsyv1.SnapshotRecord{{Record: &netsyv1.SnapshotRecord_Header{Header: h}}}
	for _, kv := range s.KVs {
		recs = append(recs, &netsyv1.SnapshotRecord{Record: &netsyv1.SnapshotRecord_Kv{Kv: kv}})
	}
	for _, l := range s.Leases {
		recs = append(recs, &netsyv1.SnapshotRecord{Record: &netsyv1.SnapshotRecord_Lease{Lease: l}})
	}
	for _, r := range recs {
		if err := w.appendMessage(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeSnapshot("old", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(dec.KVs) != len(s.KVs) || len(dec.Leases) != len(s.Leases) {
		t.Fatalf("decoded %d versions and %d leases, want %d and %d", len(dec.KVs), len(dec.Leases), len(s.KVs), len(s.Leases))
	}
	for i, kv := range dec.KVs {
		if !proto.Equal(kv, s.KVs[i]) {
			t.Fatalf("version %d decoded as %v, want %v", i, kv, s.KVs[i])
		}
	}
}
