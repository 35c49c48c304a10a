package datafile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// A snapshot is nearly all key-version records, and proto.Marshal spent
// more of a 1 M key snapshot's CPU than the compression did (sizing and
// walking each message by reflection): frameKVRecord writes the same
// bytes by hand. The bytes are exactly proto.Marshal's for a message
// without unknown fields (fields in number order, zero values left out;
// TestFrameKVRecordMatchesProtoMarshal pins it), so the format is
// unchanged and every reader reads either.

// KeyVersion field numbers (proto/netsy/v1/log.proto).
const (
	kvFieldKey            = 1
	kvFieldValue          = 2
	kvFieldCreateRevision = 3
	kvFieldModRevision    = 4
	kvFieldSub            = 5
	kvFieldVersion        = 6
	kvFieldLease          = 7
	kvFieldTombstone      = 8
)

// kvSize is the marshalled size of kv, unknown fields aside.
func kvSize(kv *netsyv1.KeyVersion) int {
	n := 0
	if len(kv.Key) > 0 {
		n += 1 + protowire.SizeBytes(len(kv.Key))
	}
	if len(kv.Value) > 0 {
		n += 1 + protowire.SizeBytes(len(kv.Value))
	}
	for _, v := range [...]int64{kv.CreateRevision, kv.ModRevision, kv.Sub, kv.Version, kv.Lease} {
		if v != 0 {
			n += 1 + protowire.SizeVarint(uint64(v))
		}
	}
	if kv.Tombstone {
		n += 2
	}
	return n
}

func appendKVFields(b []byte, kv *netsyv1.KeyVersion) []byte {
	if len(kv.Key) > 0 {
		b = protowire.AppendTag(b, kvFieldKey, protowire.BytesType)
		b = protowire.AppendBytes(b, kv.Key)
	}
	if len(kv.Value) > 0 {
		b = protowire.AppendTag(b, kvFieldValue, protowire.BytesType)
		b = protowire.AppendBytes(b, kv.Value)
	}
	for _, f := range [...]struct {
		num protowire.Number
		v   int64
	}{
		{kvFieldCreateRevision, kv.CreateRevision},
		{kvFieldModRevision, kv.ModRevision},
		{kvFieldSub, kv.Sub},
		{kvFieldVersion, kv.Version},
		{kvFieldLease, kv.Lease},
	} {
		if f.v != 0 {
			b = protowire.AppendTag(b, f.num, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(f.v))
		}
	}
	if kv.Tombstone {
		b = protowire.AppendTag(b, kvFieldTombstone, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

// frameKVRecord appends the record holding kv (a SnapshotRecord whose kv
// is set), framed, to dst; ok is false for a version with unknown fields
// (one decoded from a newer build's file), which only proto.Marshal
// reproduces.
func frameKVRecord(dst []byte, kv *netsyv1.KeyVersion) (out []byte, ok bool, err error) {
	if len(kv.ProtoReflect().GetUnknown()) > 0 {
		return dst, false, nil
	}
	size := kvSize(kv)
	payload := protowire.SizeTag(snapshotKVField) + protowire.SizeBytes(size)
	if payload > MaxRecordBytes {
		return dst, true, fmt.Errorf("%d bytes is above the %d byte record limit", payload, MaxRecordBytes)
	}
	start := len(dst)
	dst = binary.LittleEndian.AppendUint64(dst, 0) // length and checksum, set below
	dst = protowire.AppendTag(dst, snapshotKVField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(size))
	dst = appendKVFields(dst, kv)
	body := dst[start+RecordHeaderSize:]
	if len(body) != payload {
		return dst[:start], true, errors.New("key version changed while it was framed")
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(payload))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(body, castagnoli))
	return dst, true, nil
}

// appendKV appends the record holding kv; rec is the record reused for
// the versions frameKVRecord leaves to proto.Marshal.
func (w *Writer) appendKV(kv *netsyv1.KeyVersion, rec *netsyv1.SnapshotRecord_Kv) error {
	buf, ok, err := frameKVRecord(w.buf[:0], kv)
	if !ok {
		rec.Kv = kv
		return w.appendMessage(&netsyv1.SnapshotRecord{Record: rec})
	}
	w.buf = buf
	if err != nil {
		return fmt.Errorf("append record: %w", err)
	}
	return w.writeRecord()
}
