package replica

import (
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
)

// instantLocal is an engine that answers every Put at once, so a
// benchmark measures only what the Backend adds to a write.
type instantLocal struct{ Local }

func (instantLocal) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	return &pb.PutResponse{}, nil
}
func (instantLocal) CommittedIndex() uint64 { return 1 }

// BenchmarkBackendPutOnPrimary measures what the Backend costs a write a
// client sends to the Active Primary itself (run with -benchmem: the
// allocations per write are what it pins).
func BenchmarkBackendPutOnPrimary(b *testing.B) {
	be := NewBackend(BackendConfig{Local: instantLocal{}, Roles: activeRoles{newFakeRoles(nil, 0)},
		Conn: nil, Clock: clock.Real()})
	ctx := context.Background()
	req := &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := be.Put(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
