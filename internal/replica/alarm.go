package replica

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// alarmLocal is the engine's alarm side (engine.Engine.Alarm).
type alarmLocal interface {
	Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error)
}

// Alarm lists the alarms this node applied (they are state of the log, so
// every node lists the same ones once it has applied as far); raising and
// clearing one are writes, made where writes are.
func (b *Backend) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	l, ok := b.l.(alarmLocal)
	if !ok {
		return &pb.AlarmResponse{Header: &pb.ResponseHeader{Revision: b.l.CurrentRevision()}}, nil
	}
	if r.Action == pb.AlarmRequest_GET {
		return l.Alarm(ctx, r)
	}
	return write(ctx, b, func(ctx context.Context) (*pb.AlarmResponse, error) { return l.Alarm(ctx, r) },
		unary(func(ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) (*pb.AlarmResponse, error) {
			return pb.NewMaintenanceClient(c).Alarm(ctx, r, opts...)
		}), nil)
}
