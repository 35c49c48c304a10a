package datafile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// AppendHeader appends the header of a new file of the given kind to dst:
// the start of a file built in memory, frame by frame (FrameEntry), and
// finished by Seal without being copied through a Writer.
func AppendHeader(dst []byte, kind Kind) []byte {
	h := encodeHeader(Header{Version: FormatVersion, Kind: kind})
	return append(dst, h[:]...)
}

// Seal finishes a file built in memory: file is a header from AppendHeader
// followed by whole records, sum gives their count and (for entry files)
// ranges, and Seal appends the footer, in place when file has the capacity.
// The result is byte for byte what a Writer produces for the same records.
//
// Seal checks the header, that the record lengths tile the file exactly,
// that there are sum.Records of them and, for entry files, that the index
// range is dense. It does not recompute each payload's checksum: the frames
// were made by FrameEntry a moment ago, and the file checksum covers them.
func Seal(file []byte, sum Footer) ([]byte, error) {
	return seal(file, sum, CompressionNone)
}

// seal is Seal for a file whose header will name comp: the file checksum
// is taken over that header, so a file sealed for compression needs no
// second pass over its records (ChunkSealer.AppendSeal). file's own header
// is checked as AppendHeader wrote it and left as it is.
func seal(file []byte, sum Footer, comp Compression) ([]byte, error) {
	if len(file) < HeaderSize {
		return nil, fmt.Errorf("seal data file: %d bytes is shorter than a header", len(file))
	}
	kind := Kind(file[5])
	if h := encodeHeader(Header{Version: FormatVersion, Kind: kind}); !kind.valid() || !bytes.Equal(file[:HeaderSize], h[:]) {
		return nil, fmt.Errorf("seal data file: the file does not start with a header from AppendHeader")
	}
	var records uint64
	for off := HeaderSize; off < len(file); records++ {
		if len(file)-off < RecordHeaderSize {
			return nil, fmt.Errorf("seal data file: %d stray bytes at offset %d", len(file)-off, off)
		}
		n := int(binary.LittleEndian.Uint32(file[off:]))
		if n == 0 || n > MaxRecordBytes || n > len(file)-off-RecordHeaderSize {
			return nil, fmt.Errorf("seal data file: malformed record at offset %d (length %d)", off, n)
		}
		off += RecordHeaderSize + n
	}
	if records != sum.Records {
		return nil, fmt.Errorf("seal data file: the file holds %d records, the summary says %d", records, sum.Records)
	}
	if kind.holdsEntries() && records > 0 && (sum.FirstIndex == 0 || sum.LastIndex-sum.FirstIndex+1 != records) {
		return nil, fmt.Errorf("seal data file: indices %d..%d do not number %d entries", sum.FirstIndex, sum.LastIndex, records)
	}
	h := encodeHeader(Header{Version: FormatVersion, Kind: kind, Compression: comp})
	var b [FooterSize]byte
	encodeFooterBody(b[:], sum)
	crc := crc32.Update(crc32.Update(crc32.Checksum(h[:], castagnoli), castagnoli, file[HeaderSize:]), castagnoli, b[:44])
	binary.LittleEndian.PutUint32(b[44:48], crc)
	copy(b[48:52], footerMagic[:])
	return append(file, b[:]...), nil
}
