package peer

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// minClientPing is the shortest ping interval the server tolerates from a
// client; the Pool pings every keepaliveTime, twice as long.
const minClientPing = 5 * time.Second

// NewServer returns a gRPC server with the options the peer port needs,
// followed by opts (TLS credentials, interceptors), which win where they
// overlap. The caller registers the services and runs it with Serve.
func NewServer(opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(ServerOptions(), opts...)...)
}

// ServerOptions are the options NewServer starts from, for a server built
// elsewhere (the node's peer port is built by the etcd API, which adds its
// own codec and services).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		// Fixed windows: no bandwidth-delay pings (see streamWindowBytes).
		grpc.InitialWindowSize(streamWindowBytes),
		grpc.InitialConnWindowSize(connWindowBytes),
		// Every replica holds a Follow stream and every role its own calls;
		// the count is bounded by the cluster, not by this limit.
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             minClientPing,
			PermitWithoutStream: true,
		}),
		// The server pings too, so a stream from a peer that vanished
		// without closing its socket ends within 15 s.
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    keepaliveTime,
			Timeout: keepaliveTimeout,
		}),
	}
}

// Serving is a gRPC server running on one listener, in a goroutine it owns.
type Serving struct {
	g    *grpc.Server
	done chan struct{}
	err  error // set before done is closed
}

// Serve runs g on l until Close, Shutdown, or l fails (memnet's Down closes
// it, as a killed process loses its socket). g owns l from now on.
func Serve(g *grpc.Server, l net.Listener) *Serving {
	s := &Serving{g: g, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := g.Serve(l)
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
		s.err = err
	}()
	return s
}

// Done is closed once the server stopped serving.
func (s *Serving) Done() <-chan struct{} { return s.done }

// Err is why the server stopped serving on its own (the listener failed);
// nil while it serves and after a stop by Close or Shutdown.
func (s *Serving) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Close stops the server at once, ending every connection and RPC, and
// waits for the serving goroutine.
func (s *Serving) Close() {
	s.g.Stop()
	<-s.done
}

// Shutdown stops accepting connections and waits for RPCs in flight to
// finish; when ctx ends first it stops the server as Close does. It returns
// ctx's error in that case. Long-lived streams never finish on their own:
// their owners end them before calling Shutdown.
func (s *Serving) Shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	graceful := make(chan struct{})
	wg.Go(func() {
		defer close(graceful)
		s.g.GracefulStop()
	})
	defer wg.Wait()
	select {
	case <-graceful:
		<-s.done
		return nil
	case <-ctx.Done():
		select {
		case <-graceful:
			<-s.done
			return nil
		default:
		}
		s.g.Stop()
		<-s.done
		return ctx.Err()
	}
}
