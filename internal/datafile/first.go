package datafile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// FirstEntryReader reads where entry files start: their header and first
// record, and not a byte more (a compressed file's first zstd block), so
// a search through chunks by their first index costs a few kilobytes a
// chunk instead of decoding every entry in it. It keeps one zstd decoder
// from file to file. It is not safe for concurrent use.
type FirstEntryReader struct {
	dec *zstd.Decoder // made at the first compressed file
	buf []byte        // the first record's payload, reused
}

// FirstEntry reads the header of the entry file r (a chunk, or a sealed
// segment uploaded as is) and returns its first entry, or nil for a file
// without entries (a claim's empty chunk), whose footer is then checked
// too. The header and the record's checksum are verified; the rest of r
// is left unread, so its records, the footer and the file checksum are
// not: a caller that goes on to rely on the entries still decodes the
// file (DecodeChunk). Errors are as a Reader's: damage is a
// *CorruptError naming name, and errors of r are passed on wrapped.
func (f *FirstEntryReader) FirstEntry(name string, r io.Reader) (*netsyv1.Entry, error) {
	h, hb, err := readHeader(name, r)
	if err != nil {
		return nil, err
	}
	if !h.Kind.holdsEntries() {
		return nil, fmt.Errorf("data file %s: a %s is not a WAL chunk", name, h.Kind)
	}
	if h.Compression == CompressionZstd {
		if f.dec == nil {
			if f.dec, err = newZstdDecoder(); err != nil {
				return nil, fmt.Errorf("data file %s: %w", name, err)
			}
		}
		d, err := resetDecompressor(name, r, f.dec)
		if err != nil {
			return nil, err
		}
		// The decoder must not keep the caller's stream (an HTTP body)
		// until the next file.
		defer func() { _ = f.dec.Reset(nil) }()
		r = d
	}
	var rh [RecordHeaderSize]byte
	if _, err := io.ReadFull(r, rh[:]); err != nil {
		return nil, firstReadError(name, HeaderSize, "truncated record header", err)
	}
	length := binary.LittleEndian.Uint32(rh[0:4])
	if length == footerMarker {
		return nil, firstFooter(name, r, hb, rh)
	}
	if length == 0 || length > MaxRecordBytes {
		return nil, corruptf(name, HeaderSize, "invalid record length %d", length)
	}
	if cap(f.buf) < int(length) {
		// A damaged length is bounded by MaxRecordBytes, and a first
		// entry is one write: this is what a Reader would allocate too.
		f.buf = make([]byte, length)
	}
	payload := f.buf[:length]
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, firstReadError(name, HeaderSize, "truncated record", err)
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rh[4:8]) {
		return nil, corruptf(name, HeaderSize, "record checksum mismatch")
	}
	e := &netsyv1.Entry{}
	if err := proto.Unmarshal(payload, e); err != nil {
		return nil, corruptf(name, HeaderSize, "decode entry: %v", err)
	}
	if e.Index == 0 {
		return nil, corruptf(name, HeaderSize, "entry has index 0")
	}
	return e, nil
}

// firstFooter checks the footer of an entry file that has no records:
// its magic, its checksum (of the header and the footer alone) and its
// count of 0.
func firstFooter(name string, r io.Reader, hb [HeaderSize]byte, rh [RecordHeaderSize]byte) error {
	var b [FooterSize]byte
	copy(b[:], rh[:])
	if _, err := io.ReadFull(r, b[RecordHeaderSize:]); err != nil {
		return firstReadError(name, HeaderSize, "truncated footer", err)
	}
	if !bytes.Equal(b[48:52], footerMagic[:]) {
		return corruptf(name, HeaderSize+48, "bad footer magic %q", b[48:52])
	}
	f := decodeFooterBody(b[:])
	if got := crc32.Update(crc32.Checksum(hb[:], castagnoli), castagnoli, b[:44]); got != f.CRC {
		return corruptf(name, HeaderSize+44, "file checksum mismatch (stored %08x, computed %08x)", f.CRC, got)
	}
	if f.Records != 0 {
		return corruptf(name, HeaderSize+4, "footer counts %d records, file holds 0", f.Records)
	}
	return nil
}

// firstReadError says what a short read at off means: the end of the
// file is damage (a chunk is written whole), anything else is the
// source's error (a broken transfer, worth retrying) or, from a
// compressed file, already a *CorruptError of its stream.
func firstReadError(name string, off int64, what string, err error) error {
	var corrupt *CorruptError
	switch {
	case errors.As(err, &corrupt):
		return err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return corruptf(name, off, "%s", what)
	}
	return fmt.Errorf("read data file %s at offset %d: %w", name, off, err)
}
