package datafile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// Writer streams one data file to an io.Writer. It is not safe for
// concurrent use. After any write error the Writer is broken and returns that
// error from every later call, because the file's running checksum no longer
// matches what reached the underlying writer.
type Writer struct {
	w        io.Writer
	kind     Kind
	off      int64
	crc      uint32 // CRC32C of every byte written so far
	sum      Footer // records and ranges so far; CRC filled by Finish
	buf      []byte // reused encode buffer
	finished bool
	err      error
}

// NewWriter writes the header of a new file of the given kind.
func NewWriter(w io.Writer, kind Kind) (*Writer, error) {
	if !kind.valid() {
		return nil, fmt.Errorf("new data file writer: invalid kind %d", kind)
	}
	wr := &Writer{w: w, kind: kind}
	h := encodeHeader(Header{Version: FormatVersion, Kind: kind})
	if err := wr.write(h[:]); err != nil {
		return nil, err
	}
	return wr, nil
}

// Tail is where an unsealed file ends, as found by a Reader that read it to
// its end (or to its torn tail). A Writer resumed from a Tail continues the
// file as if it had never been closed; the caller must first make sure only
// zeros follow Offset, by truncating the file there or by zeroing what
// follows.
type Tail struct {
	Kind   Kind
	Offset int64
	// Summary holds the record count and, for entry files read with
	// NextEntry, the index and revision ranges; its CRC field is unused.
	Summary Footer
	crc     uint32
	ok      bool
}

// ResumeWriter continues an unsealed file at t.Offset; w must append there.
func ResumeWriter(w io.Writer, t Tail) (*Writer, error) {
	if !t.ok {
		return nil, errors.New("resume data file writer: tail was not produced by a Reader")
	}
	return &Writer{w: w, kind: t.Kind, off: t.Offset, crc: t.crc, sum: t.Summary}, nil
}

// Offset is the number of bytes written to the file so far.
func (w *Writer) Offset() int64 { return w.off }

// Records is the number of records written so far.
func (w *Writer) Records() uint64 { return w.sum.Records }

// LastIndex is the index of the last entry written (0 if none).
func (w *Writer) LastIndex() uint64 { return w.sum.LastIndex }

// AppendEntry appends one log entry. Indices must be dense and start above 0.
func (w *Writer) AppendEntry(e *netsyv1.Entry) error {
	if err := w.checkEntry(e.GetIndex()); err != nil {
		return err
	}
	var err error
	w.buf, err = FrameEntry(w.buf[:0], e)
	if err != nil {
		return err
	}
	return w.appendFramed(w.buf, e.GetIndex(), e.GetRevision())
}

// FrameEntry appends e, marshalled and framed as one record, to dst. The
// WAL frames entries on the caller's goroutine so its writer goroutine only
// copies bytes; pass the frame to Writer.AppendFramed.
func FrameEntry(dst []byte, e *netsyv1.Entry) ([]byte, error) {
	dst, err := frameMessage(dst, e)
	if err != nil {
		return dst, fmt.Errorf("frame entry %d: %w", e.GetIndex(), err)
	}
	return dst, nil
}

// frameMessage marshals m straight after a reserved record header, so
// framing costs no copy and no allocation once dst has grown.
func frameMessage(dst []byte, m proto.Message) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, RecordHeaderSize)...)
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return dst[:start], fmt.Errorf("marshal: %w", err)
	}
	payload := dst[start+RecordHeaderSize:]
	switch {
	case len(payload) == 0:
		return dst[:start], errors.New("empty record")
	case len(payload) > MaxRecordBytes:
		return dst[:start], fmt.Errorf("%d bytes is above the %d byte record limit", len(payload), MaxRecordBytes)
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst, nil
}

// AppendFramed appends a record produced by FrameEntry for the entry with
// the given index and revision.
func (w *Writer) AppendFramed(frame []byte, index uint64, revision int64) error {
	if err := w.checkEntry(index); err != nil {
		return err
	}
	if len(frame) <= RecordHeaderSize || int(binary.LittleEndian.Uint32(frame)) != len(frame)-RecordHeaderSize {
		return fmt.Errorf("append entry %d: malformed frame of %d bytes", index, len(frame))
	}
	return w.appendFramed(frame, index, revision)
}

func (w *Writer) checkEntry(index uint64) error {
	if !w.kind.holdsEntries() {
		return fmt.Errorf("append entry %d: a %s file does not hold entries", index, w.kind)
	}
	if index == 0 {
		return errors.New("append entry: index 0 is not a log position")
	}
	if w.sum.Records > 0 && index != w.sum.LastIndex+1 {
		return fmt.Errorf("append entry %d: not dense, last index is %d", index, w.sum.LastIndex)
	}
	return nil
}

func (w *Writer) appendFramed(frame []byte, index uint64, revision int64) error {
	if err := w.write(frame); err != nil {
		return err
	}
	if w.sum.Records == 0 {
		w.sum.FirstIndex, w.sum.FirstRevision = index, revision
	}
	w.sum.Records++
	w.sum.LastIndex, w.sum.LastRevision = index, revision
	return nil
}

// AppendRecord appends one raw payload. Entry files should use AppendEntry
// so the footer ranges are maintained.
func (w *Writer) AppendRecord(payload []byte) error {
	if len(payload) == 0 {
		// An empty record would let a zero-filled tail parse as valid data.
		return errors.New("append record: empty payload")
	}
	if len(payload) > MaxRecordBytes {
		return fmt.Errorf("append record: %d bytes is above the %d byte record limit", len(payload), MaxRecordBytes)
	}
	w.buf = AppendFrame(w.buf[:0], payload)
	if err := w.write(w.buf); err != nil {
		return err
	}
	w.sum.Records++
	return nil
}

func (w *Writer) appendMessage(m proto.Message) error {
	var err error
	w.buf, err = frameMessage(w.buf[:0], m)
	if err != nil {
		return fmt.Errorf("append record: %w", err)
	}
	return w.writeRecord()
}

// writeRecord writes the record framed in w.buf and counts it.
func (w *Writer) writeRecord() error {
	if err := w.write(w.buf); err != nil {
		return err
	}
	w.sum.Records++
	return nil
}

// setRange fixes the footer ranges of files whose records are not entries
// (a snapshot's footer names the snapshot's own index and revision).
func (w *Writer) setRange(index uint64, revision int64) {
	w.sum.FirstIndex, w.sum.LastIndex = index, index
	w.sum.FirstRevision, w.sum.LastRevision = revision, revision
}

// Finish seals the file with its footer and returns it. The Writer accepts
// nothing afterwards; the caller still owns flushing and syncing w.
func (w *Writer) Finish() (Footer, error) {
	if w.finished {
		return Footer{}, errors.New("finish data file: already finished")
	}
	var b [FooterSize]byte
	encodeFooterBody(b[:], w.sum)
	crc := crc32.Update(w.crc, castagnoli, b[:44])
	binary.LittleEndian.PutUint32(b[44:48], crc)
	copy(b[48:52], footerMagic[:])
	if err := w.write(b[:]); err != nil {
		return Footer{}, err
	}
	w.finished = true
	f := w.sum
	f.CRC = crc
	return f, nil
}

func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.finished {
		return errors.New("write data file: already finished")
	}
	n, err := w.w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("write data file at offset %d: %w", w.off, err)
		return w.err
	}
	w.crc = crc32.Update(w.crc, castagnoli, b)
	w.off += int64(n)
	return nil
}
