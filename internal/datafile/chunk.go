package datafile

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// EncodeChunk encodes entries (dense indices, at least one) as a sealed
// object-storage WAL chunk.
func EncodeChunk(entries []*netsyv1.Entry) ([]byte, error) {
	if len(entries) == 0 {
		return nil, errors.New("encode chunk: no entries")
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, KindChunk)
	if err != nil {
		return nil, fmt.Errorf("encode chunk: %w", err)
	}
	for _, e := range entries {
		if err := w.AppendEntry(e); err != nil {
			return nil, fmt.Errorf("encode chunk: %w", err)
		}
	}
	if _, err := w.Finish(); err != nil {
		return nil, fmt.Errorf("encode chunk: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeChunk decodes a sealed entry file: a chunk, or a sealed local segment
// uploaded as is. Any damage, a missing footer or a gap in the indices is an
// error naming name.
func DecodeChunk(name string, data []byte) ([]*netsyv1.Entry, Footer, error) {
	r, err := NewReader(name, bytes.NewReader(data))
	if err != nil {
		return nil, Footer{}, err
	}
	if !r.hdr.Kind.holdsEntries() {
		return nil, Footer{}, fmt.Errorf("data file %s: a %s is not a WAL chunk", name, r.hdr.Kind)
	}
	// A segment that reached object storage must be complete, so its end is
	// judged like a chunk's: a missing footer is damage, not a torn tail.
	r.requireSealed = true
	var entries []*netsyv1.Entry
	for {
		e, err := r.NextEntry()
		if err == io.EOF {
			f, _ := r.Footer()
			return entries, f, nil
		}
		if err != nil {
			return nil, Footer{}, err
		}
		entries = append(entries, e)
	}
}
