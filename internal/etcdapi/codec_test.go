package etcdapi

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// The codec must put the same bytes on the wire as gRPC's default codec,
// for small (unpooled) and large (pooled) messages alike.
func TestCodecMatchesDefaultCodec(t *testing.T) {
	c := newCodec()
	def := encoding.GetCodecV2("proto")
	big := bytes.Repeat([]byte("v"), 64<<10)
	msgs := []any{
		&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: 7, PrevKv: true},
		// A write's answer, within tinyMax, and one just past it.
		&pb.PutResponse{Header: &pb.ResponseHeader{ClusterId: 1 << 63, MemberId: 1 << 62, Revision: 1 << 20, RaftTerm: 3}},
		&pb.PutResponse{Header: &pb.ResponseHeader{ClusterId: 1 << 63, MemberId: 1 << 62, Revision: 1 << 20, RaftTerm: 3},
			PrevKv: &mvccpb.KeyValue{Key: []byte("0123456789")}},
		&pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 9}, Kvs: []*mvccpb.KeyValue{
			{Key: []byte("a"), Value: big, CreateRevision: 2, ModRevision: 3, Version: 2},
			{Key: []byte("b"), Value: []byte("x"), ModRevision: 4},
		}, Count: 2},
		&pb.WatchResponse{WatchId: 3, Events: []*mvccpb.Event{{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("a")}}}},
		&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING},
	}
	for _, m := range msgs {
		got, err := c.Marshal(m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		want, err := def.Marshal(m)
		if err != nil {
			t.Fatalf("%T default: %v", m, err)
		}
		if !bytes.Equal(got.Materialize(), want.Materialize()) {
			t.Errorf("%T: codec bytes differ from the default codec's", m)
		}
		got.Free()
		want.Free()
	}
}

// Unmarshal must accept a message split over several buffers, and the
// result must not alias buffers that go back to the pool.
func TestCodecUnmarshalSplitBuffers(t *testing.T) {
	c := newCodec()
	in := &pb.PutRequest{Key: []byte("key"), Value: bytes.Repeat([]byte("x"), 300)}
	wire, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, split := range []int{len(wire), 5, 1} {
		var data mem.BufferSlice
		for off := 0; off < len(wire); off += split {
			data = append(data, mem.SliceBuffer(bytes.Clone(wire[off:min(off+split, len(wire))])))
		}
		var out pb.PutRequest
		if err := c.Unmarshal(data, &out); err != nil {
			t.Fatalf("split %d: %v", split, err)
		}
		for _, b := range data {
			clear(b.ReadOnlyData())
		}
		if !proto.Equal(protoadapt.MessageV2Of(&out), protoadapt.MessageV2Of(in)) {
			t.Fatalf("split %d: got %v, want %v", split, &out, in)
		}
	}
	var h healthpb.HealthCheckRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x01, 'x'})}, &h); err != nil || h.Service != "x" {
		t.Fatalf("fallback unmarshal: %v %q", err, h.Service)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x05, 'x'})}, &pb.PutRequest{}); err == nil {
		t.Fatal("truncated message unmarshaled without error")
	}
}

// A write's answer (a header with a node's 64-bit ids, about 30 bytes) is
// marshaled in one allocation, its bytes inside the buffer gRPC frees.
func TestCodecWriteAnswerIsOneAllocation(t *testing.T) {
	c := newCodec()
	m := &pb.PutResponse{Header: &pb.ResponseHeader{ClusterId: 1 << 63, MemberId: 1 << 62, Revision: 1 << 20, RaftTerm: 3}}
	if got := testing.AllocsPerRun(100, func() {
		bs, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bs.Free()
	}); got != 1 {
		t.Fatalf("%.1f allocations per %d-byte answer, want 1", got, m.Size())
	}
}
