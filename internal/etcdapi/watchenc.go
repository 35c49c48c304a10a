package etcdapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Wire tags of the WatchResponse fields an event response carries
// (field number << 3 | wire type).
const (
	tagHeader  = 1<<3 | 2 // header, length-delimited
	tagWatchID = 2<<3 | 0 // watch_id, varint
	tagEvents  = 11<<3 | 2
)

// eventSel is one event chosen for a watcher: its position in the batch
// and whether its prev_kv goes along.
type eventSel struct {
	i    int
	prev bool
}

// event returns the chosen event of evs, without its prev_kv unless that
// goes along. Events are shared with the Backend: copy, never modify.
func (s eventSel) event(evs []*mvccpb.Event) *mvccpb.Event {
	ev := evs[s.i]
	if !s.prev && ev.PrevKv != nil {
		ev = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv}
	}
	return ev
}

// watchEncoder encodes the parts of event responses that watchers of one
// stream share. A thousand watchers of one key get the same events in
// responses that differ only in watch_id, so the events are encoded once
// per batch and the header once per revision, and each response is two
// copies and a varint.
type watchEncoder struct {
	hdrFor *pb.ResponseHeader
	hdr    []byte // hdrFor as field 1

	valid  bool // sel/events describe the current batch
	sel    []eventSel
	events []byte // the events of sel as repeated field 11

	// resp is what response returns, reused: a response is only valid
	// until the stream's next send anyway.
	resp encodedWatchResponse
}

// reset forgets the events: a new batch is being delivered.
func (e *watchEncoder) reset() { e.valid = false }

// response returns the response carrying the events sel picks from evs,
// for watch id.
func (e *watchEncoder) response(hdr *pb.ResponseHeader, id int64, evs []*mvccpb.Event, sel []eventSel) (*encodedWatchResponse, error) {
	if hdr != e.hdrFor {
		b, err := appendField(e.hdr[:0], tagHeader, hdr)
		if err != nil {
			return nil, err
		}
		e.hdr, e.hdrFor = b, hdr
	}
	if !e.valid || !slices.Equal(e.sel, sel) {
		e.events = e.events[:0]
		for _, s := range sel {
			b, err := appendField(e.events, tagEvents, s.event(evs))
			if err != nil {
				return nil, err
			}
			e.events = b
		}
		e.sel = append(e.sel[:0], sel...)
		e.valid = true
	}
	e.resp = encodedWatchResponse{hdr: e.hdr, id: id, events: e.events}
	return &e.resp, nil
}

// appendField appends m as length-delimited field tag.
func appendField(b []byte, tag uint64, m generatedMessage) ([]byte, error) {
	size := m.Size()
	b = binary.AppendUvarint(b, tag)
	b = binary.AppendUvarint(b, uint64(size))
	n := len(b)
	b = slices.Grow(b, size)[:n+size]
	if err := marshalInto(m, b[n:]); err != nil {
		return nil, err
	}
	return b, nil
}

// encodedWatchResponse is an event response put together from encoded
// parts; the codec sends it as it would the WatchResponse with the same
// header, watch id and events, byte for byte. Its parts belong to the
// stream's encoder and are only valid until the stream's next send: gRPC
// marshals a message before SendMsg returns.
type encodedWatchResponse struct {
	hdr    []byte
	id     int64
	events []byte
}

func (r *encodedWatchResponse) Size() int {
	n := len(r.hdr) + len(r.events)
	if r.id != 0 {
		n += 1 + varintLen(uint64(r.id))
	}
	return n
}

// MarshalToSizedBuffer fills b, which must be exactly Size() long, in
// field order as generated code writes it (zero watch_id omitted).
func (r *encodedWatchResponse) MarshalToSizedBuffer(b []byte) (int, error) {
	if len(b) != r.Size() {
		return 0, fmt.Errorf("encoded watch response: buffer of %d bytes for %d", len(b), r.Size())
	}
	n := copy(b, r.hdr)
	if r.id != 0 {
		b[n] = tagWatchID
		n++
		n += binary.PutUvarint(b[n:], uint64(r.id))
	}
	n += copy(b[n:], r.events)
	return n, nil
}

// Unmarshal is never called: the type is only sent.
func (r *encodedWatchResponse) Unmarshal([]byte) error {
	return errors.New("encoded watch response: send-only")
}
