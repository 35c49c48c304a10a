//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/testutil/faultproxy"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// faultNet is the network of a proxied cluster: a faultproxy in front of
// every node's peer port (the node listens on --peer-addr and advertises
// the proxy with --advertise-peer, so every peer connection to it passes
// the proxy) and one in front of MinIO (every node's --s3-endpoint). Each
// proxy names a connection by the pid of the process that opened it, so
// the harness can also cut one node's outbound connections.
type faultNet struct {
	t    *testing.T
	peer map[string]*faultproxy.Proxy // by node id
	s3   *faultproxy.Proxy            // nil on the file store
}

func newFaultNet(t *testing.T) *faultNet {
	return &faultNet{t: t, peer: map[string]*faultproxy.Proxy{}}
}

// bySourcePID is the proxies' Classify: the pid (decimal) of the test's
// child process that opened the connection, or "" for any other (the
// test's own clients).
func bySourcePID(client, proxy net.Addr) string {
	kids, err := faultproxy.ChildPIDs(os.Getpid())
	if err != nil {
		return ""
	}
	pid, err := faultproxy.OwnerPID(client, proxy, kids)
	if err != nil || pid == 0 {
		return ""
	}
	return strconv.Itoa(pid)
}

func (n *faultNet) proxy(upstream string) *faultproxy.Proxy {
	n.t.Helper()
	p, err := faultproxy.New(procutil.FreeAddr(n.t), upstream, faultproxy.Options{Classify: bySourcePID})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = p.Close() })
	return p
}

// nodeOptions returns the Options that put node id behind a new peer
// proxy: its own peer listener, the proxy advertised.
func (n *faultNet) nodeOptions(id string) (procutil.Options, []string) {
	peer := procutil.FreeAddr(n.t)
	p := n.proxy(peer)
	n.peer[id] = p
	return procutil.Options{PeerAddr: peer}, []string{"--advertise-peer", p.Addr()}
}

// s3Endpoint puts a proxy in front of srv and returns its endpoint URL.
func (n *faultNet) s3Endpoint(srv *miniotest.Server) string {
	n.s3 = n.proxy(srv.Addr)
	return "http://" + n.s3.Addr()
}

func (n *faultNet) set(p *faultproxy.Proxy, m faultproxy.Mode) {
	n.t.Helper()
	if err := p.SetMode(m); err != nil {
		n.t.Fatal(err)
	}
}

// heal puts every proxy back to Pass for every source.
func (n *faultNet) heal() {
	n.t.Helper()
	for _, p := range n.peer {
		p.ClearSourceModes()
		n.set(p, faultproxy.Pass)
	}
	if n.s3 != nil {
		n.s3.ClearSourceModes()
		n.set(n.s3, faultproxy.Pass)
	}
}

// cutNode cuts node id's peer links: in on its own proxy (the connections
// other nodes open to it) and out on every other node's proxy (the
// connections it opens, by its pid). Its object storage and client port
// stay reachable, as in a partition between the nodes' network and the
// rest.
func (n *faultNet) cutNode(id string, pid int, in, out faultproxy.Mode) {
	n.t.Helper()
	n.set(n.peer[id], in)
	for other, p := range n.peer {
		if other != id {
			p.SetSourceMode(strconv.Itoa(pid), out)
		}
	}
}

// String describes the proxies and their open connections by source pid,
// for logs.
func (n *faultNet) String() string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(n.peer)) {
		p := n.peer[id]
		parts = append(parts, fmt.Sprintf("%s peer %s (%s, conns by pid %v)", id, p.Addr(), p.Mode(), p.Sources()))
	}
	if n.s3 != nil {
		parts = append(parts, fmt.Sprintf("s3 %s (%s, conns by pid %v)", n.s3.Addr(), n.s3.Mode(), n.s3.Sources()))
	}
	return strings.Join(parts, "; ")
}

// logStory returns the lines of a node's log that tell what happened to
// its roles (warnings, errors, events, elections, follows), a run of lines
// that differ only in their timestamp collapsed into its first with a
// count, the last max of them: the tail procutil prints on failure can be
// all one repeated line.
func logStory(path string, max int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	var out []string
	var prev string
	repeats := 0
	flush := func() {
		if repeats > 0 {
			out = append(out, fmt.Sprintf("        ... the line above %d more times", repeats))
			repeats = 0
		}
	}
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.Contains(l, "[WARN]") && !strings.Contains(l, "[ERROR]") && !strings.Contains(l, "event:") &&
			!strings.Contains(l, "following the Primary") && !strings.Contains(l, "primary state") {
			continue
		}
		msg := l
		if i := strings.IndexByte(l, ' '); i > 0 {
			msg = l[i:] // without the timestamp
		}
		if msg == prev {
			repeats++
			continue
		}
		flush()
		prev = msg
		out = append(out, "        "+l)
	}
	flush()
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.Join(out, "\n")
}
