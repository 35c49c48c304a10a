package datafile

import (
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// Info is everything `netsyctl inspect` shows about one data file.
type Info struct {
	Name string `json:"name"`
	Header
	Sealed bool `json:"sealed"`
	// Footer is nil for an unsealed segment.
	Footer *Footer `json:"footer,omitempty"`
	// Size is the length of the valid part of the file: where a torn tail
	// or a segment's zero padding starts, or the whole file.
	Size    int64    `json:"size"`
	Records []Record `json:"records"`
}

// Record is one decoded record: Entry for segments and chunks, Snapshot for
// snapshots.
type Record struct {
	Offset   int64                   `json:"offset"`
	Size     int                     `json:"size"`
	Entry    *netsyv1.Entry          `json:"-"`
	Snapshot *netsyv1.SnapshotRecord `json:"-"`
}

// MarshalJSON renders the payload with protojson, the canonical JSON form of
// the messages, instead of encoding/json's view of generated structs.
func (r Record) MarshalJSON() ([]byte, error) {
	out := struct {
		Offset   int64           `json:"offset"`
		Size     int             `json:"size"`
		Entry    json.RawMessage `json:"entry,omitempty"`
		Snapshot json.RawMessage `json:"snapshot,omitempty"`
	}{Offset: r.Offset, Size: r.Size}
	var err error
	if r.Entry != nil {
		out.Entry, err = protojson.Marshal(r.Entry)
	}
	if err == nil && r.Snapshot != nil {
		out.Snapshot, err = protojson.Marshal(r.Snapshot)
	}
	if err != nil {
		return nil, fmt.Errorf("marshal record at offset %d: %w", r.Offset, err)
	}
	return json.Marshal(out)
}

// Inspect reads and verifies a whole data file. On damage it returns the
// Info collected up to the damage together with the error, so the valid
// part can still be shown; Info is nil only if the header is unreadable.
func Inspect(name string, r io.Reader) (*Info, error) {
	dr, err := NewReader(name, r)
	if err != nil {
		return nil, err
	}
	info := &Info{Name: name, Header: dr.Header(), Records: []Record{}}
	var snap snapshotChecker
	for {
		var rec Record
		if dr.hdr.Kind.holdsEntries() {
			rec.Entry, err = dr.NextEntry()
		} else {
			var payload []byte
			payload, err = dr.Next()
			if err == nil {
				rec.Snapshot = &netsyv1.SnapshotRecord{}
				if uerr := proto.Unmarshal(payload, rec.Snapshot); uerr != nil {
					err = corruptf(name, dr.recOff, "decode snapshot record: %v", uerr)
				} else {
					err = snap.add(name, dr.recOff, rec.Snapshot)
				}
			}
		}
		info.Size = dr.Offset()
		if err == io.EOF {
			break
		}
		if err != nil {
			return info, err
		}
		rec.Offset = dr.RecordOffset()
		rec.Size = int(dr.Offset() - rec.Offset - RecordHeaderSize)
		info.Records = append(info.Records, rec)
	}
	if f, ok := dr.Footer(); ok {
		info.Sealed, info.Footer = true, &f
	}
	if dr.hdr.Kind == KindSnapshot {
		if err := snap.finish(name, info.Size-FooterSize, *info.Footer); err != nil {
			return info, err
		}
	}
	return info, nil
}
