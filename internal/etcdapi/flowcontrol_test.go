package etcdapi

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// frameCounter counts the writes a server connection makes (each a write
// system call) and, parsing the HTTP/2 frames in them, the PINGs it starts
// (not the acks of the client's own).
type frameCounter struct {
	writes atomic.Int64
	pings  atomic.Int64
}

type countedConn struct {
	net.Conn
	c    *frameCounter
	mu   sync.Mutex
	skip int    // bytes left of the current frame's payload
	head []byte // a frame header read so far
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.c.writes.Add(1)
	c.mu.Lock()
	for p := b; len(p) > 0; {
		if c.skip > 0 {
			k := min(c.skip, len(p))
			c.skip -= k
			p = p[k:]
			continue
		}
		k := min(9-len(c.head), len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
		if len(c.head) == 9 {
			const typePing, flagAck = 0x6, 0x1
			if c.head[3] == typePing && c.head[4]&flagAck == 0 {
				c.c.pings.Add(1)
			}
			c.skip = int(c.head[0])<<16 | int(c.head[1])<<8 | int(c.head[2])
			c.head = c.head[:0]
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

type countedListener struct {
	net.Listener
	c *frameCounter
}

func (l countedListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: conn, c: l.c}, nil
}

// A client that writes one request at a time gets one response each and
// no flow-control probe: gRPC's bandwidth-delay estimation answered nearly
// every such request with a WINDOW_UPDATE and a PING, one more write here
// and a read and a write on the client, on the path of a sequential put.
func TestSequentialPutsSendNoFlowControlPings(t *testing.T) {
	fc := &frameCounter{}
	srv := New(Config{Backend: newFakeBackend()})
	g := srv.NewGRPCServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(countedListener{lis, fc})
	}()
	t.Cleanup(func() {
		srv.Close()
		g.Stop()
		<-served
	})
	e := &testEnv{t: t, addr: lis.Addr().String()}
	cli := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	val := strings.Repeat("v", 256)
	put := func(i int) {
		t.Helper()
		if _, err := cli.Put(ctx, fmt.Sprintf("k%06d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	// The connection's set-up (settings and their acks) first.
	for i := range 5 {
		put(i)
	}
	const n = 200
	writes, pings := fc.writes.Load(), fc.pings.Load()
	for i := range n {
		put(i)
	}
	writes, pings = fc.writes.Load()-writes, fc.pings.Load()-pings
	t.Logf("%d sequential puts: %d server writes, %d pings started by the server", n, writes, pings)
	if pings > 0 {
		t.Fatalf("%d sequential puts made the server start %d pings (%d writes); want none", n, pings, writes)
	}
}
