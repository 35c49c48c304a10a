package datafile

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// Reader streams the records of one data file, verifying as it goes: the
// header, every record checksum, and for a sealed file the footer's record
// count and the checksum over the whole file. It is not safe for concurrent
// use.
//
// Next and NextEntry return io.EOF at the clean end of the file: after a
// verified footer (Sealed reports true) or, for a segment, at a record
// boundary with no footer. For a segment, zero padding (see the package doc)
// after the last record or after the footer is part of that clean end.
// Damage is a *CorruptError, or a *TornTailError when it can only be the
// unfinished end of an unsealed segment. Every error is sticky.
type Reader struct {
	name          string
	r             io.Reader
	hdr           Header
	requireSealed bool

	off    int64  // offset of the next unread byte
	crc    uint32 // CRC32C of every byte consumed so far
	sum    Footer // what the records read so far add up to
	recOff int64  // offset of the record returned last
	buf    []byte

	sealed bool
	stored Footer
	err    error
}

// NewReader reads and checks the header of the data file r. name is used in
// errors only: a path or an object key.
func NewReader(name string, r io.Reader) (*Reader, error) {
	switch r.(type) {
	case *bufio.Reader, *bytes.Reader, *bytes.Buffer:
	default:
		r = bufio.NewReaderSize(r, 256<<10)
	}
	h, b, err := readHeader(name, r)
	if err != nil {
		return nil, err
	}
	if h.Compression == CompressionZstd {
		d, err := newDecompressor(name, r)
		if err != nil {
			return nil, err
		}
		r = d
	}
	return &Reader{
		name:          name,
		r:             r,
		hdr:           h,
		requireSealed: h.Kind != KindSegment,
		off:           HeaderSize,
		crc:           crc32.Update(0, castagnoli, b[:]),
	}, nil
}

// readHeader reads and checks the header of the data file r: magic,
// version, checksum, kind, and a compression and flags this build reads.
// It returns the header's bytes too, where the file checksum starts.
func readHeader(name string, r io.Reader) (Header, [HeaderSize]byte, error) {
	var b [HeaderSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Header{}, b, corruptf(name, 0, "truncated header")
		}
		return Header{}, b, fmt.Errorf("read data file %s header: %w", name, err)
	}
	if !bytes.Equal(b[0:4], headerMagic[:]) {
		return Header{}, b, corruptf(name, 0, "bad magic %q: not a netsy data file", b[0:4])
	}
	h := Header{Version: b[4], Kind: Kind(b[5]), Compression: Compression(b[6]), Flags: binary.LittleEndian.Uint32(b[8:12])}
	// The version decides the layout of everything after it, so it is
	// checked before anything the layout defines.
	if h.Version != FormatVersion {
		return Header{}, b, fmt.Errorf("data file %s: %w %d (this build reads %d)", name, ErrUnsupportedVersion, h.Version, FormatVersion)
	}
	if got, want := crc32.Checksum(b[:12], castagnoli), binary.LittleEndian.Uint32(b[12:16]); got != want {
		return Header{}, b, corruptf(name, 0, "header checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	if !h.Kind.valid() {
		return Header{}, b, corruptf(name, 5, "unknown kind %d", b[5])
	}
	switch {
	case h.Compression == CompressionNone:
	case h.Compression == CompressionZstd && h.Kind.compressible():
	default:
		return Header{}, b, fmt.Errorf("data file %s: %w %s", name, ErrUnsupportedCompression, h.Compression)
	}
	if h.Flags != 0 || b[7] != 0 {
		return Header{}, b, fmt.Errorf("data file %s: %w %#x (reserved byte %#x)", name, ErrUnsupportedFlags, h.Flags, b[7])
	}
	return h, b, nil
}

// Header returns the file's header.
func (r *Reader) Header() Header { return r.hdr }

// Sealed reports whether a verified footer was read; valid after io.EOF.
func (r *Reader) Sealed() bool { return r.sealed }

// Footer returns the verified footer; ok is false unless Sealed.
func (r *Reader) Footer() (f Footer, ok bool) { return r.stored, r.sealed }

// RecordOffset is the byte offset of the record returned last.
func (r *Reader) RecordOffset() int64 { return r.recOff }

// Offset is the end of the last valid record (or of the footer): the
// file's length for a clean file without padding, where the zero padding
// starts for a padded one, and where the damage starts for a torn one.
func (r *Reader) Offset() int64 { return r.off }

// Tail returns where an unsealed file ends so a Writer can resume it. ok is
// false unless the reader stopped at a clean unsealed end or a torn tail.
func (r *Reader) Tail() (t Tail, ok bool) {
	var torn *TornTailError
	if r.sealed || (r.err != io.EOF && !errors.As(r.err, &torn)) {
		return Tail{}, false
	}
	return Tail{Kind: r.hdr.Kind, Offset: r.off, Summary: r.sum, crc: r.crc, ok: true}, true
}

// Next returns the next record's payload, valid until the next call.
func (r *Reader) Next() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	start := r.off
	var h [RecordHeaderSize]byte
	n, err := io.ReadFull(r.r, h[:])
	switch {
	case err == io.EOF:
		if r.requireSealed {
			return nil, r.fail(corruptf(r.name, start, "missing footer: a %s must be sealed", r.hdr.Kind))
		}
		r.err = io.EOF
		return nil, io.EOF
	case err != nil && err != io.ErrUnexpectedEOF:
		return nil, r.fail(fmt.Errorf("read data file %s at offset %d: %w", r.name, start, err))
	case !r.requireSealed && isZero(h[:n]):
		return nil, r.zeroTail(start, n)
	case err == io.ErrUnexpectedEOF:
		return nil, r.damaged(start, h[:n], "truncated record header")
	}
	length := binary.LittleEndian.Uint32(h[0:4])
	if length == footerMarker {
		return nil, r.readFooter(start, h)
	}
	if length == 0 || length > MaxRecordBytes {
		return nil, r.damaged(start, h[:], fmt.Sprintf("invalid record length %d", length))
	}
	payload, err := r.readPayload(int(length))
	if err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, r.damaged(start, append(h[:], payload...), "truncated record")
		}
		return nil, r.fail(fmt.Errorf("read data file %s at offset %d: %w", r.name, start, err))
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(h[4:8]) {
		return nil, r.damaged(start, append(h[:], payload...), "record checksum mismatch")
	}
	r.crc = crc32.Update(r.crc, castagnoli, h[:])
	r.crc = crc32.Update(r.crc, castagnoli, payload)
	r.off += RecordHeaderSize + int64(length)
	r.sum.Records++
	r.recOff = start
	return payload, nil
}

// NextEntry decodes the next record as a log entry and checks that indices
// are dense. At the end of a sealed file it also checks the footer's index
// and revision ranges against the entries read. Do not mix with Next.
func (r *Reader) NextEntry() (*netsyv1.Entry, error) {
	if !r.hdr.Kind.holdsEntries() {
		return nil, fmt.Errorf("data file %s: a %s does not hold entries", r.name, r.hdr.Kind)
	}
	payload, err := r.Next()
	if err == io.EOF && r.sealed {
		if err := r.checkRange(); err != nil {
			return nil, r.fail(err)
		}
	}
	if err != nil {
		return nil, err
	}
	e := &netsyv1.Entry{}
	if err := proto.Unmarshal(payload, e); err != nil {
		return nil, r.fail(corruptf(r.name, r.recOff, "decode entry: %v", err))
	}
	switch {
	case e.Index == 0:
		return nil, r.fail(corruptf(r.name, r.recOff, "entry has index 0"))
	case r.sum.Records == 1:
		r.sum.FirstIndex, r.sum.FirstRevision = e.Index, e.Revision
	case e.Index != r.sum.LastIndex+1:
		return nil, r.fail(corruptf(r.name, r.recOff, "entry index %d does not follow %d", e.Index, r.sum.LastIndex))
	}
	r.sum.LastIndex, r.sum.LastRevision = e.Index, e.Revision
	return e, nil
}

func (r *Reader) checkRange() error {
	s, f := r.sum, r.stored
	if s.FirstIndex != f.FirstIndex || s.LastIndex != f.LastIndex || s.FirstRevision != f.FirstRevision || s.LastRevision != f.LastRevision {
		return corruptf(r.name, r.off-FooterSize,
			"footer ranges index %d..%d revision %d..%d do not match entries index %d..%d revision %d..%d",
			f.FirstIndex, f.LastIndex, f.FirstRevision, f.LastRevision, s.FirstIndex, s.LastIndex, s.FirstRevision, s.LastRevision)
	}
	return nil
}

// readPayload grows the buffer as bytes actually arrive, so a bogus length
// near the end of a short file cannot make the reader allocate MaxRecordBytes.
func (r *Reader) readPayload(n int) ([]byte, error) {
	if cap(r.buf) >= n {
		m, err := io.ReadFull(r.r, r.buf[:n])
		return r.buf[:m], err
	}
	const step = 1 << 20
	buf := r.buf[:0]
	for len(buf) < n {
		k := min(n-len(buf), step)
		if cap(buf)-len(buf) < k {
			grown := make([]byte, len(buf), min(n, max(2*cap(buf), len(buf)+k)))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r.r, buf[len(buf):len(buf)+k])
		buf = buf[:len(buf)+m]
		if err != nil {
			r.buf = buf
			return buf, err
		}
	}
	r.buf = buf
	return buf, nil
}

func (r *Reader) readFooter(start int64, h [RecordHeaderSize]byte) error {
	var b [FooterSize]byte
	copy(b[:], h[:])
	n, err := io.ReadFull(r.r, b[RecordHeaderSize:])
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return r.damaged(start, b[:RecordHeaderSize+n], "truncated footer")
	}
	if err != nil {
		return r.fail(fmt.Errorf("read data file %s footer at offset %d: %w", r.name, start, err))
	}
	if !bytes.Equal(b[48:52], footerMagic[:]) {
		if !r.requireSealed && tornMagic(b[48:52]) {
			// A footer written over zero padding and cut short by a crash
			// (anywhere, even inside its magic: a sector boundary can fall
			// there) leaves zeros where its end should be: the unfinished
			// seal of an unsealed segment, judged like any other damaged end.
			return r.damaged(start, b[:], "truncated footer")
		}
		return r.fail(corruptf(r.name, start+48, "bad footer magic %q", b[48:52]))
	}
	f := decodeFooterBody(b[:])
	if got := crc32.Update(r.crc, castagnoli, b[:44]); got != f.CRC {
		return r.fail(corruptf(r.name, start+44, "file checksum mismatch (stored %08x, computed %08x)", f.CRC, got))
	}
	if f.Records != r.sum.Records {
		return r.fail(corruptf(r.name, start+4, "footer counts %d records, file holds %d", f.Records, r.sum.Records))
	}
	if r.requireSealed {
		var one [1]byte
		if m, err := io.ReadFull(r.r, one[:]); m > 0 {
			return r.fail(corruptf(r.name, start+FooterSize, "data after footer"))
		} else if err != io.EOF {
			return r.fail(fmt.Errorf("read data file %s after footer: %w", r.name, err))
		}
	} else {
		// A crash while sealing a preallocated segment can leave the
		// footer followed by the padding it was about to be cut from.
		zeros, rest, err := r.skipZeros()
		if err != nil {
			return r.fail(fmt.Errorf("read data file %s after footer: %w", r.name, err))
		}
		if rest != nil {
			return r.fail(corruptf(r.name, start+FooterSize+zeros, "data after footer"))
		}
	}
	r.off = start + FooterSize
	r.sealed = true
	r.stored = f
	r.err = io.EOF
	return io.EOF
}

// tornMagic reports whether m is the footer magic cut short over zero
// padding: a prefix of it (possibly empty), then zeros.
func tornMagic(m []byte) bool {
	k := 0
	for k < len(m) && m[k] == footerMagic[k] {
		k++
	}
	return isZero(m[k:])
}

// damaged decides what a bad record at start means. consumed is what was
// read of it; the rest of the input is read here. It is a torn tail only if
// the file may legitimately be unfinished (an unsealed segment), it does not
// end in a footer, and no valid record can be found anywhere after the
// damage; otherwise acknowledged data could be behind it and truncating
// would lose it silently.
func (r *Reader) damaged(start int64, consumed []byte, reason string) error {
	rest, err := io.ReadAll(r.r)
	if err != nil {
		return r.fail(fmt.Errorf("read data file %s after offset %d: %w", r.name, start, err))
	}
	tail := append(append([]byte(nil), consumed...), rest...)
	// Zero padding after a footer does not make the file any less sealed.
	end := bytes.TrimRight(tail, "\x00")
	switch {
	case r.requireSealed:
		return r.fail(corruptf(r.name, start, "%s", reason))
	case len(end) >= FooterSize && bytes.HasSuffix(end, footerMagic[:]):
		return r.fail(corruptf(r.name, start, "%s in a sealed file", reason))
	}
	// A flipped payload bit leaves the length intact: the next record is
	// where the length says, and checking there first is cheap.
	if len(tail) >= RecordHeaderSize {
		if n := binary.LittleEndian.Uint32(tail); n != footerMarker && recordAt(tail, RecordHeaderSize+int(n)) {
			return r.fail(corruptf(r.name, start, "%s, followed by a valid record at offset %d", reason, start+RecordHeaderSize+int64(n)))
		}
	}
	switch p, found := findRecord(tail[1:]); {
	case found:
		return r.fail(corruptf(r.name, start, "%s, followed by a valid record at offset %d", reason, start+1+int64(p)))
	case p >= 0:
		return r.fail(corruptf(r.name, start, "%s, and the %d bytes after it are too costly to rule out valid records", reason, len(tail)))
	}
	return r.fail(&TornTailError{Name: r.name, Offset: start, Reason: reason})
}

// zeroTail is called where a segment's next record header (n bytes of it
// read, the rest beyond the end of the input) is all zeros. Zeros from there
// to the end of the input are preallocated space the writer has not reached
// yet: the clean end of the file. A nonzero byte anywhere after them means
// the zeros are damage instead, judged by damaged like any other.
func (r *Reader) zeroTail(start int64, n int) error {
	zeros, rest, err := r.skipZeros()
	if err != nil {
		return r.fail(fmt.Errorf("read data file %s after offset %d: %w", r.name, start, err))
	}
	if rest == nil {
		r.err = io.EOF
		return io.EOF
	}
	// damaged needs the bytes as they were; the zeros are rebuilt rather
	// than kept while scanning, since on the clean path they are discarded.
	zeros += int64(n)
	consumed := make([]byte, zeros+int64(len(rest)))
	copy(consumed[zeros:], rest)
	return r.damaged(start, consumed, fmt.Sprintf("zero record header, then a nonzero byte at offset %d", start+zeros))
}

// zeroBlock is compared against, never written.
var zeroBlock [64 << 10]byte

func isZero(b []byte) bool {
	for len(b) > len(zeroBlock) {
		if !bytes.Equal(b[:len(zeroBlock)], zeroBlock[:]) {
			return false
		}
		b = b[len(zeroBlock):]
	}
	return bytes.Equal(b, zeroBlock[:len(b)])
}

// skipZeros reads to the end of the input as long as it is all zeros. It
// returns how many zero bytes it read and, if it met a nonzero byte, the
// bytes it read from that one on (rest is nil otherwise).
func (r *Reader) skipZeros() (zeros int64, rest []byte, err error) {
	buf := make([]byte, len(zeroBlock))
	for {
		n, err := r.r.Read(buf)
		if !isZero(buf[:n]) {
			i := 0
			for buf[i] == 0 {
				i++
			}
			return zeros + int64(i), buf[i:n], nil
		}
		zeros += int64(n)
		if err == io.EOF {
			return zeros, nil, nil
		}
		if err != nil {
			return zeros, nil, err
		}
	}
}

// recordAt reports whether a complete record with a matching checksum
// starts at b[p:].
func recordAt(b []byte, p int) bool {
	if p < 0 || p+RecordHeaderSize > len(b) {
		return false
	}
	n := int(binary.LittleEndian.Uint32(b[p:]))
	if n == 0 || n > len(b)-p-RecordHeaderSize {
		return false
	}
	return crc32.Checksum(b[p+RecordHeaderSize:p+RecordHeaderSize+n], castagnoli) == binary.LittleEndian.Uint32(b[p+4:])
}

// findRecord reports whether b holds a complete record with a matching
// checksum anywhere, returning its position. A candidate is hashed only if
// what follows it could be the file's continuation (the end, zero padding
// to the end, a footer, or another plausible length), and small candidates
// are tried before large
// ones, since a damaged length is usually followed within a record or two by
// a real, ordinary-sized one. Hostile input can still make this quadratic,
// so the work is capped; when the cap is hit it returns found=false with
// p >= 0 and the caller must assume the worst. p is -1 when b certainly
// holds no record.
func findRecord(b []byte) (p int, found bool) {
	budget := 64<<20 + 4*len(b)
	// Where zeros to the end start; no record starts inside them, since a
	// record's length is never 0.
	padding := len(bytes.TrimRight(b, "\x00"))
	for lo, hi := 0, 4<<10; lo < MaxRecordBytes; lo, hi = hi, hi*16 {
		for p = 0; p < padding && p+RecordHeaderSize < len(b); p++ {
			n := int(binary.LittleEndian.Uint32(b[p:]))
			if n <= lo || n > hi || n > len(b)-p-RecordHeaderSize {
				continue
			}
			if q := p + RecordHeaderSize + n; q+4 <= len(b) {
				if next := binary.LittleEndian.Uint32(b[q:]); next != footerMarker && (next == 0 && q < padding || int(next) > len(b)-q-RecordHeaderSize) {
					continue
				}
			}
			if budget -= n; budget < 0 {
				return p, false
			}
			payload := b[p+RecordHeaderSize : p+RecordHeaderSize+n]
			if crc32.Checksum(payload, castagnoli) == binary.LittleEndian.Uint32(b[p+4:]) {
				return p, true
			}
		}
	}
	return -1, false
}

func (r *Reader) fail(err error) error {
	r.err = err
	return err
}
