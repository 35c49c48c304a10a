package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Connection settings for a cluster on one LAN (see the package doc).
const (
	// MaxMessageBytes bounds one peer message in either direction: an entry
	// batch or a snapshot chunk fits with room to spare.
	MaxMessageBytes = 64 << 20

	reconnectBaseDelay = 20 * time.Millisecond
	reconnectMaxDelay  = time.Second
	minConnectTimeout  = time.Second
	keepaliveTime      = 10 * time.Second
	keepaliveTimeout   = 5 * time.Second

	// streamWindowBytes and connWindowBytes are fixed HTTP/2 flow-control
	// windows, on both ends of every peer connection. Fixing them turns
	// off gRPC's bandwidth-delay probing, which answered nearly every
	// message received with a PING and its ack (one more frame, and often
	// one more system call, each way): a replicated write's messages go
	// one at a time, so that doubled what the Follow streams and the
	// forwarded writes cost (TestPeerMessageRoundTripCostsOneWriteEachWay).
	// 4 MiB a stream keeps a 1 ms LAN round trip at gigabytes a second,
	// what the probing would have grown the window to.
	streamWindowBytes = 4 << 20
	connWindowBytes   = 16 << 20
)

// ErrPoolClosed is returned by Conn after Close.
var ErrPoolClosed = errors.New("peer: pool closed")

// Pool holds one client connection per peer address. It is safe for
// concurrent use.
type Pool struct {
	opts []grpc.DialOption

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

// NewPool returns a Pool dialling over n. opts are applied after the
// defaults, so an option there (TLS credentials, interceptors) replaces the
// default it overlaps.
func NewPool(n Network, opts ...grpc.DialOption) *Pool {
	if n == nil {
		panic("peer: NewPool with a nil Network")
	}
	return &Pool{
		opts:  append(dialOptions(n), opts...),
		conns: make(map[string]*grpc.ClientConn),
	}
}

func dialOptions(n Network) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return n.Dial(ctx, addr)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  reconnectBaseDelay,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   reconnectMaxDelay,
			},
			MinConnectTimeout: minConnectTimeout,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                keepaliveTime,
			Timeout:             keepaliveTimeout,
			PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxMessageBytes),
			grpc.MaxCallSendMsgSize(MaxMessageBytes),
		),
		grpc.WithInitialWindowSize(streamWindowBytes),
		grpc.WithInitialConnWindowSize(connWindowBytes),
	}
}

// Conn returns the connection to addr, creating it on first use. Creating
// one does no I/O: the connection is made by the first RPC and remade by
// gRPC whenever it breaks.
func (p *Pool) Conn(addr string) (*grpc.ClientConn, error) {
	if addr == "" {
		return nil, errors.New("peer: empty peer address")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	if cc := p.conns[addr]; cc != nil {
		return cc, nil
	}
	// passthrough hands addr to the Network as is, so names only memnet
	// knows never reach a DNS resolver.
	cc, err := grpc.NewClient("passthrough:///"+addr, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", addr, err)
	}
	p.conns[addr] = cc
	return cc, nil
}

// Forget closes the connection to addr, if any, and drops it from the
// pool; RPCs in flight on it fail with Canceled.
func (p *Pool) Forget(addr string) {
	p.mu.Lock()
	cc := p.conns[addr]
	delete(p.conns, addr)
	p.mu.Unlock()
	if cc != nil {
		cc.Close()
	}
}

// Close closes every connection; Conn fails afterwards.
func (p *Pool) Close() error {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.closed = true
	p.mu.Unlock()
	var errs []error
	for addr, cc := range conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}

// Refused reports whether err, from a dial or from an RPC, means the peer's
// address refused the connection: nothing listens there, so the process is
// gone. False means nothing is known, including for timeouts and errors
// on an established connection.
//
// A dial error carries syscall.ECONNREFUSED in its chain. gRPC keeps only
// the text: a fail-fast RPC on a channel whose last connect attempt was
// refused fails with Unavailable and a message quoting the dial error.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unavailable &&
		strings.Contains(s.Message(), syscall.ECONNREFUSED.Error())
}
