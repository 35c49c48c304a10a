package memnet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/peer/memnet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// short is how long a test lets a dial that must not succeed wait.
const short = 50 * time.Millisecond

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newNet(t *testing.T) *memnet.Net {
	t.Helper()
	n := memnet.New()
	t.Cleanup(n.Close)
	return n
}

// pairUp dials addr from h and returns both ends of the connection.
func pairUp(t *testing.T, h peer.Network, l net.Listener, addr string) (client, server net.Conn) {
	t.Helper()
	client, err := h.Dial(ctxFor(t, 5*time.Second), addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	server, err = l.Accept()
	if err != nil {
		t.Fatalf("accept on %s: %v", addr, err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// roundTrip writes msg on a and reads it back from b.
func roundTrip(t *testing.T, a, b net.Conn, msg string) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := a.Write([]byte(msg))
		errc <- err
	}()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if string(got) != msg {
		t.Fatalf("read %q, want %q", got, msg)
	}
}

// mustBreak checks that c was closed by the network: a read ends with EOF.
func mustBreak(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read on a cut connection: %v, want EOF", err)
	}
}

func mustTimeOut(t *testing.T, h peer.Network, addr string) {
	t.Helper()
	c, err := h.Dial(ctxFor(t, short), addr)
	if err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded, want no answer", addr)
	}
	var op *net.OpError
	if !errors.As(err, &op) || !errors.Is(err, context.DeadlineExceeded) || !op.Timeout() {
		t.Fatalf("dial %s: %v (%T), want a timeout *net.OpError", addr, err, err)
	}
	if peer.Refused(err) {
		t.Fatalf("Refused(%v) = true for a dial with no answer", err)
	}
}

func mustRefuse(t *testing.T, h peer.Network, addr string) {
	t.Helper()
	// No deadline: a refusal must not wait for one.
	c, err := h.Dial(context.Background(), addr)
	if err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded, want refused", addr)
	}
	var op *net.OpError
	if !errors.As(err, &op) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v (%T), want ECONNREFUSED in a *net.OpError", addr, err, err)
	}
	if !peer.Refused(err) {
		t.Fatalf("Refused(%v) = false", err)
	}
}

func TestDialAcceptAndAddresses(t *testing.T) {
	n := newNet(t)
	l, err := n.Host("n1").Listen("n1:2380")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Addr().String(); got != "n1:2380" {
		t.Fatalf("listener address %q", got)
	}
	c, s := pairUp(t, n.Host("n2"), l, "n1:2380")
	if c.RemoteAddr().String() != "n1:2380" || s.LocalAddr().String() != "n1:2380" {
		t.Fatalf("addresses: client remote %s, server local %s", c.RemoteAddr(), s.LocalAddr())
	}
	if c.LocalAddr().String() != s.RemoteAddr().String() || c.LocalAddr().Network() != "memnet" {
		t.Fatalf("client local %s, server sees %s", c.LocalAddr(), s.RemoteAddr())
	}
	roundTrip(t, c, s, "ping")
	roundTrip(t, s, c, "pong")

	// A side closing is an EOF to the other, and the network forgets it.
	c.Close()
	mustBreak(t, s)
}

func TestListen(t *testing.T) {
	n := newNet(t)
	h := n.Host("n1")
	if _, err := h.Listen(""); err == nil {
		t.Fatal("listen on an empty address succeeded")
	}
	l, err := h.Listen("n1:2380")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Host("n2").Listen("n1:2380"); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listen: %v, want EADDRINUSE", err)
	}
	mustRefuse(t, h, "n1:9999")

	// A connection nobody accepted is closed with the listener.
	queued, err := h.Dial(ctxFor(t, time.Second), "n1:2380")
	if err != nil {
		t.Fatal(err)
	}
	defer queued.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mustBreak(t, queued)
	if err := l.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
	mustRefuse(t, h, "n1:2380")
	// Closing unregisters, so the address can be listened on again.
	l2, err := h.Listen("n1:2380")
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
}

func TestAcceptUnblocksOnClose(t *testing.T) {
	n := newNet(t)
	l, err := n.Host("n1").Listen("n1:2380")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	l.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept: %v", err)
	}
}

func TestPartitionAndHeal(t *testing.T) {
	n := newNet(t)
	n1, n2, n3 := n.Host("n1"), n.Host("n2"), n.Host("n3")
	l1, _ := n1.Listen("n1:2380")
	l2, _ := n2.Listen("n2:2380")
	defer l1.Close()
	defer l2.Close()
	c12, _ := pairUp(t, n2, l1, "n1:2380")
	c21, _ := pairUp(t, n1, l2, "n2:2380")
	c31, s31 := pairUp(t, n3, l1, "n1:2380")

	n.Partition("n1", "n2")
	mustBreak(t, c12)
	mustBreak(t, c21)
	mustTimeOut(t, n2, "n1:2380")
	mustTimeOut(t, n1, "n2:2380")
	// Others are untouched.
	roundTrip(t, c31, s31, "still here")
	if _, s := pairUp(t, n3, l2, "n2:2380"); s == nil {
		t.Fatal("n3 cannot reach n2")
	}
	// A partition hides a dead process: no answer, not a refusal.
	n.Down("n1:2380")
	mustTimeOut(t, n2, "n1:2380")
	mustRefuse(t, n3, "n1:2380")
	l1, _ = n1.Listen("n1:2380")
	defer l1.Close()

	// A dial blocked when the partition heals goes on and connects.
	dialed := make(chan error, 1)
	go func() {
		c, err := n2.Dial(context.Background(), "n1:2380")
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	n.Heal("n2", "n1")
	if err := <-dialed; err != nil {
		t.Fatalf("dial across a healed partition: %v", err)
	}
	if s, err := l1.Accept(); err != nil {
		t.Fatal(err)
	} else {
		s.Close() // the connection the goroutine dialled
	}
	c, s := pairUp(t, n2, l1, "n1:2380")
	roundTrip(t, c, s, "healed")
}

func TestIsolateAndRejoin(t *testing.T) {
	n := newNet(t)
	n1, n2, n3 := n.Host("n1"), n.Host("n2"), n.Host("n3")
	l1, _ := n1.Listen("n1:2380")
	l3, _ := n3.Listen("n3:2380")
	defer l1.Close()
	defer l3.Close()
	c21, _ := pairUp(t, n2, l1, "n1:2380")
	c13, _ := pairUp(t, n1, l3, "n3:2380")
	c23, s23 := pairUp(t, n2, l3, "n3:2380")
	self, selfS := pairUp(t, n1, l1, "n1:2380")

	n.Isolate("n1")
	mustBreak(t, c21)
	mustBreak(t, c13)
	mustTimeOut(t, n2, "n1:2380")
	mustTimeOut(t, n1, "n3:2380")
	roundTrip(t, c23, s23, "n2 and n3 still talk")
	roundTrip(t, self, selfS, "n1 still reaches itself")

	// Rejoin leaves a partition set on its own in place.
	n.Partition("n1", "n2")
	n.Rejoin("n1")
	mustTimeOut(t, n2, "n1:2380")
	c, s := pairUp(t, n3, l1, "n1:2380")
	roundTrip(t, c, s, "back")
}

func TestDownAndRestart(t *testing.T) {
	n := newNet(t)
	n1, n2 := n.Host("n1"), n.Host("n2")
	l1, _ := n1.Listen("n1:2380")
	l2, _ := n2.Listen("n2:2380")
	defer l2.Close()
	c21, s21 := pairUp(t, n2, l1, "n1:2380")
	out, outS := pairUp(t, n1, l2, "n2:2380")

	accepted := make(chan error, 1)
	go func() {
		_, err := l1.Accept()
		accepted <- err
	}()
	n.Down("n1:2380")
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept on a downed address: %v", err)
	}
	mustBreak(t, c21)
	mustBreak(t, s21)
	mustRefuse(t, n2, "n1:2380")
	// Only the address goes down; the test stops the node's own code.
	roundTrip(t, out, outS, "outgoing")

	l1, err := n1.Listen("n1:2380")
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer l1.Close()
	c, s := pairUp(t, n2, l1, "n1:2380")
	roundTrip(t, c, s, "restarted")
	n.Down("nowhere:1") // nothing listens: nothing happens
}

func TestStall(t *testing.T) {
	n := newNet(t)
	n1, n2 := n.Host("n1"), n.Host("n2")
	l1, _ := n1.Listen("n1:2380")
	defer l1.Close()
	c, s := pairUp(t, n2, l1, "n1:2380")
	roundTrip(t, c, s, "before")

	n.Stall("n1", "n2")
	mustTimeOut(t, n2, "n1:2380")
	written := make(chan error, 2)
	go func() {
		_, err := c.Write([]byte("held"))
		written <- err
	}()
	go func() {
		_, err := s.Write([]byte("back"))
		written <- err
	}()
	// Nothing arrives in either direction: reads time out by deadline.
	for _, r := range []net.Conn{s, c} {
		r.SetReadDeadline(clock.Real().Now().Add(short))
		if _, err := r.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read across a stall: %v, want a deadline", err)
		}
		r.SetReadDeadline(time.Time{})
	}

	// A dial blocked by the stall connects when it ends.
	dialed := make(chan error, 1)
	go func() {
		d, err := n2.Dial(context.Background(), "n1:2380")
		if err == nil {
			d.Close()
		}
		dialed <- err
	}()
	n.Unstall("n2", "n1")
	for _, r := range []struct {
		c    net.Conn
		want string
	}{{s, "held"}, {c, "back"}} {
		got := make([]byte, 4)
		if _, err := io.ReadFull(r.c, got); err != nil || string(got) != r.want {
			t.Fatalf("after unstall read %q, %v; want %q", got, err, r.want)
		}
	}
	for range 2 {
		if err := <-written; err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	if err := <-dialed; err != nil {
		t.Fatalf("dial after unstall: %v", err)
	}
}

func TestDialHonoursCancelledContext(t *testing.T) {
	n := newNet(t)
	l, _ := n.Host("n1").Listen("n1:2380")
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Host("n2").Dial(ctx, "n1:2380"); !errors.Is(err, context.Canceled) {
		t.Fatalf("dial with a cancelled ctx: %v", err)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	n := memnet.New()
	h := n.Host("n1")
	l, _ := h.Listen("n1:2380")
	c, err := n.Host("n2").Dial(ctxFor(t, time.Second), "n1:2380")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n.Partition("n1", "n3")
	blocked := make(chan error, 1)
	go func() {
		_, err := n.Host("n3").Dial(context.Background(), "n1:2380")
		blocked <- err
	}()
	n.Close()
	if err := <-blocked; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked dial after Close: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after Close: %v", err)
	}
	mustBreak(t, c)
	if _, err := h.Listen("n1:2381"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listen after Close: %v", err)
	}
}

func TestMisusePanics(t *testing.T) {
	n := newNet(t)
	for name, f := range map[string]func(){
		"empty host":     func() { n.Host("") },
		"self partition": func() { n.Partition("n1", "n1") },
		"self stall":     func() { n.Stall("n1", "n1") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestConcurrentFaults runs dials, traffic and faults together so the race
// detector sees every lock; all that must hold is that each dial either
// connects, times out or is refused, and that nothing leaks.
func TestConcurrentFaults(t *testing.T) {
	n := newNet(t)
	hosts := []string{"n1", "n2", "n3"}
	var ls []net.Listener
	for _, h := range hosts {
		l, err := n.Host(h).Listen(h + ":2380")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				wg.Go(func() {
					defer c.Close()
					io.Copy(c, c)
				})
			}
		})
	}
	var dialers sync.WaitGroup
	for i := range 12 {
		src, dst := hosts[i%3], hosts[(i+1)%3]
		dialers.Go(func() {
			for range 30 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				c, err := n.Host(src).Dial(ctx, dst+":2380")
				cancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) && !peer.Refused(err) {
						t.Errorf("dial %s -> %s: %v", src, dst, err)
					}
					continue
				}
				c.Write([]byte("x"))
				c.Close()
			}
		})
	}
	dialed := make(chan struct{})
	go func() {
		dialers.Wait()
		close(dialed)
	}()
	rounds := 0
	for done := false; !done; rounds++ {
		n.Partition("n1", "n2")
		n.Stall("n2", "n3")
		n.Isolate("n3")
		n.Heal("n1", "n2")
		n.Unstall("n2", "n3")
		n.Rejoin("n3")
		select {
		case <-dialed:
			done = true
		default:
		}
	}
	t.Logf("%d fault rounds", rounds)
	for _, l := range ls {
		l.Close()
	}
	n.Close()
	wg.Wait()
}
