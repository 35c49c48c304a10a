package datafile

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// A compressed file is the same file with everything after its 16-byte
// header run through one zstd stream: the header (naming the compression)
// stays readable as it is, and the records and the footer, their checksums
// and the file checksum are exactly those of the uncompressed file. Offsets
// in errors about a compressed file are offsets in that uncompressed form.
// Only files written whole (snapshots, chunks) may be compressed: a segment
// is appended in place and resumed from its tail, which a stream cannot do.
//
// zstd and not snappy/s2: a snapshot holds many values that repeat (the
// same object stored under many keys, a key's versions differing in a few
// bytes) at distances of megabytes, and zstd's window finds them where
// s2's 64 KiB blocks do not; at its fastest level it still encodes at
// several hundred MB/s and decodes faster than the index can be rebuilt.

const (
	// zstdWindow bounds what the encoder looks back over and what a
	// decoder accepts, so a hostile header cannot make a reader allocate
	// more than this per stream.
	zstdWindow = 8 << 20
)

// compressible reports whether files of kind k may be compressed.
func (k Kind) compressible() bool { return k == KindSnapshot || k == KindChunk }

// newCompressor returns a zstd stream writing to w. Concurrency 1 keeps it
// synchronous: no goroutine outlives the call that writes or closes it.
func newCompressor(w io.Writer) (*zstd.Encoder, error) {
	enc, err := zstd.NewWriter(w,
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(zstdWindow),
		// Not WithLowerEncoderMem: its history of one window plus a block
		// moves a whole window back every block, 4x slower on a snapshot.
		zstd.WithEncoderCRC(false)) // the file's own checksums cover every byte
	if err != nil {
		return nil, fmt.Errorf("zstd writer: %w", err)
	}
	return enc, nil
}

// decompressor reads the zstd stream that follows a compressed file's
// header. Errors from the source (a network read, a closed file) are passed
// on as they are, so that a caller can retry them; an error of the stream
// itself is damage of the file and becomes a *CorruptError.
type decompressor struct {
	name string
	src  *errReader
	dec  *zstd.Decoder
	out  int64 // uncompressed offset reached, header included
	err  error
}

// errReader remembers the last error its reader returned other than EOF.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

func newDecompressor(name string, r io.Reader) (*decompressor, error) {
	dec, err := newZstdDecoder()
	if err != nil {
		return nil, fmt.Errorf("data file %s: %w", name, err)
	}
	return resetDecompressor(name, r, dec)
}

// newZstdDecoder makes a decoder for compressed files, to be pointed at
// one with resetDecompressor. Concurrency 1 decodes on the caller's
// goroutine: nothing to stop.
func newZstdDecoder() (*zstd.Decoder, error) {
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(zstdWindow),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, fmt.Errorf("zstd reader: %w", err)
	}
	return dec, nil
}

// resetDecompressor points dec at the zstd stream r (what follows a
// compressed file's header), forgetting any stream it was reading.
func resetDecompressor(name string, r io.Reader, dec *zstd.Decoder) (*decompressor, error) {
	src := &errReader{r: r}
	if err := dec.Reset(src); err != nil {
		return nil, fmt.Errorf("data file %s: zstd reader: %w", name, err)
	}
	return &decompressor{name: name, src: src, dec: dec, out: HeaderSize}, nil
}

func (d *decompressor) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.dec.Read(p)
	d.out += int64(n)
	switch {
	case err == nil, err == io.EOF:
		return n, err
	case d.src.err != nil:
		d.err = d.src.err
	default:
		// A compressed file is written whole: a stream cut short is
		// damage like any other.
		d.err = corruptf(d.name, d.out, "zstd stream: %v", err)
	}
	return n, d.err
}

// compressTail is the io.Writer a compressed file's Writer writes to: the
// header goes to w as it is, everything after it into the zstd stream.
type compressTail struct {
	w      io.Writer
	enc    *zstd.Encoder
	header int
}

func (c *compressTail) Write(b []byte) (int, error) {
	n := 0
	if c.header < HeaderSize {
		k := min(HeaderSize-c.header, len(b))
		m, err := c.w.Write(b[:k])
		c.header += m
		n += m
		if err != nil {
			return n, err
		}
		b = b[k:]
	}
	if len(b) == 0 {
		return n, nil
	}
	m, err := c.enc.Write(b)
	return n + m, err
}

// NewCompressedWriter is NewWriter for a file whose records and footer are
// zstd-compressed (see compress.go). Close must follow Finish: it ends the
// stream; the caller still owns flushing and syncing w.
func NewCompressedWriter(w io.Writer, kind Kind) (*CompressedWriter, error) {
	if !kind.compressible() {
		return nil, fmt.Errorf("new data file writer: a %s is never compressed", kind)
	}
	enc, err := newCompressor(w)
	if err != nil {
		return nil, err
	}
	wr := &Writer{w: &compressTail{w: w, enc: enc}, kind: kind}
	h := encodeHeader(Header{Version: FormatVersion, Kind: kind, Compression: CompressionZstd})
	if err := wr.write(h[:]); err != nil {
		return nil, err
	}
	return &CompressedWriter{Writer: wr, enc: enc}, nil
}

// CompressedWriter is a Writer whose output is compressed.
type CompressedWriter struct {
	*Writer
	enc *zstd.Encoder
}

// Close ends the zstd stream, writing what it still buffers.
func (c *CompressedWriter) Close() error {
	if err := c.enc.Close(); err != nil {
		return fmt.Errorf("close zstd stream: %w", err)
	}
	return nil
}

// A ChunkSealer seals chunks and snapshots built in memory into their
// compressed form (SealCompressed). EncodeAll runs on the caller's
// goroutine; with concurrency 1 callers take turns on one encoder state,
// which lives as long as its owner (an objwal Log): the low-memory option
// and a window of a default chunk's size keep its history buffer near one
// chunk rather than twice the window. It is not shared process-wide: the
// encoder's state includes channels, which belong to whoever made them
// (a simulated cluster's nodes each run in their own test bubble).
type ChunkSealer struct{ enc *zstd.Encoder }

// NewChunkSealer makes a ChunkSealer.
func NewChunkSealer() (*ChunkSealer, error) {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(4<<20),
		zstd.WithLowerEncoderMem(true),
		zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return &ChunkSealer{enc: enc}, nil
}

// SealCompressed is ChunkSealer.Seal on a sealer made for this one call.
func SealCompressed(file []byte, sum Footer) ([]byte, error) {
	sl, err := NewChunkSealer()
	if err != nil {
		return nil, fmt.Errorf("seal data file: %w", err)
	}
	return sl.Seal(file, sum)
}

// Seal checks and seals file as Seal does and returns the compressed
// file, which decodes to the same records and ranges. The bytes of file
// may be overwritten. Equal input gives equal output, so a retried upload
// carries the same bytes.
func (sl *ChunkSealer) Seal(file []byte, sum Footer) ([]byte, error) {
	return sl.AppendSeal(nil, file, sum)
}

// AppendSeal is Seal appending the compressed file to dst, so that a
// caller sealing one chunk after another reuses one buffer for their
// bodies (objwal's uploader). The result never shares memory with file:
// file may be reused as soon as AppendSeal returns, and dst's old
// contents only once the caller is done with them. The bytes are those
// Seal returns, whatever dst held.
func (sl *ChunkSealer) AppendSeal(dst, file []byte, sum Footer) ([]byte, error) {
	if len(file) >= HeaderSize && !Kind(file[5]).compressible() {
		return nil, fmt.Errorf("seal data file: a %s is never compressed", Kind(file[5]))
	}
	// The checksum is taken over the header the compressed file carries.
	sealed, err := seal(file, sum, CompressionZstd)
	if err != nil {
		return nil, err
	}
	h := encodeHeader(Header{Version: FormatVersion, Kind: Kind(sealed[5]), Compression: CompressionZstd})
	if dst == nil {
		dst = make([]byte, 0, HeaderSize+len(sealed)/2)
	}
	dst = append(dst, h[:]...)
	return sl.enc.EncodeAll(sealed[HeaderSize:], dst), nil
}
