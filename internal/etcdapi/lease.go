package etcdapi

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/engine"
)

type leaseServer struct{ s *Server }

var _ pb.LeaseServer = (*leaseServer)(nil)

func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	resp, err := l.s.b.LeaseGrant(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	resp, err := l.s.b.LeaseRevoke(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := l.s.b.LeaseTimeToLive(ctx, r)
	if errors.Is(err, engine.ErrLeaseNotFound) {
		// etcd answers an unknown lease with TTL -1, not an error;
		// `etcdctl lease timetolive` prints "already expired" from it.
		return &pb.LeaseTimeToLiveResponse{Header: l.s.header(nil), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = l.s.header(resp.Header)
	return resp, nil
}

func (l *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	resp, err := l.s.b.LeaseLeases(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = l.s.header(resp.Header)
	return resp, nil
}

// LeaseKeepAlive answers each request in order on the handler goroutine, the
// only one that sends. A second goroutine receives, so the handler can also
// notice Close while a client is idle.
func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	l.s.keepAliveStreams.Add(1)
	defer l.s.keepAliveStreams.Add(-1)
	reqc, errc := recvLoop(ctx, stream.Recv)
	for {
		var req *pb.LeaseKeepAliveRequest
		select {
		case r, ok := <-reqc:
			if !ok {
				return nil // client closed its side; etcd ends the stream too
			}
			req = r
		case err := <-errc:
			return toGRPCError(err)
		case <-ctx.Done():
			return toGRPCError(ctx.Err())
		case <-l.s.stopc:
			return errStopped
		}
		// The header is read before renewing so its revision is never
		// later than the renewal: a client must not see a keep-alive at a
		// revision after the one at which the lease was revoked.
		resp := &pb.LeaseKeepAliveResponse{Header: l.s.header(nil), ID: req.ID}
		ttl, err := l.s.b.LeaseRenew(ctx, req.ID)
		switch {
		case errors.Is(err, engine.ErrLeaseNotFound):
			// etcd reports an unknown lease as TTL 0 on the stream;
			// client/v3 turns that into ErrLeaseNotFound.
			ttl = 0
		case err != nil:
			return toGRPCError(err)
		}
		resp.TTL = ttl
		if err := stream.Send(resp); err != nil {
			return toGRPCError(err)
		}
	}
}

// recvLoop receives from a stream on its own goroutine until Recv fails or
// ctx ends. The channel is closed on a clean end of the client's side
// (io.EOF); any other error is delivered on errc. The goroutine belongs to
// the stream: once the handler returns, gRPC fails Recv and it exits.
func recvLoop[T any](ctx context.Context, recv func() (T, error)) (<-chan T, <-chan error) {
	reqc := make(chan T)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := recv()
			if err == io.EOF {
				close(reqc)
				return
			}
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqc <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	return reqc, errc
}
