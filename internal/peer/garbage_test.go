package peer_test

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/peer"
)

// Random bytes and an HTTP/1 request on the peer port are dropped with the
// connection; the port keeps serving gRPC.
func TestGarbageOnThePeerPortIsDropped(t *testing.T) {
	s := serve(t, peer.TCP(), "127.0.0.1:0")
	rng := rand.New(rand.NewPCG(12, 12))
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	for name, msg := range map[string][]byte{
		"random bytes": junk,
		"http/1":       []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
	} {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetDeadline(clock.Real().Now().Add(patience)); err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(msg) // the server may close before it read everything
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%s: the server did not close the connection: %v", name, err)
		}
		c.Close()
	}
	mustServe(t, conn(t, newPool(t, peer.TCP()), s.addr))
}

// A peer address where something other than a Netsy peer port answers
// (here a listener that writes junk and hangs up) fails calls with an
// error (Unavailable, well within the caller's deadline); it never hangs
// them.
func TestPeerAddressThatIsNotGRPCFailsCalls(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer l.Close()
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			c.Close()
		}
	})
	cc := conn(t, newPool(t, peer.TCP()), l.Addr().String())
	// The call must fail on what the listener said (Unavailable), not on
	// its deadline (DeadlineExceeded).
	err = check(cc, patience)
	if err == nil {
		t.Fatal("a health check against a non-gRPC listener succeeded")
	}
	if code := status.Code(err); code != codes.Unavailable {
		t.Fatalf("call to a non-gRPC listener: %v (code %v), want Unavailable", err, code)
	}
	t.Logf("call to a non-gRPC listener: %v", err)
}
