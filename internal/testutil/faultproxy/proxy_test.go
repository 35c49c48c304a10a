package faultproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet is how long a check that nothing arrives waits: real sockets on
// loopback deliver in microseconds, so nothing within it means held.
const quiet = 200 * time.Millisecond

// patience bounds every read that must succeed.
const patience = 5 * time.Second

// upstream is a loopback server that hands the test its accepted
// connections.
type upstream struct {
	ln    net.Listener
	conns chan net.Conn
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ln: ln, conns: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(u.conns)
		for c := range u.conns {
			_ = c.Close()
		}
	})
	return u
}

// accepted returns the next connection the upstream accepted.
func (u *upstream) accepted(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-u.conns:
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(patience):
		t.Fatal("the upstream accepted no connection")
		return nil
	}
}

// noneAccepted fails if the upstream accepts a connection within quiet.
func (u *upstream) noneAccepted(t *testing.T) {
	t.Helper()
	select {
	case c := <-u.conns:
		_ = c.Close()
		t.Fatal("the upstream accepted a connection through a cut")
	case <-time.After(quiet):
	}
}

func newProxy(t *testing.T, up string, opts Options) *Proxy {
	t.Helper()
	p, err := New("127.0.0.1:0", up, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pair dials p and returns both ends: the client's and the upstream's.
func pair(t *testing.T, p *Proxy, u *upstream) (client, server net.Conn) {
	t.Helper()
	client = dial(t, p.Addr())
	return client, u.accepted(t)
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(patience))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
}

func expect(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %q: %v", msg, err)
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
}

// silent fails if c reads anything (or ends) within quiet.
func silent(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(quiet))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %q, %v through a cut; want nothing", buf[:n], err)
	}
}

// wasReset fails unless reading c fails with ECONNRESET.
func wasReset(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v, want a connection reset", err)
	}
}

func setMode(t *testing.T, p *Proxy, m Mode) {
	t.Helper()
	if err := p.SetMode(m); err != nil {
		t.Fatal(err)
	}
}

func TestPassCarriesBothWaysAndHalfCloses(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u.ln.Addr().String(), Options{})
	c, s := pair(t, p, u)
	send(t, c, "ping")
	expect(t, s, "ping")
	send(t, s, "pong")
	expect(t, c, "pong")
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = s.SetReadDeadline(time.Now().Add(patience))
	if _, err := s.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("upstream read after the client's half close: %v, want EOF", err)
	}
	send(t, s, "after")
	expect(t, c, "after")
}

func TestDropHoldsOpenConnectionsUntilPass(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u.ln.Addr().String(), Options{})
	c, s := pair(t, p, u)
	setMode(t, p, Drop)
	send(t, c, "up")
	send(t, s, "down")
	silent(t, s)
	silent(t, c)
	setMode(t, p, Pass)
	expect(t, s, "up")
	expect(t, c, "down")
}

func TestDropAcceptsNewConnectionsButReachesNoUpstream(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u.ln.Addr().String(), Options{})
	setMode(t, p, Drop)
	c := dial(t, p.Addr()) // the handshake completes, as in a blackhole
	send(t, c, "hello")
	u.noneAccepted(t)
	silent(t, c)
	setMode(t, p, Pass)
	s := u.accepted(t)
	expect(t, s, "hello")
}

func TestResetResetsOpenAndNewConnections(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u.ln.Addr().String(), Options{})
	c, s := pair(t, p, u)
	setMode(t, p, Reset)
	wasReset(t, c)
	wasReset(t, s)
	// The RST can beat the dialer's return from connect.
	if c2, err := net.DialTimeout("tcp", p.Addr(), patience); err == nil {
		wasReset(t, c2)
		_ = c2.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial while resetting: %v, want a connection reset", err)
	}
	u.noneAccepted(t)
	setMode(t, p, Pass)
	c3, s3 := pair(t, p, u)
	send(t, c3, "again")
	expect(t, s3, "again")
}

func TestRefuseClosesTheListenerUntilPass(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u.ln.Addr().String(), Options{})
	c, _ := pair(t, p, u)
	setMode(t, p, Refuse)
	wasReset(t, c)
	_, err := net.DialTimeout("tcp", p.Addr(), patience)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v, want connection refused", err)
	}
	setMode(t, p, Drop) // listening again, carrying nothing
	c2 := dial(t, p.Addr())
	send(t, c2, "held")
	u.noneAccepted(t)
	setMode(t, p, Pass)
	s2 := u.accepted(t)
	expect(t, s2, "held")
}

func TestOneWayCarriesOnlyOneDirection(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u.ln.Addr().String(), Options{})
	c, s := pair(t, p, u)

	setMode(t, p, ToUpstream)
	send(t, c, "req1")
	send(t, s, "resp1")
	expect(t, s, "req1")
	silent(t, c)

	setMode(t, p, ToClient)
	expect(t, c, "resp1") // held, delivered once that way is open
	send(t, c, "req2")
	send(t, s, "resp2")
	expect(t, c, "resp2")
	silent(t, s)

	setMode(t, p, Pass)
	expect(t, s, "req2")

	// A connection opened during a one-way cut waits for Pass: a TCP
	// handshake needs both ways.
	setMode(t, p, ToUpstream)
	c2 := dial(t, p.Addr())
	send(t, c2, "late")
	u.noneAccepted(t)
	setMode(t, p, Pass)
	expect(t, u.accepted(t), "late")
}

func TestSourceModeOverridesTheProxyModeForItsConnections(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u.ln.Addr().String(), Options{
		Classify: func(client, _ net.Addr) string { return client.(*net.TCPAddr).IP.String() },
	})
	from := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: patience}
		c, err := d.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := from("127.0.0.1")
	sa := u.accepted(t)
	b := from("127.0.0.2")
	sb := u.accepted(t)

	p.SetSourceMode("127.0.0.2", Drop)
	send(t, a, "a")
	send(t, b, "b")
	expect(t, sa, "a")
	silent(t, sb)

	p.SetSourceMode("127.0.0.2", Refuse) // one source cannot be refused: reset
	wasReset(t, b)
	send(t, a, "a2")
	expect(t, sa, "a2")

	setMode(t, p, Drop) // the source's own mode still wins
	p.SetSourceMode("127.0.0.1", Pass)
	send(t, a, "a3")
	expect(t, sa, "a3")

	p.ClearSourceModes()
	send(t, a, "a4")
	silent(t, sa)
	setMode(t, p, Pass)
	expect(t, sa, "a4")
}

func TestCloseResetsConnectionsAndStopsListening(t *testing.T) {
	u := newUpstream(t)
	p, err := New("127.0.0.1:0", u.ln.Addr().String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, s := pair(t, p, u)
	held := dial(t, p.Addr())
	_ = u.accepted(t)
	setMode(t, p, ToUpstream) // a pump waits on the mode
	send(t, s, "waiting")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	wasReset(t, c)
	wasReset(t, held)
	if _, err := net.DialTimeout("tcp", p.Addr(), patience); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after Close: %v, want connection refused", err)
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("%d connections left after Close", n)
	}
	// goleak in TestMain checks that no goroutine is left.
}

func TestOwnerPIDNamesTheProcessThatDialed(t *testing.T) {
	u := newUpstream(t)
	type owner struct {
		pid int
		err error
	}
	owners := make(chan owner, 1)
	p := newProxy(t, u.ln.Addr().String(), Options{
		Classify: func(client, proxy net.Addr) string {
			pid, err := OwnerPID(client, proxy, []int{1, os.Getpid()})
			owners <- owner{pid, err}
			return ""
		},
	})
	dial(t, p.Addr())
	o := <-owners
	if o.err != nil || o.pid != os.Getpid() {
		t.Fatalf("OwnerPID = %d, %v; want this process, %d", o.pid, o.err, os.Getpid())
	}
	_ = u.accepted(t)

	// Among processes that did not dial it, no owner.
	p2 := newProxy(t, u.ln.Addr().String(), Options{
		Classify: func(client, proxy net.Addr) string {
			pid, err := OwnerPID(client, proxy, []int{1})
			owners <- owner{pid, err}
			return ""
		},
	})
	dial(t, p2.Addr())
	if o := <-owners; o.err != nil || o.pid != 0 {
		t.Fatalf("OwnerPID among others = %d, %v; want 0", o.pid, o.err)
	}
	_ = u.accepted(t)
}

func TestChildPIDsListsAChildProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pids, err := ChildPIDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("ChildPIDs = %v, missing the child %d", pids, cmd.Process.Pid)
	}
	if pids, _ := ChildPIDs(cmd.Process.Pid); len(pids) != 0 {
		t.Fatalf("ChildPIDs of a childless process = %v", pids)
	}
}
