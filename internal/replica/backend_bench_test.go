package replica

import (
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
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

// steppingLocal applies one more index each time the Backend takes a
// commit notification: a forwarded write's answer that arrives just before
// the replica applies the Primary's commit point, as it usually does.
type steppingLocal struct {
	Local
	applied uint64
	closed  chan struct{}
}

func (l *steppingLocal) CommittedIndex() uint64 { return l.applied }
func (l *steppingLocal) CommitNotify() <-chan struct{} {
	l.applied++
	return l.closed
}

// BenchmarkWaitAppliedOneStep measures the wait of a forwarded write for
// its commit point to be applied here when it is one step away.
func BenchmarkWaitAppliedOneStep(b *testing.B) {
	l := &steppingLocal{closed: make(chan struct{})}
	close(l.closed)
	be := NewBackend(BackendConfig{Local: l, Roles: newFakeRoles(nil, 0), Clock: clock.Real()})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := be.waitApplied(ctx, l.applied+1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFormatRequestID measures naming a forwarded write (once per
// forwarded write): member ids and sequences are large numbers.
func BenchmarkFormatRequestID(b *testing.B) {
	id := engine.RequestID{Member: 0x8e2c_91f0_3a7b_d415, Seq: randomSeq()}
	b.ReportAllocs()
	for b.Loop() {
		if s := formatRequestID(id); len(s) < 3 {
			b.Fatal(s)
		}
		id.Seq++
	}
}

// A request id reads back as it was written, up to the largest numbers.
func TestRequestIDReadsBackAsWritten(t *testing.T) {
	for _, id := range []engine.RequestID{{Member: 0, Seq: 0}, {Member: 7, Seq: 1 << 62}, {Member: ^uint64(0), Seq: ^uint64(0)}} {
		if got, ok := parseRequestID(formatRequestID(id)); !ok || got != id {
			t.Fatalf("%+v reads back as %+v (%v)", id, got, ok)
		}
	}
}
