package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does to the traffic of a connection.
type Mode int

// The modes; see the package documentation.
const (
	Pass Mode = iota
	Drop
	Reset
	Refuse
	ToUpstream
	ToClient
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Drop:
		return "drop"
	case Reset:
		return "reset"
	case Refuse:
		return "refuse"
	case ToUpstream:
		return "to-upstream"
	case ToClient:
		return "to-client"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// carries reports whether bytes move in the direction toUpstream (else
// back to the client) under m.
func (m Mode) carries(toUpstream bool) bool {
	switch m {
	case Pass:
		return true
	case ToUpstream:
		return toUpstream
	case ToClient:
		return !toUpstream
	}
	return false
}

// resets reports whether a connection under m is reset.
func (m Mode) resets() bool { return m == Reset || m == Refuse }

// Options configure New.
type Options struct {
	// Classify names the source of a connection, given the client's
	// address and the proxy's end of it; SetSourceMode applies to the
	// connections it names so. It runs once per connection, before any
	// byte is carried, in that connection's goroutine. Nil: every
	// connection has the source "".
	Classify func(client, proxy net.Addr) string
	// DialTimeout bounds a dial of the upstream (default 5s).
	DialTimeout time.Duration
}

// Proxy forwards connections from its listening address to one upstream.
// Its methods are safe for concurrent use.
type Proxy struct {
	addr     string
	upstream string
	opts     Options

	mu      sync.Mutex
	mode    Mode
	sources map[string]Mode
	// changed is closed and replaced at every change of a mode, waking
	// every goroutine that waits for one.
	changed chan struct{}
	ln      net.Listener // nil while refusing or closed
	conns   map[*conn]struct{}
	closed  bool

	wg sync.WaitGroup
}

// conn is one client connection and, once dialed, its upstream.
type conn struct {
	client   net.Conn
	source   string
	mu       sync.Mutex
	upstream net.Conn
	done     chan struct{} // closed when the connection is torn down
	once     sync.Once
}

// New listens on listen (host:port; port 0 picks one) and forwards every
// connection to upstream, in Pass mode.
func New(listen, upstream string, opts Options) (*Proxy, error) {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen on %s for %s: %w", listen, upstream, err)
	}
	p := &Proxy{
		addr:     ln.Addr().String(),
		upstream: upstream,
		opts:     opts,
		sources:  map[string]Mode{},
		changed:  make(chan struct{}),
		conns:    map[*conn]struct{}{},
	}
	p.serve(ln)
	return p, nil
}

// Addr is the address clients dial instead of the upstream's.
func (p *Proxy) Addr() string { return p.addr }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Mode returns the proxy's mode (sources may override it).
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches every connection, open and new, whose source has no
// mode of its own, to m. Leaving Refuse listens again on Addr; that is the
// one step that can fail.
func (p *Proxy) SetMode(m Mode) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("faultproxy: closed")
	}
	p.mode = m
	var err error
	switch {
	case m == Refuse && p.ln != nil:
		_ = p.ln.Close() // its accept goroutine ends
		p.ln = nil
	case m != Refuse && p.ln == nil:
		var ln net.Listener
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.serve(ln)
		} else {
			err = fmt.Errorf("faultproxy: listen again on %s: %w", p.addr, err)
		}
	}
	victims := p.changeLocked()
	p.mu.Unlock()
	for _, c := range victims {
		c.reset()
	}
	return err
}

// SetSourceMode sets the mode of the connections whose source (named by
// Options.Classify) is source, open and new, overriding SetMode's. Refuse
// resets them, since the listener is shared.
func (p *Proxy) SetSourceMode(source string, m Mode) {
	p.mu.Lock()
	p.sources[source] = m
	victims := p.changeLocked()
	p.mu.Unlock()
	for _, c := range victims {
		c.reset()
	}
}

// ClearSourceModes drops every source's mode: SetMode's applies to all.
func (p *Proxy) ClearSourceModes() {
	p.mu.Lock()
	clear(p.sources)
	victims := p.changeLocked()
	p.mu.Unlock()
	for _, c := range victims {
		c.reset()
	}
}

// Conns is the number of open client connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Sources counts the open client connections by source.
func (p *Proxy) Sources() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := map[string]int{}
	for c := range p.conns {
		n[c.source]++
	}
	return n
}

// Close stops listening, resets every connection and waits for every
// goroutine of the proxy.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	var all []*conn
	for c := range p.conns {
		all = append(all, c)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, c := range all {
		c.reset()
	}
	p.wg.Wait()
	return nil
}

// changeLocked wakes the waiters after a change of modes and returns the
// connections the change resets.
func (p *Proxy) changeLocked() []*conn {
	close(p.changed)
	p.changed = make(chan struct{})
	var victims []*conn
	for c := range p.conns {
		if p.modeLocked(c.source).resets() {
			victims = append(victims, c)
		}
	}
	return victims
}

func (p *Proxy) modeLocked(source string) Mode {
	if m, ok := p.sources[source]; ok {
		return m
	}
	return p.mode
}

// serve starts the accept goroutine of ln; p.mu is held or p is new.
func (p *Proxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			cc, err := ln.Accept()
			if err != nil {
				// Closed by SetMode(Refuse) or Close; anything else on a
				// loopback listener ends it too, and the test sees dials
				// fail.
				return
			}
			c := &conn{client: cc, done: make(chan struct{})}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				c.reset()
				return
			}
			p.conns[c] = struct{}{}
			p.wg.Add(1)
			p.mu.Unlock()
			go p.handle(c)
		}
	}()
}

// handle classifies c, waits until it may reach the upstream, dials it
// and copies bytes both ways until either side ends.
func (p *Proxy) handle(c *conn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if p.opts.Classify != nil {
		src := p.opts.Classify(c.client.RemoteAddr(), c.client.LocalAddr())
		p.mu.Lock()
		c.source = src
		victim := p.modeLocked(src).resets()
		p.mu.Unlock()
		if victim {
			c.reset()
			return
		}
	}
	if !p.await(c, func(m Mode) bool { return m == Pass }) {
		c.reset()
		return
	}
	up, err := net.DialTimeout("tcp", p.upstream, p.opts.DialTimeout)
	if err != nil {
		// The upstream is down: the client learns it the way it would
		// without the proxy, by a failed connection.
		c.reset()
		return
	}
	c.mu.Lock()
	c.upstream = up
	c.mu.Unlock()
	select {
	case <-c.done: // reset while dialing: the upstream sees the reset too
		resetConn(up)
		return
	default:
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(c, c.client, up, true) }()
	go func() { defer pumps.Done(); p.pump(c, up, c.client, false) }()
	pumps.Wait()
}

// await blocks until ok holds for c's mode and reports true, or reports
// false once c is torn down, reset by its mode, or the proxy is closed.
func (p *Proxy) await(c *conn, ok func(Mode) bool) bool {
	for {
		p.mu.Lock()
		m, closed, changed := p.modeLocked(c.source), p.closed, p.changed
		p.mu.Unlock()
		if closed || m.resets() {
			return false
		}
		if ok(m) {
			return true
		}
		select {
		case <-changed:
		case <-c.done:
			return false
		}
	}
}

// pump copies src to dst, in the direction toUpstream, holding each chunk
// while c's mode does not carry that direction. The end of src is passed
// on (as a half close) under the same rule; an error resets c.
func (p *Proxy) pump(c *conn, src, dst net.Conn, toUpstream bool) {
	carries := func(m Mode) bool { return m.carries(toUpstream) }
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if !p.await(c, carries) {
				c.reset()
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				c.reset()
				return
			}
		}
		if rerr == nil {
			continue
		}
		if !errors.Is(rerr, io.EOF) || !p.await(c, carries) {
			c.reset()
			return
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		return
	}
}

// reset tears c down with an RST on both sides.
func (c *conn) reset() {
	c.once.Do(func() {
		close(c.done)
		c.mu.Lock()
		up := c.upstream
		c.mu.Unlock()
		resetConn(c.client)
		if up != nil {
			resetConn(up)
		}
	})
}

// resetConn closes nc with an RST instead of a FIN.
func resetConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}

// close tears c down with an ordinary close once both directions ended.
func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		c.mu.Lock()
		up := c.upstream
		c.mu.Unlock()
		_ = c.client.Close()
		if up != nil {
			_ = up.Close()
		}
	})
}
