package etcdapi

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	// Registers the default "proto" codec this one falls back to.
	_ "google.golang.org/grpc/encoding/proto"
)

// generatedMessage is what gogo-generated messages (every etcd API type)
// implement: straight-line size, marshal and unmarshal code.
type generatedMessage interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
	Unmarshal([]byte) error
}

// codec is the client port's gRPC codec. gRPC's default codec reaches the
// etcd types through protobuf's adapter for old-API messages, which wraps
// every message and walks it by reflection; calling the generated methods
// directly costs a fraction of that on every request and response. Other
// messages (the health service) go to the default codec. It registers under
// the default codec's name, so clients see nothing different.
type codec struct {
	fallback encoding.CodecV2
}

func newCodec() *codec {
	return &codec{fallback: encoding.GetCodecV2("proto")}
}

func (c *codec) Name() string { return "proto" }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(generatedMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.Size()
	if size > tinyMin && size <= tinyMax {
		tb := &tinyBuffer{}
		tb.buf = tb.data[:size:size]
		if err := marshalInto(m, tb.buf); err != nil {
			return nil, err
		}
		tb.slice[0] = &tb.buf
		return tb.slice[:], nil
	}
	if mem.IsBelowBufferPoolingThreshold(size) {
		sb := &smallBuffer{buf: make([]byte, size)}
		if err := marshalInto(m, sb.buf); err != nil {
			return nil, err
		}
		sb.slice[0] = &sb.buf
		return sb.slice[:], nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if err := marshalInto(m, *buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// smallBuffer holds an unpooled message and the one-element BufferSlice
// pointing at it in one allocation, where the slice and the boxed
// SliceBuffer would be two more: every watch response is one of these.
type smallBuffer struct {
	buf   mem.SliceBuffer
	slice [1]mem.Buffer
}

// tinyBuffer is a smallBuffer with the message's bytes inside it: the
// answer to a write (a header, about 30 bytes with a node's 64-bit ids,
// and nothing else unless prev_kv was asked for) is one allocation
// instead of two, and no more bytes: tinyMax fills the 80-byte size
// class, which a smallBuffer (48) and a slice of more than tinyMin bytes
// (32 or 48) take as well; a smaller message stays a smallBuffer, whose
// two allocations are then fewer bytes. It is never reused, so it needs no rule about
// when gRPC is done with it: gRPC's pooled buffers are refcounted
// (mem.NewBuffer), mem.Buffer cannot be implemented outside package mem,
// and NewBuffer does not pool below its threshold (1 KiB), so a reply this
// small could be pooled only in a 4 KiB buffer of gRPC's pool.
type tinyBuffer struct {
	smallBuffer
	data [tinyMax]byte
}

const tinyMin, tinyMax = 24, 40

// marshalInto fills buf, which is exactly m.Size() long. Generated code
// writes backwards from the end, so a short write would leave the message
// at an offset: that means the message changed while being marshaled.
func marshalInto(m generatedMessage, buf []byte) error {
	n, err := m.MarshalToSizedBuffer(buf)
	if err != nil {
		return err
	}
	if n != len(buf) {
		return fmt.Errorf("etcdapi codec: %T marshaled to %d bytes, sized %d", m, n, len(buf))
	}
	return nil
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(generatedMessage)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	// Generated Unmarshal copies bytes and strings out of its input, so the
	// buffers can go back to gRPC's pool once it returns.
	if len(data) == 1 {
		return m.Unmarshal(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.Unmarshal(buf.ReadOnlyData())
}
