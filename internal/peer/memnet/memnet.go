package memnet

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/netsy-io/netsy/internal/peer"
)

// Addr is a memnet address.
type Addr string

func (Addr) Network() string  { return "memnet" }
func (a Addr) String() string { return string(a) }

// relayChunk is how much one relay carries per step; gRPC writes frames of
// at most 16 KiB and buffers up to 32 KiB.
const relayChunk = 32 << 10

// firstPort numbers the dialling side of connections, as an ephemeral port
// would; it only makes addresses in logs look familiar.
const firstPort = 49152

// Net is an in-process network. The zero value is not usable; call New.
// It is safe for concurrent use.
type Net struct {
	mu        sync.Mutex
	listeners map[string]*listener
	owners    map[string]string // addr -> host that last listened on it
	cut       map[pair]bool
	isolated  map[string]bool
	stalled   map[pair]bool
	links     map[*link]struct{}
	// changed is closed and replaced whenever a fault or a listener
	// changes, waking dials and relays that wait on the fault state.
	changed chan struct{}
	ports   int
	closed  bool

	relays sync.WaitGroup
}

// pair is an unordered pair of host names.
type pair struct{ a, b string }

func pairOf(a, b string) pair {
	if b < a {
		a, b = b, a
	}
	return pair{a, b}
}

// New returns an empty network.
func New() *Net {
	return &Net{
		listeners: make(map[string]*listener),
		owners:    make(map[string]string),
		cut:       make(map[pair]bool),
		isolated:  make(map[string]bool),
		stalled:   make(map[pair]bool),
		links:     make(map[*link]struct{}),
		changed:   make(chan struct{}),
	}
}

// Host returns the network as seen from the node named name.
func (n *Net) Host(name string) peer.Network {
	if name == "" {
		panic("memnet: empty host name")
	}
	return host{n: n, name: name}
}

type host struct {
	n    *Net
	name string
}

func (h host) Listen(addr string) (net.Listener, error) { return h.n.listen(h.name, addr) }

func (h host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return h.n.dial(ctx, h.name, addr)
}

// Partition cuts a and b apart in both directions until Heal.
func (n *Net) Partition(a, b string) {
	mustPair("Partition", a, b)
	n.fault(func() []*link {
		n.cut[pairOf(a, b)] = true
		return n.linksLocked(func(l *link) bool { return pairOf(l.src, l.dst) == pairOf(a, b) })
	})
}

// Heal undoes Partition(a, b).
func (n *Net) Heal(a, b string) {
	mustPair("Heal", a, b)
	n.fault(func() []*link {
		delete(n.cut, pairOf(a, b))
		return nil
	})
}

// Isolate cuts a from every other host until Rejoin.
func (n *Net) Isolate(a string) {
	n.fault(func() []*link {
		n.isolated[a] = true
		return n.linksLocked(func(l *link) bool { return l.src != l.dst && (l.src == a || l.dst == a) })
	})
}

// Rejoin undoes Isolate(a). Partitions set separately stay.
func (n *Net) Rejoin(a string) {
	n.fault(func() []*link {
		delete(n.isolated, a)
		return nil
	})
}

// Down kills whatever listens on addr: its listener and the connections it
// accepted are closed and dials are refused until addr is listened on
// again. An address nobody listens on is left as it is.
func (n *Net) Down(addr string) {
	var pending []*conn
	n.fault(func() []*link {
		l := n.listeners[addr]
		if l == nil {
			return nil
		}
		pending = l.closeLocked()
		return n.linksLocked(func(k *link) bool { return k.lis == l })
	})
	closeAll(pending)
}

// Stall freezes traffic between a and b in both directions until Unstall.
func (n *Net) Stall(a, b string) {
	mustPair("Stall", a, b)
	n.fault(func() []*link {
		n.stalled[pairOf(a, b)] = true
		return nil
	})
}

// Unstall undoes Stall(a, b); what was held is delivered.
func (n *Net) Unstall(a, b string) {
	mustPair("Unstall", a, b)
	n.fault(func() []*link {
		delete(n.stalled, pairOf(a, b))
		return nil
	})
}

// Close closes every listener and connection, fails later Listen and Dial
// calls, and waits for the relay goroutines to end.
func (n *Net) Close() {
	var pending []*conn
	n.fault(func() []*link {
		n.closed = true
		for _, l := range n.listeners {
			pending = append(pending, l.closeLocked()...)
		}
		return n.linksLocked(func(*link) bool { return true })
	})
	closeAll(pending)
	n.relays.Wait()
}

func mustPair(op, a, b string) {
	if a == b {
		panic(fmt.Sprintf("memnet: %s(%q, %q): a host's traffic with itself is never cut", op, a, b))
	}
}

// fault applies change under the lock, wakes every waiter so it looks at
// the new state, then closes the links change returned.
func (n *Net) fault(change func() []*link) {
	n.mu.Lock()
	doomed := change()
	n.notifyLocked()
	n.mu.Unlock()
	for _, l := range doomed {
		l.close()
	}
}

func (n *Net) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *Net) linksLocked(match func(*link) bool) []*link {
	var out []*link
	for l := range n.links {
		if match(l) {
			out = append(out, l)
		}
	}
	return out
}

func (n *Net) cutLocked(a, b string) bool {
	return a != b && (n.cut[pairOf(a, b)] || n.isolated[a] || n.isolated[b])
}

func (n *Net) stalledLocked(a, b string) bool {
	return a != b && n.stalled[pairOf(a, b)]
}

func (n *Net) listen(hostName, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, fmt.Errorf("memnet: host %s: listen on an empty address", hostName)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, opError("listen", addr, net.ErrClosed)
	}
	if n.listeners[addr] != nil {
		return nil, opError("listen", addr, os.NewSyscallError("bind", syscall.EADDRINUSE))
	}
	l := &listener{
		n:     n,
		host:  hostName,
		addr:  addr,
		ready: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	n.listeners[addr] = l
	n.owners[addr] = hostName
	// A dial blocked on the address's previous owner must look again.
	n.notifyLocked()
	return l, nil
}

func (n *Net) dial(ctx context.Context, src, addr string) (net.Conn, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, opError("dial", addr, err)
		}
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return nil, opError("dial", addr, net.ErrClosed)
		}
		// No answer beats a refusal: a cut-off host's state is unknowable.
		if dst, ok := n.owners[addr]; ok && (n.cutLocked(src, dst) || n.stalledLocked(src, dst)) {
			changed := n.changed
			n.mu.Unlock()
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return nil, opError("dial", addr, ctx.Err())
			}
		}
		l := n.listeners[addr]
		if l == nil {
			n.mu.Unlock()
			return nil, opError("dial", addr, os.NewSyscallError("connect", syscall.ECONNREFUSED))
		}
		c := n.connectLocked(src, l)
		n.mu.Unlock()
		return c, nil
	}
}

func opError(op, addr string, err error) error {
	return &net.OpError{Op: op, Net: "memnet", Addr: Addr(addr), Err: err}
}

// connectLocked makes a connection from host src to l and queues its
// server side for Accept.
func (n *Net) connectLocked(src string, l *listener) *conn {
	n.ports++
	local := Addr(fmt.Sprintf("%s:%d", src, firstPort+n.ports))
	clientEnd, clientInner := net.Pipe()
	serverEnd, serverInner := net.Pipe()
	k := &link{
		n:     n,
		src:   src,
		dst:   l.host,
		lis:   l,
		inner: [2]net.Conn{clientInner, serverInner},
		done:  make(chan struct{}),
	}
	client := &conn{Conn: clientEnd, link: k, local: local, remote: Addr(l.addr)}
	server := &conn{Conn: serverEnd, link: k, local: Addr(l.addr), remote: local}
	n.links[k] = struct{}{}
	n.relays.Add(2)
	go k.relay(clientInner, serverInner)
	go k.relay(serverInner, clientInner)
	l.queue = append(l.queue, server)
	l.signal()
	return client
}

// link is one connection: each side's net.Pipe, whose inner ends the
// relays join.
type link struct {
	n        *Net
	src, dst string
	lis      *listener
	inner    [2]net.Conn
	done     chan struct{}
	once     sync.Once
}

// close ends the connection: both sides read EOF and fail to write, as
// after the peer closed. Never call it holding n.mu.
func (k *link) close() {
	k.once.Do(func() {
		close(k.done)
		k.inner[0].Close()
		k.inner[1].Close()
		k.n.mu.Lock()
		delete(k.n.links, k)
		k.n.mu.Unlock()
	})
}

// relay carries bytes from one side's inner end to the other's, parking
// while the pair is stalled.
func (k *link) relay(from, to net.Conn) {
	defer k.n.relays.Done()
	defer k.close()
	buf := make([]byte, relayChunk)
	for {
		nr, err := from.Read(buf)
		if nr > 0 {
			// Checked after the read, so bytes written after a stall
			// began are held here.
			if !k.flowing() {
				return
			}
			if _, err := to.Write(buf[:nr]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// flowing waits until the link's hosts are not stalled; false if the link
// closed meanwhile.
func (k *link) flowing() bool {
	for {
		k.n.mu.Lock()
		stalled := k.n.stalledLocked(k.src, k.dst)
		changed := k.n.changed
		k.n.mu.Unlock()
		if !stalled {
			return true
		}
		select {
		case <-changed:
		case <-k.done:
			return false
		}
	}
}

// conn is one side of a connection.
type conn struct {
	net.Conn
	link          *link
	local, remote Addr
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.link.close()
	return err
}

func closeAll(cs []*conn) {
	for _, c := range cs {
		c.Close()
	}
}

type listener struct {
	n          *Net
	host, addr string
	// ready holds a token while queue may be non-empty.
	ready chan struct{}
	done  chan struct{}

	// Guarded by n.mu.
	queue  []*conn
	closed bool
}

func (l *listener) Addr() net.Addr { return Addr(l.addr) }

func (l *listener) Accept() (net.Conn, error) {
	for {
		l.n.mu.Lock()
		if l.closed {
			l.n.mu.Unlock()
			return nil, opError("accept", l.addr, net.ErrClosed)
		}
		if len(l.queue) > 0 {
			c := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			if len(l.queue) > 0 {
				l.signal() // for the next Accept
			}
			l.n.mu.Unlock()
			return c, nil
		}
		l.n.mu.Unlock()
		select {
		case <-l.ready:
		case <-l.done:
		}
	}
}

func (l *listener) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Close unregisters the address; connections already accepted stay, as
// with TCP, and those not yet accepted are closed.
func (l *listener) Close() error {
	l.n.mu.Lock()
	if l.closed {
		l.n.mu.Unlock()
		return opError("close", l.addr, net.ErrClosed)
	}
	pending := l.closeLocked()
	l.n.notifyLocked()
	l.n.mu.Unlock()
	closeAll(pending)
	return nil
}

// closeLocked marks l closed and unregisters it, returning the connections
// nobody accepted for the caller to close outside the lock.
func (l *listener) closeLocked() []*conn {
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.done)
	if l.n.listeners[l.addr] == l {
		delete(l.n.listeners, l.addr)
	}
	pending := l.queue
	l.queue = nil
	return pending
}
