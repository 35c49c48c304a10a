// Package h2count counts, for tests, the writes (each a write system call)
// that connections make and the HTTP/2 PING frames among them, parsed from
// the bytes written: how many round trips of flow-control probing a
// gRPC exchange costs.
package h2count

import (
	"net"
	"sync"
	"sync/atomic"
)

// Counter totals what every connection it wraps writes.
type Counter struct {
	// Writes counts Write calls.
	Writes atomic.Int64
	// Pings counts PING frames a side started; PingAcks the acks of
	// the other side's.
	Pings, PingAcks atomic.Int64
}

// preface is what an HTTP/2 client writes before its first frame.
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Server wraps a connection accepted by an HTTP/2 server.
func (c *Counter) Server(conn net.Conn) net.Conn { return &counted{Conn: conn, c: c} }

// Client wraps a connection an HTTP/2 client dialled (its preface is not
// a frame).
func (c *Counter) Client(conn net.Conn) net.Conn {
	return &counted{Conn: conn, c: c, skip: len(preface)}
}

// Listener wraps every connection l accepts (Server).
func (c *Counter) Listener(l net.Listener) net.Listener { return listener{l, c} }

type listener struct {
	net.Listener
	c *Counter
}

func (l listener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.c.Server(conn), nil
}

type counted struct {
	net.Conn
	c    *Counter
	mu   sync.Mutex
	skip int    // bytes left of the preface or of the current payload
	head []byte // a frame header read so far
}

func (c *counted) Write(b []byte) (int, error) {
	c.c.Writes.Add(1)
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
			if c.head[3] == typePing {
				if c.head[4]&flagAck != 0 {
					c.c.PingAcks.Add(1)
				} else {
					c.c.Pings.Add(1)
				}
			}
			c.skip = int(c.head[0])<<16 | int(c.head[1])<<8 | int(c.head[2])
			c.head = c.head[:0]
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}
