package datafile

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/gctune"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// Snapshot is the full state at Header.Index / Header.Revision.
type Snapshot struct {
	Header *netsyv1.SnapshotHeader
	// KVs are ordered by (ModRevision, Sub). Source, when set, holds them
	// instead.
	KVs    []*netsyv1.KeyVersion
	Leases []*netsyv1.SnapshotLease
	// Source, when not nil, yields the key versions one at a time, for a
	// snapshot too large to hold in memory (the engine's, whose values
	// are in files). Whoever ends up holding such a snapshot calls Release
	// once it is encoded or dropped.
	Source Source
}

// Source yields a snapshot's key versions in (ModRevision, Sub) order.
type Source interface {
	Len() int
	// At returns key version i, which the caller may keep.
	At(i int) (*netsyv1.KeyVersion, error)
	// Release lets go of what At reads from; it may be called from any
	// goroutine, more than once.
	Release()
}

// A Viewer is a Source that can also read a key version into a
// KeyVersion the caller reuses, which EncodeSnapshot prefers.
type Viewer interface {
	Source
	// View sets every field of kv to key version i. The key and value
	// may be memory the Viewer reuses: they are valid only until the
	// next View or At call and must not be modified.
	View(i int, kv *netsyv1.KeyVersion) error
}

// Len is the number of key versions.
func (s *Snapshot) Len() int {
	if s.Source != nil {
		return s.Source.Len()
	}
	return len(s.KVs)
}

// At returns key version i.
func (s *Snapshot) At(i int) (*netsyv1.KeyVersion, error) {
	if s.Source != nil {
		return s.Source.At(i)
	}
	return s.KVs[i], nil
}

// Release releases the Source, if any.
func (s *Snapshot) Release() {
	if s.Source != nil {
		s.Source.Release()
	}
}

// EncodeSnapshot writes s as a sealed snapshot file, zstd-compressed after
// its header (see compress.go; DecodeSnapshot reads both forms). The header written
// carries the real record counts; a header that already states different
// counts is rejected as a caller bug, and so are key versions out of
// order, though only once the file is partly written. w is buffered
// internally.
func EncodeSnapshot(w io.Writer, s *Snapshot) error {
	return encodeSnapshot(w, s, true)
}

// encodeSnapshot writes s compressed or, as builds before compression did
// (tests keep such files readable), not.
func encodeSnapshot(w io.Writer, s *Snapshot, compress bool) error {
	if s == nil || s.Header == nil {
		return errors.New("encode snapshot: missing header")
	}
	h := proto.Clone(s.Header).(*netsyv1.SnapshotHeader)
	n := s.Len()
	if err := fillCount(&h.KeyVersions, n, "key versions"); err != nil {
		return fmt.Errorf("encode snapshot %d: %w", h.Index, err)
	}
	if err := fillCount(&h.Leases, len(s.Leases), "leases"); err != nil {
		return fmt.Errorf("encode snapshot %d: %w", h.Index, err)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var dw *Writer
	var cw *CompressedWriter
	var err error
	if compress {
		cw, err = NewCompressedWriter(bw, KindSnapshot)
		if cw != nil {
			dw = cw.Writer
		}
	} else {
		dw, err = NewWriter(bw, KindSnapshot)
	}
	if err != nil {
		return fmt.Errorf("encode snapshot %d: %w", h.Index, err)
	}
	dw.setRange(h.Index, h.Revision)
	// One record and one wrapper of each oneof case are reused, so the loop
	// does not allocate per key version.
	rec := &netsyv1.SnapshotRecord{Record: &netsyv1.SnapshotRecord_Header{Header: h}}
	if err := dw.appendMessage(rec); err != nil {
		return fmt.Errorf("encode snapshot %d header: %w", h.Index, err)
	}
	kv := &netsyv1.SnapshotRecord_Kv{}
	// A Viewer's versions are read into one KeyVersion, so a snapshot of
	// a million values does not allocate (and copy) a million of them.
	view, _ := s.Source.(Viewer)
	var scratch netsyv1.KeyVersion
	var prevRev, prevSub int64
	for i := range n {
		var v *netsyv1.KeyVersion
		var err error
		if view != nil {
			v = &scratch
			err = view.View(i, v)
		} else {
			v, err = s.At(i)
		}
		if err != nil {
			return fmt.Errorf("encode snapshot %d key version %d: %w", h.Index, i, err)
		}
		if i > 0 && posLess(v.ModRevision, v.Sub, prevRev, prevSub) {
			return fmt.Errorf("encode snapshot %d: key version %d is out of (mod_revision, sub) order", h.Index, i)
		}
		prevRev, prevSub = v.ModRevision, v.Sub
		if err := dw.appendKV(v, kv); err != nil {
			return fmt.Errorf("encode snapshot %d key version %d: %w", h.Index, i, err)
		}
	}
	l := &netsyv1.SnapshotRecord_Lease{}
	rec.Record = l
	for i, v := range s.Leases {
		l.Lease = v
		if err := dw.appendMessage(rec); err != nil {
			return fmt.Errorf("encode snapshot %d lease %d: %w", h.Index, i, err)
		}
	}
	if _, err := dw.Finish(); err != nil {
		return fmt.Errorf("encode snapshot %d: %w", h.Index, err)
	}
	if cw != nil {
		if err := cw.Close(); err != nil {
			return fmt.Errorf("encode snapshot %d: %w", h.Index, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("encode snapshot %d: %w", h.Index, err)
	}
	return nil
}

func fillCount(field *int64, n int, what string) error {
	if *field != 0 && *field != int64(n) {
		return fmt.Errorf("header counts %d %s, snapshot has %d", *field, what, n)
	}
	*field = int64(n)
	return nil
}

func kvLess(a, b *netsyv1.KeyVersion) bool {
	return posLess(a.ModRevision, a.Sub, b.ModRevision, b.Sub)
}

// posLess is kvLess on the (mod_revision, sub) positions themselves, for
// a caller that keeps the previous position rather than the version.
func posLess(rev, sub, thanRev, thanSub int64) bool {
	if rev != thanRev {
		return rev < thanRev
	}
	return sub < thanSub
}

// DecodeSnapshot reads a sealed snapshot file and checks its structure: the
// header record first, key versions in order, leases last, counts equal to
// the header's and footer ranges equal to the header's index and revision.
func DecodeSnapshot(name string, r io.Reader) (*Snapshot, error) {
	dr, err := NewReader(name, r)
	if err != nil {
		return nil, err
	}
	if dr.hdr.Kind != KindSnapshot {
		return nil, fmt.Errorf("data file %s: a %s is not a snapshot", name, dr.hdr.Kind)
	}
	var c snapshotChecker
	var hold decodeHold
	defer hold.release()
	for {
		payload, err := dr.Next()
		if err == io.EOF {
			f, _ := dr.Footer()
			if err := c.finish(name, dr.off-FooterSize, f); err != nil {
				return nil, err
			}
			return &c.snap, nil
		}
		if err != nil {
			return nil, err
		}
		if kv := decodeKVRecord(payload); kv != nil && c.snap.Header != nil {
			if err := c.addKV(name, dr.recOff, kv); err != nil {
				return nil, err
			}
			hold.add(c.snap.Header.KeyVersions, len(payload))
			continue
		}
		rec := &netsyv1.SnapshotRecord{}
		if err := proto.Unmarshal(payload, rec); err != nil {
			return nil, corruptf(name, dr.recOff, "decode snapshot record: %v", err)
		}
		if err := c.add(name, dr.recOff, rec); err != nil {
			return nil, err
		}
	}
}

// decodeHold keeps the Go collector from marking a snapshot's versions
// over and over while they are decoded (see gctune.Hold): the floor is the
// heap the whole decoded snapshot will take, projected from the records
// decoded so far and the header's count, and never more than twice what
// was decoded plus a margin, so a damaged count cannot grow the heap
// unchecked.
type decodeHold struct {
	h        *gctune.Holding
	n, bytes int64
}

const (
	// decodedKVOverhead is the heap a decoded key version takes besides
	// its record's bytes: the KeyVersion (136 bytes, in a 144-byte size
	// class), its pointer in KVs, and the rounding of its key and value
	// allocations, less the record's tags and lengths.
	decodedKVOverhead = 150
	// decodeHoldEvery is how many records pass between two updates.
	decodeHoldEvery = 1 << 14
	// decodeHoldAhead is the margin over the projection: for the heap
	// the process held before (the floor is the whole heap's) and the
	// reader's buffers.
	decodeHoldAhead = 64 << 20
)

func (d *decodeHold) add(total int64, payload int) {
	d.n++
	d.bytes += int64(payload) + decodedKVOverhead
	if d.n%decodeHoldEvery != 1 || total < decodeHoldEvery {
		return
	}
	floor := min(d.bytes/d.n*total, 2*d.bytes) + decodeHoldAhead
	if d.h == nil {
		d.h = gctune.Hold(floor)
		return
	}
	d.h.Set(floor)
}

// release lets the floor lapse at the next collection: whoever asked for
// the snapshot is about to load it, under a floor of its own (see
// gctune.Holding.Lapse).
func (d *decodeHold) release() { d.h.Lapse() }

// snapshotChecker enforces the record order of a snapshot while collecting
// it, shared by DecodeSnapshot and Inspect.
type snapshotChecker struct {
	snap Snapshot
}

func (c *snapshotChecker) add(name string, off int64, rec *netsyv1.SnapshotRecord) error {
	s := &c.snap
	switch v := rec.Record.(type) {
	case *netsyv1.SnapshotRecord_Header:
		if s.Header != nil {
			return corruptf(name, off, "second snapshot header")
		}
		if v.Header == nil {
			return corruptf(name, off, "empty snapshot header")
		}
		s.Header = v.Header
		return nil
	case nil:
		return corruptf(name, off, "snapshot record holds nothing")
	}
	if s.Header == nil {
		return corruptf(name, off, "snapshot record before the header")
	}
	switch v := rec.Record.(type) {
	case *netsyv1.SnapshotRecord_Kv:
		if v.Kv == nil {
			return corruptf(name, off, "empty key version")
		}
		return c.addKV(name, off, v.Kv)
	case *netsyv1.SnapshotRecord_Lease:
		if v.Lease == nil {
			return corruptf(name, off, "empty lease")
		}
		s.Leases = append(s.Leases, v.Lease)
	default:
		return corruptf(name, off, "unknown snapshot record %T", v)
	}
	return nil
}

// addKV adds a key version after the header.
func (c *snapshotChecker) addKV(name string, off int64, kv *netsyv1.KeyVersion) error {
	s := &c.snap
	switch {
	case len(s.Leases) > 0:
		return corruptf(name, off, "key version after leases")
	case len(s.KVs) > 0 && kvLess(kv, s.KVs[len(s.KVs)-1]):
		return corruptf(name, off, "key version out of (mod_revision, sub) order")
	}
	if s.KVs == nil && s.Header.KeyVersions > 0 {
		// The header says how many follow; a damaged count cannot make
		// this allocate more than the file could hold.
		s.KVs = make([]*netsyv1.KeyVersion, 0, min(s.Header.KeyVersions, 1<<20))
	}
	s.KVs = append(s.KVs, kv)
	return nil
}

// snapshotKVField is SnapshotRecord's kv field number.
const snapshotKVField = 2

// decodeKVRecord decodes a record that holds exactly one key version
// without the SnapshotRecord and oneof wrapper that proto.Unmarshal would
// allocate for it: two of the five allocations per key version of a
// snapshot load. Anything else (another record, unknown fields, bad
// bytes) returns nil, and the caller decodes the record in full, which
// reports what is wrong with it.
func decodeKVRecord(payload []byte) *netsyv1.KeyVersion {
	num, typ, n := protowire.ConsumeTag(payload)
	if n < 0 || num != snapshotKVField || typ != protowire.BytesType {
		return nil
	}
	b, m := protowire.ConsumeBytes(payload[n:])
	if m < 0 || n+m != len(payload) {
		return nil
	}
	kv := &netsyv1.KeyVersion{}
	if err := proto.Unmarshal(b, kv); err != nil {
		return nil
	}
	return kv
}

func (c *snapshotChecker) finish(name string, footerOff int64, f Footer) error {
	h := c.snap.Header
	switch {
	case h == nil:
		return corruptf(name, HeaderSize, "snapshot has no header record")
	case h.KeyVersions != int64(len(c.snap.KVs)) || h.Leases != int64(len(c.snap.Leases)):
		return corruptf(name, HeaderSize, "header counts %d key versions and %d leases, file holds %d and %d",
			h.KeyVersions, h.Leases, len(c.snap.KVs), len(c.snap.Leases))
	case f.FirstIndex != h.Index || f.LastIndex != h.Index || f.FirstRevision != h.Revision || f.LastRevision != h.Revision:
		return corruptf(name, footerOff, "footer ranges index %d..%d revision %d..%d do not match snapshot index %d revision %d",
			f.FirstIndex, f.LastIndex, f.FirstRevision, f.LastRevision, h.Index, h.Revision)
	}
	return nil
}
