package peer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/peer/memnet"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	// noAnswer is the deadline of a call that must not be answered; it is
	// well under the Pool's 1 s connect timeout, so a call made while a
	// dial hangs is still waiting for that dial when it expires.
	noAnswer = 200 * time.Millisecond
	// patience bounds a call that must succeed, reconnect backoff included.
	patience = 10 * time.Second
)

// server is one node's peer port: a health service and an echoing Follow
// service.
type server struct {
	addr    string
	health  *health.Server
	serving *peer.Serving
}

func serve(t *testing.T, nw peer.Network, addr string) *server {
	t.Helper()
	l, err := nw.Listen(addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	g := peer.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	netsyv1.RegisterFollowServer(g, followEcho{})
	s := &server{addr: l.Addr().String(), health: hs, serving: peer.Serve(g, l)}
	t.Cleanup(s.serving.Close)
	return s
}

// followEcho answers every FollowStart with an entry whose value is the
// start's node id, so a large message crosses in each direction.
type followEcho struct {
	netsyv1.UnimplementedFollowServer
}

func (followEcho) Follow(stream netsyv1.Follow_FollowServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		start := req.GetStart()
		err = stream.Send(&netsyv1.FollowResponse{
			PrimaryTerm: start.GetPrimaryTerm(),
			Msg: &netsyv1.FollowResponse_Entries{Entries: &netsyv1.EntryBatch{
				Entries: []*netsyv1.Entry{{
					Index: start.GetLastIndex(),
					Ops:   []*netsyv1.Op{{Value: []byte(start.GetNodeId())}},
				}},
			}},
		})
		if err != nil {
			return err
		}
	}
}

func newPool(t *testing.T, nw peer.Network) *peer.Pool {
	t.Helper()
	p := peer.NewPool(nw)
	t.Cleanup(func() { p.Close() })
	return p
}

func conn(t *testing.T, p *peer.Pool, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := p.Conn(addr)
	if err != nil {
		t.Fatalf("conn %s: %v", addr, err)
	}
	return cc
}

func check(cc *grpc.ClientConn, d time.Duration, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health %v", resp.GetStatus())
	}
	return nil
}

// mustServe checks that a call through cc succeeds, waiting for gRPC to
// reconnect if it has to.
func mustServe(t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	if err := check(cc, patience, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("call to %s: %v", cc.CanonicalTarget(), err)
	}
}

// awaitNotReady waits until cc notices that its connection was closed under
// it. A call racing that teardown fails as the connection breaking
// (Unavailable, EOF), whatever the fault; the calls a test then makes
// exercise a new connection attempt, which is what the fault decides.
func awaitNotReady(t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for cc.GetState() == connectivity.Ready {
		if !cc.WaitForStateChange(ctx, connectivity.Ready) {
			t.Fatal("connection stayed ready after the network closed it")
		}
	}
}

// mustGetNoAnswer checks the calls a caller makes to a peer that does not
// answer: one that waits for a connection and one that fails fast both end
// without a sign that the peer is gone.
func mustGetNoAnswer(t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	awaitNotReady(t, cc)
	err := check(cc, noAnswer, grpc.WaitForReady(true))
	if status.Code(err) != codes.DeadlineExceeded || peer.Refused(err) {
		t.Fatalf("waiting call: %v (Refused %v), want DeadlineExceeded", err, peer.Refused(err))
	}
	// A fail-fast call ends at its deadline, or early once the hanging dial
	// timed out; never as refused.
	err = check(cc, noAnswer)
	if c := status.Code(err); (c != codes.DeadlineExceeded && c != codes.Unavailable) || peer.Refused(err) {
		t.Fatalf("fail-fast call: %v (Refused %v), want no answer", err, peer.Refused(err))
	}
}

// networks runs f over memnet and over TCP on 127.0.0.1.
func networks(t *testing.T, f func(t *testing.T, srv, cli peer.Network, addr string)) {
	t.Run("memnet", func(t *testing.T) {
		n := memnet.New()
		t.Cleanup(n.Close)
		f(t, n.Host("n1"), n.Host("n2"), "n1:2380")
	})
	t.Run("tcp", func(t *testing.T) {
		f(t, peer.TCP(), peer.TCP(), "127.0.0.1:0")
	})
}

func TestPoolCallsHealth(t *testing.T) {
	networks(t, func(t *testing.T, srv, cli peer.Network, addr string) {
		s := serve(t, srv, addr)
		p := peer.NewPool(cli)
		cc := conn(t, p, s.addr)
		mustServe(t, cc)
		if again := conn(t, p, s.addr); again != cc {
			t.Fatal("Conn made a second connection to the same address")
		}

		// Forget closes the connection; the next Conn makes a new one.
		p.Forget(s.addr)
		if err := check(cc, patience); status.Code(err) != codes.Canceled {
			t.Fatalf("call on a forgotten connection: %v", err)
		}
		fresh := conn(t, p, s.addr)
		if fresh == cc {
			t.Fatal("Conn returned a forgotten connection")
		}
		mustServe(t, fresh)
		p.Forget("never:1") // unknown: nothing happens

		if _, err := p.Conn(""); err == nil {
			t.Fatal("Conn accepted an empty address")
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := check(fresh, patience); status.Code(err) != codes.Canceled {
			t.Fatalf("call after Close: %v", err)
		}
		if _, err := p.Conn(s.addr); !errors.Is(err, peer.ErrPoolClosed) {
			t.Fatalf("Conn after Close: %v", err)
		}
	})
}

func TestPartitionAndHeal(t *testing.T) {
	n := memnet.New()
	defer n.Close()
	s := serve(t, n.Host("n1"), "n1:2380")
	cc := conn(t, newPool(t, n.Host("n2")), s.addr)
	mustServe(t, cc)

	n.Partition("n1", "n2")
	mustGetNoAnswer(t, cc)
	// n3 still gets through.
	mustServe(t, conn(t, newPool(t, n.Host("n3")), s.addr))

	n.Heal("n1", "n2")
	mustServe(t, cc)
}

func TestIsolateAndRejoin(t *testing.T) {
	n := memnet.New()
	defer n.Close()
	s := serve(t, n.Host("n1"), "n1:2380")
	cc := conn(t, newPool(t, n.Host("n2")), s.addr)
	mustServe(t, cc)

	n.Isolate("n1")
	mustGetNoAnswer(t, cc)
	mustGetNoAnswer(t, conn(t, newPool(t, n.Host("n3")), s.addr))
	// A node reaches itself while isolated.
	mustServe(t, conn(t, newPool(t, n.Host("n1")), s.addr))

	n.Rejoin("n1")
	mustServe(t, cc)
}

// mustBeRefused checks that a fail-fast call to a peer nobody listens at
// any more fails as refused, without waiting for its deadline.
func mustBeRefused(t *testing.T, cc *grpc.ClientConn) {
	t.Helper()
	awaitNotReady(t, cc)
	err := check(cc, patience)
	if status.Code(err) != codes.Unavailable || !peer.Refused(err) {
		t.Fatalf("call to a gone peer: %v (Refused %v), want Unavailable and refused", err, peer.Refused(err))
	}
}

func TestDownIsRefusedAndRestartServes(t *testing.T) {
	n := memnet.New()
	defer n.Close()
	s := serve(t, n.Host("n1"), "n1:2380")
	cc := conn(t, newPool(t, n.Host("n2")), s.addr)
	mustServe(t, cc)

	n.Down(s.addr)
	<-s.serving.Done()
	if err := s.serving.Err(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("server stopped with %v, want its listener closed", err)
	}
	s.serving.Close()
	mustBeRefused(t, cc)

	// The restart listens on the same address; the Pool's connection finds
	// it without being recreated.
	serve(t, n.Host("n1"), "n1:2380")
	mustServe(t, cc)
}

func TestRefusedOverTCP(t *testing.T) {
	l, err := peer.TCP().Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	_, err = peer.TCP().Dial(context.Background(), addr)
	if !peer.Refused(err) {
		t.Fatalf("dial of a closed port: Refused(%v) = false", err)
	}
	cc := conn(t, newPool(t, peer.TCP()), addr)
	mustBeRefused(t, cc)
}

func TestRefusedClassifies(t *testing.T) {
	noHost := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", IsNotFound: true}}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"dial refused", fmt.Errorf("call: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{"dial other", noHost, false},
		{"deadline", context.DeadlineExceeded, false},
		{"unavailable refused", status.Error(codes.Unavailable,
			`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), true},
		{"wrapped status", fmt.Errorf("heartbeat n1: %w", status.Error(codes.Unavailable, "connect: connection refused")), true},
		{"unavailable eof", status.Error(codes.Unavailable, "error reading from server: EOF"), false},
		{"unavailable timeout", status.Error(codes.Unavailable,
			`connection error: desc = "transport: Error while dialing: dial memnet n1:2380: context deadline exceeded"`), false},
		{"deadline quoting a refusal", status.Error(codes.DeadlineExceeded, "latest balancer error: connection refused"), false},
		{"application error", status.Error(codes.FailedPrecondition, "connection refused"), false},
	} {
		if got := peer.Refused(c.err); got != c.want {
			t.Errorf("%s: Refused(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestStallThenUnstall(t *testing.T) {
	n := memnet.New()
	defer n.Close()
	s := serve(t, n.Host("n1"), "n1:2380")
	cc := conn(t, newPool(t, n.Host("n2")), s.addr)
	mustServe(t, cc)

	n.Stall("n1", "n2")
	err := check(cc, noAnswer)
	if status.Code(err) != codes.DeadlineExceeded || peer.Refused(err) {
		t.Fatalf("call to a stalled peer: %v, want DeadlineExceeded", err)
	}
	if st := cc.GetState(); st != connectivity.Ready {
		t.Fatalf("connection to a stalled peer is %v, want it kept", st)
	}
	// A call sent during the stall is answered once it ends.
	answered := make(chan error, 1)
	go func() { answered <- check(cc, patience) }()
	// A new connection hangs as the dial of a partition does.
	mustGetNoAnswer(t, conn(t, newPool(t, n.Host("n2")), s.addr))

	n.Unstall("n1", "n2")
	if err := <-answered; err != nil {
		t.Fatalf("call held by the stall: %v", err)
	}
	mustServe(t, cc)
}

func TestManyConcurrentStreams(t *testing.T) {
	networks(t, func(t *testing.T, srv, cli peer.Network, addr string) {
		s := serve(t, srv, addr)
		cc := conn(t, newPool(t, cli), s.addr)
		const streams = 300
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()

		// Every stream sees SERVING, then NOT_SERVING once every stream
		// is open: all of them are live on the connection at once.
		var opened, wg sync.WaitGroup
		errs := make(chan error, streams)
		opened.Add(streams)
		for i := range streams {
			wg.Go(func() {
				w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
				if err != nil {
					opened.Done()
					errs <- fmt.Errorf("stream %d: %w", i, err)
					return
				}
				first, err := w.Recv()
				opened.Done()
				if err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					errs <- fmt.Errorf("stream %d first: %v %v", i, first.GetStatus(), err)
					return
				}
				next, err := w.Recv()
				if err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
					errs <- fmt.Errorf("stream %d second: %v %v", i, next.GetStatus(), err)
				}
			})
		}
		// Unary calls share the connection meanwhile.
		for range 50 {
			wg.Go(func() {
				if err := check(cc, patience); err != nil {
					errs <- err
				}
			})
		}
		opened.Wait()
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestLargeMessages(t *testing.T) {
	networks(t, func(t *testing.T, srv, cli peer.Network, addr string) {
		s := serve(t, srv, addr)
		cc := conn(t, newPool(t, cli), s.addr)
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		stream, err := netsyv1.NewFollowClient(cc).Follow(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Far above gRPC's 4 MiB default, in both directions, twice on the
		// same stream.
		for i, size := range []int{8 << 20, 20 << 20} {
			big := strings.Repeat(string(rune('a'+i)), size)
			err := stream.Send(&netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Start{
				Start: &netsyv1.FollowStart{NodeId: big, LastIndex: uint64(i)},
			}})
			if err != nil {
				t.Fatalf("send %d bytes: %v", size, err)
			}
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("receive %d bytes: %v", size, err)
			}
			e := resp.GetEntries().GetEntries()
			if len(e) != 1 || e[0].GetIndex() != uint64(i) || string(e[0].GetOps()[0].GetValue()) != big {
				t.Fatalf("echo of %d bytes came back wrong", size)
			}
		}
		stream.CloseSend()
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("end of stream: %v", err)
		}

		// Above MaxMessageBytes a send fails and says why.
		over := &netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Start{
			Start: &netsyv1.FollowStart{NodeId: strings.Repeat("x", peer.MaxMessageBytes)},
		}}
		stream, err = netsyv1.NewFollowClient(cc).Follow(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(over); err == nil {
			if _, err = stream.Recv(); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("oversized message: %v, want ResourceExhausted", err)
			}
		} else if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("oversized message: %v, want ResourceExhausted", err)
		}
	})
}

func TestServingShutdown(t *testing.T) {
	n := memnet.New()
	defer n.Close()
	s := serve(t, n.Host("n1"), "n1:2380")
	cc := conn(t, newPool(t, n.Host("n2")), s.addr)
	mustServe(t, cc)

	// A stream in flight holds a graceful stop until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), noAnswer)
	defer cancelShort()
	if err := s.serving.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown with an open stream: %v", err)
	}
	if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after a forced stop: %v", err)
	}
	if s.serving.Err() != nil {
		t.Fatalf("Err after Shutdown: %v", s.serving.Err())
	}

	// With nothing in flight it completes.
	s2 := serve(t, n.Host("n1"), "n1:2380")
	mustServe(t, cc)
	if err := s2.serving.Shutdown(context.Background()); err != nil {
		t.Fatalf("idle shutdown: %v", err)
	}
}
