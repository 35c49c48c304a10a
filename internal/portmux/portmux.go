package portmux

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/tlsconf"
)

// DefaultSniffTimeout bounds how long a new connection may take to say
// enough to be routed (and, for an HTTP client over TLS, to finish its
// handshake): as long as gRPC gives a handshake.
const DefaultSniffTimeout = 20 * time.Second

// h2Preface is what every HTTP/2 client, so every gRPC client, sends first.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Options configure a Mux.
type Options struct {
	// TLS is the client port's server configuration, or nil for plaintext.
	// HTTP clients are handshaken with a copy that negotiates "http/1.1";
	// gRPC connections are handed over before their handshake.
	TLS *tls.Config
	// SniffTimeout is DefaultSniffTimeout when zero.
	SniffTimeout time.Duration
	Clock        clock.Clock
	Logger       hclog.Logger
}

// Mux splits one listener into a gRPC listener and an HTTP listener.
type Mux struct {
	l       net.Listener
	httpTLS *tls.Config
	tls     bool
	timeout time.Duration
	clk     clock.Clock
	log     hclog.Logger
	grpc    *child
	http    *child

	mu      sync.Mutex
	closed  bool
	pending map[net.Conn]struct{} // connections being routed
	wg      sync.WaitGroup
	done    chan struct{}
}

// New returns a Mux over l; it owns l from now on. Call Start to accept.
func New(l net.Listener, opts Options) *Mux {
	if opts.SniffTimeout <= 0 {
		opts.SniffTimeout = DefaultSniffTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	m := &Mux{
		l:       l,
		tls:     opts.TLS != nil,
		timeout: opts.SniffTimeout,
		clk:     opts.Clock,
		log:     opts.Logger,
		pending: make(map[net.Conn]struct{}),
		done:    make(chan struct{}),
	}
	if opts.TLS != nil {
		m.httpTLS = http1Only(opts.TLS)
	}
	m.grpc = newChild(l.Addr())
	m.http = newChild(l.Addr())
	return m
}

// http1Only is cfg negotiating only "http/1.1" with ALPN, also through the
// per-client config tlsconf builds in GetConfigForClient.
func http1Only(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	c.NextProtos = []string{"http/1.1"}
	if get := c.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			pc, err := get(hello)
			if pc != nil {
				pc = pc.Clone()
				pc.NextProtos = []string{"http/1.1"}
			}
			return pc, err
		}
	}
	return c
}

// GRPC is the listener of the connections that speak gRPC. Closing it
// stops only its side.
func (m *Mux) GRPC() net.Listener { return m.grpc }

// HTTP is the listener of the connections that speak HTTP/1.x; over TLS
// they are *tls.Conn with the handshake done. Closing it stops only its
// side.
func (m *Mux) HTTP() net.Listener { return m.http }

// Start runs the accept loop on a goroutine the Mux owns until Close.
func (m *Mux) Start() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.acceptLoop()
	}()
}

// Close closes the listener, both sides and every connection still being
// routed, and waits for the Mux's goroutines.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	for c := range m.pending {
		c.Close()
	}
	m.mu.Unlock()
	err := m.l.Close()
	m.grpc.Close()
	m.http.Close()
	m.wg.Wait()
	return err
}

func (m *Mux) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := m.l.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				m.grpc.fail(err)
				m.http.fail(err)
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http and gRPC do, rather than close the port.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			m.log.Warn("accept on the client port failed, retrying", "error", err, "retry_in", backoff)
			select {
			case <-m.clk.After(backoff):
			case <-m.done:
				return
			}
			continue
		}
		backoff = 0
		if !m.track(c) {
			c.Close()
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

func (m *Mux) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.pending[c] = struct{}{}
	return true
}

func (m *Mux) untrack(c net.Conn) {
	m.mu.Lock()
	delete(m.pending, c)
	m.mu.Unlock()
}

// route decides where c goes and delivers it there.
func (m *Mux) route(c net.Conn) {
	toGRPC, conn, err := m.sniff(c)
	m.untrack(c)
	if err != nil {
		c.Close()
		return
	}
	to := m.http
	if toGRPC {
		to = m.grpc
	}
	to.deliver(conn)
}

// sniff reads what is needed to route c and returns the connection to hand
// over: c with the bytes read replayed, or for an HTTP client over TLS the
// *tls.Conn after its handshake.
func (m *Mux) sniff(c net.Conn) (toGRPC bool, conn net.Conn, err error) {
	if err := c.SetDeadline(m.clk.Now().Add(m.timeout)); err != nil {
		return false, nil, err
	}
	if m.tls {
		toGRPC, conn, err = m.sniffTLS(c)
	} else {
		toGRPC, conn, err = m.sniffPlain(c)
	}
	if err != nil {
		return false, nil, err
	}
	// The servers set their own deadlines from here on.
	if err := c.SetDeadline(time.Time{}); err != nil {
		return false, nil, err
	}
	return toGRPC, conn, nil
}

// sniffPlain reads until the bytes either differ from the HTTP/2 preface
// (HTTP/1.x) or are all of it (gRPC). An HTTP/1.1 request line differs at
// its first byte, so HTTP clients are routed on their first read.
func (m *Mux) sniffPlain(c net.Conn) (bool, net.Conn, error) {
	buf := make([]byte, 0, len(h2Preface))
	for {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if !bytes.HasPrefix([]byte(h2Preface), buf) {
			return false, replay(c, buf), nil
		}
		if len(buf) == len(h2Preface) {
			return true, replay(c, buf), nil
		}
		if err != nil {
			return false, nil, err
		}
	}
}

// errHelloRead stops the sniffing handshake once the ClientHello is read.
var errHelloRead = errors.New("client hello read")

// recordTypeHandshake is the first byte of a TLS handshake record.
const recordTypeHandshake = 0x16

// sniffTLS reads the ClientHello with crypto/tls (a handshake that stops
// as soon as the hello is parsed and whose writes go nowhere), then routes
// by the ALPN protocols it offers.
func (m *Mux) sniffTLS(c net.Conn) (bool, net.Conn, error) {
	rec := &recordingConn{Conn: c}
	var first [1]byte
	if _, err := io.ReadFull(rec, first[:]); err != nil {
		return false, nil, err
	}
	if first[0] != recordTypeHandshake {
		// Not TLS: gRPC's handshake refuses it and logs why, as it did
		// before the port was shared.
		return true, replay(c, rec.buf), nil
	}
	var protos []string
	var helloRead bool
	sniffer := tls.Server(&prefixConn{Conn: rec, r: io.MultiReader(bytes.NewReader(rec.buf), rec)}, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			protos, helloRead = hello.SupportedProtos, true
			return nil, errHelloRead
		},
	})
	rec.discardWrites = true
	err := sniffer.Handshake()
	if !helloRead {
		if isClosed(err) || isTimeout(err) {
			return false, nil, err
		}
		// Not a ClientHello crypto/tls could read: let gRPC's handshake
		// fail and log it.
		return true, replay(c, rec.buf), nil
	}
	conn := replay(c, rec.buf)
	if slices.Contains(protos, "h2") && !slices.Contains(protos, "http/1.1") {
		return true, conn, nil
	}
	tc := tls.Server(conn, m.httpTLS)
	if err := tc.Handshake(); err != nil {
		m.logHandshake(c, err)
		return false, nil, err
	}
	return false, tc, nil
}

// logHandshake logs a failed HTTP client handshake as the gRPC side's
// credentials do (tlsconf.ServerCredentials): refusals were logged with the
// identity by the verifier, a client that hung up is debug, the rest warn.
func (m *Mux) logHandshake(c net.Conn, err error) {
	var refused *tlsconf.RefusedError
	switch {
	case errors.As(err, &refused):
	case errors.Is(err, io.EOF) || isClosed(err):
		m.log.Debug("tls handshake: connection closed", "remote", c.RemoteAddr().String())
	default:
		m.log.Warn("tls handshake failed", "remote", c.RemoteAddr().String(), "error", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// recordingConn keeps every byte read through it; with discardWrites it
// swallows writes (the sniffing handshake's alert must not reach the
// client).
type recordingConn struct {
	net.Conn
	buf           []byte
	discardWrites bool
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

func (r *recordingConn) Write(p []byte) (int, error) {
	if r.discardWrites {
		return len(p), nil
	}
	return r.Conn.Write(p)
}

// prefixConn reads from r, then writes and everything else go to Conn.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// replay is c with buf read again first. It returns c itself when nothing
// was read, so gRPC sees the connection type it accepted.
func replay(c net.Conn, buf []byte) net.Conn {
	if len(buf) == 0 {
		return c
	}
	return &replayConn{Conn: c, buf: buf}
}

// replayConn is a connection whose first bytes were already read once.
type replayConn struct {
	net.Conn
	buf []byte
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.buf) > 0 {
		n := copy(p, r.buf)
		r.buf = r.buf[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}

// child is one side of the Mux, a listener fed by route.
type child struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
	err   error // why Accept fails; set before done is closed
}

func newChild(addr net.Addr) *child {
	return &child{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to the server accepting on this side, or closes it if
// that side is closed.
func (l *child) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *child) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

func (l *child) fail(err error) {
	l.once.Do(func() {
		l.err = fmt.Errorf("client port: %w", err)
		close(l.done)
	})
}

func (l *child) Close() error {
	l.fail(net.ErrClosed)
	return nil
}

func (l *child) Addr() net.Addr { return l.addr }
