package etcdapi

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The encoder's responses must be the bytes of the WatchResponse they
// stand for, whatever the watch id, selection and prev_kv choice, and a
// cached batch must not leak into a different selection.
func TestEncodedWatchResponseMatchesGenerated(t *testing.T) {
	kv := func(k string, rev int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(k), Value: bytes.Repeat([]byte(k), 70), CreateRevision: 2, ModRevision: rev, Version: 3, Lease: 9}
	}
	evs := []*mvccpb.Event{
		{Type: mvccpb.PUT, Kv: kv("a", 10), PrevKv: kv("a", 8)},
		{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("b"), ModRevision: 10}, PrevKv: kv("b", 7)},
		{Type: mvccpb.PUT, Kv: kv("c", 10)},
	}
	hdr1 := &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 10, RaftTerm: 1}
	hdr2 := &pb.ResponseHeader{ClusterId: 1, MemberId: 2, Revision: 11, RaftTerm: 1}
	var enc watchEncoder
	for _, tc := range []struct {
		hdr   *pb.ResponseHeader
		id    int64
		sel   []eventSel
		reset bool
	}{
		{hdr1, 0, []eventSel{{0, true}, {1, true}, {2, false}}, true},
		{hdr1, 1, []eventSel{{0, true}, {1, true}, {2, false}}, false}, // cached batch
		{hdr1, 300, []eventSel{{0, false}, {1, false}, {2, false}}, false},
		{hdr1, 7, []eventSel{{1, true}}, false},
		{hdr2, 1 << 40, []eventSel{{1, true}}, false},
		{hdr2, -1, []eventSel{{2, false}}, true},
	} {
		if tc.reset {
			enc.reset()
		}
		got, err := enc.response(tc.hdr, tc.id, evs, tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		want := &pb.WatchResponse{Header: tc.hdr, WatchId: tc.id}
		for _, s := range tc.sel {
			ev := *evs[s.i]
			if !s.prev {
				ev.PrevKv = nil
			}
			want.Events = append(want.Events, &ev)
		}
		wantBytes, err := want.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		wire, err := newCodec().Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if gotBytes := wire.Materialize(); !bytes.Equal(gotBytes, wantBytes) {
			t.Fatalf("id %d sel %v: encoded response differs from the generated one\n got %x\nwant %x", tc.id, tc.sel, gotBytes, wantBytes)
		}
		var back pb.WatchResponse
		if err := back.Unmarshal(wantBytes); err != nil || back.WatchId != tc.id || len(back.Events) != len(tc.sel) {
			t.Fatalf("round trip: %v %+v", err, back)
		}
	}
}
