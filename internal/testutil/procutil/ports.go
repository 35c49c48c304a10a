package procutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// The range stays below the kernel's default ephemeral range (32768+), so an
// outgoing connection of some other process cannot grab a port between our
// bind test and the server's own bind.
const (
	minPort = 20000
	maxPort = 32000
)

var (
	portsMu sync.Mutex
	// handedOut remembers every port returned in this process: a port that is
	// free now may belong to a server that is merely stopped for a restart.
	handedOut = map[int]bool{}
)

// FreePort returns a loopback TCP port in [20000, 32000) that could be bound
// just now and was not returned before in this process.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FreeAddr is FreePort formatted as "127.0.0.1:port".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// Port is FreePort for callers without a testing.TB (a helper that
// starts a server of its own, such as miniotest): it keeps the same
// process-wide record, so no two callers are ever handed one port. Two
// records raced: one helper's probe found free a port the other had just
// handed out, before its server bound it ("address already in use").
func Port() (int, error) { return freePort() }

func freeAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	// Random probing spreads concurrent test binaries (e2e, k8s, bench run by
	// several engineers at once) over the range instead of racing for the
	// same low ports.
	for range 500 {
		p := minPort + rand.IntN(maxPort-minPort)
		if handedOut[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		handedOut[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port in [%d, %d)", minPort, maxPort)
}
