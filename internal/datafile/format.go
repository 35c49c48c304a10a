package datafile

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

const (
	// FormatVersion is the only version this build reads and writes.
	FormatVersion uint8 = 1
	// HeaderSize is the fixed size of a data-file header.
	HeaderSize = 16
	// RecordHeaderSize is the length and checksum in front of every payload.
	RecordHeaderSize = 8
	// FooterSize is the fixed size of the footer of a sealed file.
	FooterSize = 52
	// MaxRecordBytes bounds one payload. It keeps a damaged length field from
	// looking like a record that merely runs past the end of the file, and
	// keeps a hostile file from making the reader allocate gigabytes.
	MaxRecordBytes = 64 << 20

	// footerMarker sits where a record length would be; no record is that long.
	footerMarker = 0xFFFFFFFF
)

var (
	headerMagic = [4]byte{'N', 'S', 'D', 'F'}
	footerMagic = [4]byte{'F', 'D', 'S', 'N'}

	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Kind says what a data file holds and where it lives.
type Kind uint8

const (
	// KindSegment is a local WAL segment: entries, sealed only when full.
	KindSegment Kind = 1
	// KindChunk is a WAL chunk in object storage: entries, always sealed.
	KindChunk Kind = 2
	// KindSnapshot is a snapshot: SnapshotRecords, always sealed.
	KindSnapshot Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindSegment:
		return "segment"
	case KindChunk:
		return "chunk"
	case KindSnapshot:
		return "snapshot"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText makes Kind readable in `netsyctl inspect -o json`.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

func (k Kind) valid() bool { return k >= KindSegment && k <= KindSnapshot }

// holdsEntries reports whether records are netsyv1.Entry messages.
func (k Kind) holdsEntries() bool { return k == KindSegment || k == KindChunk }

// Compression is the payload compression named in the header.
type Compression uint8

const (
	// CompressionNone is the only compression implemented.
	CompressionNone Compression = 0
	// CompressionZstd is reserved; files using it are rejected for now.
	CompressionZstd Compression = 1
)

func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionZstd:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// MarshalText makes Compression readable in JSON output.
func (c Compression) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// Header is the decoded fixed header of a data file.
type Header struct {
	Version     uint8       `json:"version"`
	Kind        Kind        `json:"kind"`
	Compression Compression `json:"compression"`
	// Flags is room for format options; none are defined yet, so a reader
	// rejects any set flag instead of misreading a newer file.
	Flags uint32 `json:"flags"`
}

// Footer is the summary written when a file is sealed. For entry files the
// index and revision ranges are those of the first and last entry; for a
// snapshot both ends are the snapshot's index and revision.
type Footer struct {
	Records       uint64 `json:"records"`
	FirstIndex    uint64 `json:"first_index"`
	LastIndex     uint64 `json:"last_index"`
	FirstRevision int64  `json:"first_revision"`
	LastRevision  int64  `json:"last_revision"`
	// CRC is the CRC32C of every byte of the file before this field.
	CRC uint32 `json:"crc"`
}

func encodeHeader(h Header) [HeaderSize]byte {
	var b [HeaderSize]byte
	copy(b[0:4], headerMagic[:])
	b[4] = h.Version
	b[5] = byte(h.Kind)
	b[6] = byte(h.Compression)
	binary.LittleEndian.PutUint32(b[8:12], h.Flags)
	binary.LittleEndian.PutUint32(b[12:16], crc32.Checksum(b[:12], castagnoli))
	return b
}

// encodeFooterBody fills everything but the CRC and magic, which depend on
// the running file checksum.
func encodeFooterBody(b []byte, f Footer) {
	binary.LittleEndian.PutUint32(b[0:4], footerMarker)
	binary.LittleEndian.PutUint64(b[4:12], f.Records)
	binary.LittleEndian.PutUint64(b[12:20], f.FirstIndex)
	binary.LittleEndian.PutUint64(b[20:28], f.LastIndex)
	binary.LittleEndian.PutUint64(b[28:36], uint64(f.FirstRevision))
	binary.LittleEndian.PutUint64(b[36:44], uint64(f.LastRevision))
}

func decodeFooterBody(b []byte) Footer {
	return Footer{
		Records:       binary.LittleEndian.Uint64(b[4:12]),
		FirstIndex:    binary.LittleEndian.Uint64(b[12:20]),
		LastIndex:     binary.LittleEndian.Uint64(b[20:28]),
		FirstRevision: int64(binary.LittleEndian.Uint64(b[28:36])),
		LastRevision:  int64(binary.LittleEndian.Uint64(b[36:44])),
		CRC:           binary.LittleEndian.Uint32(b[44:48]),
	}
}

// AppendFrame appends payload framed as one record (length, CRC32C, payload)
// to dst. Callers that build records off the write path (the WAL frames
// entries in Append, before its writer goroutine sees them) pass the result
// to Writer.AppendFramed.
func AppendFrame(dst, payload []byte) []byte {
	var h [RecordHeaderSize]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[4:8], crc32.Checksum(payload, castagnoli))
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}
