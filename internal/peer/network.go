package peer

import (
	"context"
	"net"
)

// Network is where the peer port listens and whence peers are dialled:
// the machine's TCP stack in production, memnet in tests.
type Network interface {
	// Listen opens a listener on addr.
	Listen(addr string) (net.Listener, error)
	// Dial connects to addr, giving up when ctx ends.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// TCP returns the machine's TCP network.
func TCP() Network { return tcpNetwork{} }

type tcpNetwork struct{}

func (tcpNetwork) Listen(addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(context.Background(), "tcp", addr)
}

func (tcpNetwork) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}
