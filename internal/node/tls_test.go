package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/tlsconf"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// testPKI is a CA of cluster "netsy" and the files of the certificates it
// issued, in one directory.
type testPKI struct {
	t   *testing.T
	dir string
	ca  *tlsconf.CA
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := tlsconf.NewCA("netsy", time.Now().Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	p.write("ca.crt", ca.CertPEM())
	return p
}

func (p *testPKI) write(name string, data []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// issue writes name.crt and name.key for a peer (server and client
// authentication, for loopback) or a client, and returns their paths.
func (p *testPKI) issue(role tlsconf.Role, name string) (certFile, keyFile string) {
	p.t.Helper()
	_, certPEM, keyPEM, err := p.ca.Issue(tlsconf.Leaf{
		Identity:   tlsconf.Identity{ClusterID: "netsy", Role: role, Name: name},
		Hosts:      []string{"localhost", "127.0.0.1"},
		NotBefore:  time.Now().Add(-time.Hour),
		Validity:   12 * time.Hour,
		ServerAuth: role == tlsconf.RolePeer,
		ClientAuth: true,
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(name+".crt", certPEM), p.write(name+".key", keyPEM)
}

// secure sets the flags of a node with mutual TLS on both ports.
func (p *testPKI) secure(cfg *config.Config) {
	cert, key := p.issue(tlsconf.RolePeer, cfg.NodeID)
	ca := filepath.Join(p.dir, "ca.crt")
	cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.TrustedCAFile, cfg.TLS.ClientCertAuth = cert, key, ca, true
	cfg.TLS.PeerCertFile, cfg.TLS.PeerKeyFile, cfg.TLS.PeerTrustedCAFile = cert, key, ca
}

// clientTLS is the TLS of an etcd client holding a client identity.
func (p *testPKI) clientTLS(name string) *tls.Config {
	p.t.Helper()
	cert, key := p.issue(tlsconf.RoleClient, name)
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		p.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: roots, MinVersion: tls.VersionTLS13}
}

func tlsClient(t *testing.T, addr string, cfg *tls.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + addr}, TLS: cfg,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// startTLSNode starts node id of c with mutual TLS on both ports.
func startTLSNode(c *testCluster, p *testPKI, id string) {
	c.t.Helper()
	cfg := config.Default()
	cfg.NodeID = id
	cfg.DataDir = c.t.TempDir()
	cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = freePeerAddr(c.t), freePeerAddr(c.t), id+":2380"
	cfg.Quorum = c.quorum
	cfg.HeartbeatInterval = 50 * time.Millisecond
	cfg.ElectorLease, cfg.ElectorRenew = 1500*time.Millisecond, 300*time.Millisecond
	cfg.PrimaryHandshakeTimeout = 300 * time.Millisecond
	p.secure(&cfg)
	logger := hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testLog{c.t}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := StartWith(ctx, cfg, logger, Deps{Clock: clock.Real(), Store: c.store, Network: c.net.Host(id)})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
}

// Three nodes with mutual TLS on both ports form a cluster: the Elector,
// heartbeats and Follow streams run over the peer port's TLS, a write
// through a replica is forwarded to the Primary over it, and a client
// with a client certificate reads it on every node.
func TestTLSClusterServes(t *testing.T) {
	c := newTestCluster(t, -1)
	p := newTestPKI(t)
	for _, id := range []string{"n1", "n2", "n3"} {
		startTLSNode(c, p, id)
	}
	primary := c.ready(20 * time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	clientCfg := p.clientTLS("app")
	for _, id := range c.ids() {
		put, err := tlsClient(t, c.node(id).ClientAddr(), clientCfg).Put(ctx, "k/"+id, id)
		if err != nil {
			t.Fatalf("put through %s (Primary %s): %v", id, primary, err)
		}
		for _, other := range c.ids() {
			got, err := tlsClient(t, c.node(other).ClientAddr(), clientCfg).Get(ctx, "k/"+id)
			if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != put.Header.Revision {
				t.Fatalf("read on %s after a put through %s: %v %v", other, id, got, err)
			}
		}
	}
	// The peer port refuses what is not a peer of this cluster: plaintext
	// and a client identity.
	replica := c.other(primary)
	plain := peer.NewPool(c.net.Host("intruder"))
	defer plain.Close()
	cc, err := plain.Conn(replica + ":2380")
	if err != nil {
		t.Fatal(err)
	}
	shortCtx, shortCancel := context.WithTimeout(ctx, 2*time.Second)
	defer shortCancel()
	if _, err := netsyv1.NewNodeClient(cc).GetNodeState(shortCtx, &netsyv1.GetNodeStateRequest{}); err == nil {
		t.Fatal("the peer port answered a plaintext client")
	}
}

func (c *testCluster) other(avoid string) string {
	for _, id := range c.ids() {
		if id != avoid {
			return id
		}
	}
	c.t.Fatalf("no node besides %s", avoid)
	return ""
}

// With --client-cert-auth the client port refuses a client without a
// certificate and logs why; the request log (debug) names the identity of
// every request; the certificates' expiry is a metric.
func TestTLSClientPort(t *testing.T) {
	p := newTestPKI(t)
	var logs syncLog
	n := startNode(t, "", func(c *config.Config) {
		c.NodeID = "n1"
		c.LogLevel = "debug"
		p.secure(c)
	}, &logs)
	n.log.SetLevel(hclog.Debug)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if _, err := tlsClient(t, n.ClientAddr(), p.clientTLS("app")).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "identity=netsy://netsy/client/app") {
		t.Fatalf("the request log does not name the client's identity:\n%s", logs.String())
	}

	noCert := p.clientTLS("x")
	noCert.Certificates = nil
	conn, err := tls.Dial("tcp", n.ClientAddr(), noCert)
	if err == nil {
		// TLS 1.3: the server's verdict arrives with the first read.
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a client without a certificate: %v", err)
	}
	if !strings.Contains(err.Error(), "bad certificate") {
		t.Fatalf("a client without a certificate: %v, want a bad_certificate alert", err)
	}
	waitLog(t, &logs, `identity="no certificate"`, "a certificate is required")

	// A peer identity is not a client of the client port.
	cert, key := p.issue(tlsconf.RolePeer, "n9")
	peerCfg := p.clientTLS("y")
	kp, _ := tls.LoadX509KeyPair(cert, key)
	peerCfg.Certificates = []tls.Certificate{kp}
	shortCtx, shortCancel := context.WithTimeout(ctx, 2*time.Second)
	defer shortCancel()
	if _, err := tlsClient(t, n.ClientAddr(), peerCfg).Get(shortCtx, "k"); err == nil {
		t.Fatal("the client port served a peer identity")
	}
	waitLog(t, &logs, "identity=netsy://netsy/peer/n9", "a peer identity is not accepted here (only client identities)")

	code, body := httpGet(t, n, "/metrics")
	if code != 200 || !strings.Contains(body, `netsy_tls_certificate_expiry_seconds{file="`+filepath.Join(p.dir, "n1.crt")+`"}`) ||
		!strings.Contains(body, `netsy_tls_certificate_expiry_seconds{file="`+filepath.Join(p.dir, "ca.crt")+`"}`) {
		t.Fatalf("metrics lack the certificates' expiry:\n%s", body)
	}
}

func waitLog(t *testing.T, logs *syncLog, want ...string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(10 * time.Millisecond) {
		ok := true
		for _, line := range strings.Split(logs.String(), "\n") {
			ok = true
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				return
			}
		}
	}
	t.Fatalf("no log line with %q:\n%s", want, logs.String())
}
