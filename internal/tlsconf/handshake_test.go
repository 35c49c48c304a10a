package tlsconf

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
)

// rawHandshake runs one TLS handshake over 127.0.0.1 and returns the
// server's error and the client's (from the handshake or, in TLS 1.3,
// from the first read, which is where a refusal of its certificate
// arrives).
func rawHandshake(t *testing.T, serverCfg, clientCfg *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	deadline := clock.Real().Now().Add(10 * time.Second)
	done := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(deadline)
		s := tls.Server(c, serverCfg)
		err = s.Handshake()
		if err == nil {
			_, err = s.Write([]byte("x"))
		}
		done <- err
	}()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(deadline)
	cfg := clientCfg.Clone()
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		cfg.ServerName = "127.0.0.1"
	}
	c := tls.Client(raw, cfg)
	clientErr = c.Handshake()
	if clientErr == nil {
		_, clientErr = c.Read(make([]byte, 1))
	}
	return <-done, clientErr
}

// cluster is the PKI of cluster c1: node n1 serves, node n2 dials,
// alice is a client.
type cluster struct {
	*pki
	n1Cert, n1Key       string
	n2Cert, n2Key       string
	aliceCert, aliceKey string
}

func newCluster(t *testing.T) *cluster {
	p := newPKI(t, "c1")
	c := &cluster{pki: p}
	c.n1Cert, c.n1Key, _ = p.issue(peerID("c1", "n1"))
	c.n2Cert, c.n2Key, _ = p.issue(peerID("c1", "n2"))
	c.aliceCert, c.aliceKey, _ = p.issue(clientID("c1", "alice"))
	return c
}

func (c *cluster) peerPort(t *testing.T, clk clock.Clock) ServerOptions {
	lg, _ := newLogger("peer")
	return ServerOptions{CertFile: c.n1Cert, KeyFile: c.n1Key, TrustedCAFile: c.caFile,
		ClusterID: "c1", AcceptRole: RolePeer, Clock: clk, Logger: lg}
}

func (c *cluster) clientPort(t *testing.T, clk clock.Clock, require bool) ServerOptions {
	lg, _ := newLogger("client")
	return ServerOptions{CertFile: c.n1Cert, KeyFile: c.n1Key, TrustedCAFile: c.caFile,
		ClusterID: "c1", AcceptRole: RoleClient, RequireClientCert: require, Clock: clk, Logger: lg}
}

func mustServer(t *testing.T, o ServerOptions) *tls.Config {
	t.Helper()
	cfg, err := ServerConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustClient(t *testing.T, o ClientOptions) *tls.Config {
	t.Helper()
	cfg, err := ClientConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestPeerPortAcceptsPeerOfItsCluster(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(t0)
	lg, logs := newLogger("peer")
	o := c.peerPort(t, clk)
	o.Logger = lg
	addr := serve(t, mustServer(t, o), lg, clk)
	cl := mustClient(t, ClientOptions{CertFile: c.n2Cert, KeyFile: c.n2Key, TrustedCAFile: c.caFile,
		ServerRole: RolePeer, ClusterID: "c1", Clock: clk})
	p, err := check(t, addr, cl)
	if err != nil {
		t.Fatalf("peer n2 refused: %v", err)
	}
	if id, err := FromCert(serverCert(t, p)); err != nil || id != peerID("c1", "n1") {
		t.Fatalf("server identity %v, %v; want n1", id, err)
	}
	if v := p.AuthInfo.(interface{ AuthType() string }); v.AuthType() != "tls" {
		t.Fatalf("auth type %q", v.AuthType())
	}
	e := logs.mustLog(t, "request", map[string]string{"identity": "netsy://c1/peer/n2", "code": "OK"})
	if e["method"] != "/grpc.health.v1.Health/Check" {
		t.Fatalf("request log %v", e)
	}
	if len(logs.entries("tls handshake refused", nil)) != 0 {
		t.Fatalf("a refusal was logged:\n%s", logs.String())
	}
}

func TestClientPortAcceptsClients(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(t0)
	withCert := ClientOptions{CertFile: c.aliceCert, KeyFile: c.aliceKey, TrustedCAFile: c.caFile, Clock: clk}
	withoutCert := ClientOptions{TrustedCAFile: c.caFile, Clock: clk}

	t.Run("client-cert-auth", func(t *testing.T) {
		lg, logs := newLogger("client")
		o := c.clientPort(t, clk, true)
		o.Logger = lg
		addr := serve(t, mustServer(t, o), lg, clk)
		p, err := check(t, addr, mustClient(t, withCert))
		if err != nil {
			t.Fatalf("alice refused: %v", err)
		}
		if st := p.AuthInfo.(interface{ AuthType() string }); st.AuthType() != "tls" {
			t.Fatal("not TLS")
		}
		logs.mustLog(t, "request", map[string]string{"identity": "netsy://c1/client/alice", "code": "OK"})
	})
	t.Run("certificate optional", func(t *testing.T) {
		lg, logs := newLogger("client")
		o := c.clientPort(t, clk, false)
		o.Logger = lg
		addr := serve(t, mustServer(t, o), lg, clk)
		if _, err := check(t, addr, mustClient(t, withoutCert)); err != nil {
			t.Fatalf("anonymous client refused: %v", err)
		}
		e := logs.mustLog(t, "request", map[string]string{"code": "OK"})
		if _, ok := e["identity"]; ok {
			t.Fatalf("anonymous request logged with an identity: %v", e)
		}
		if _, err := check(t, addr, mustClient(t, withCert)); err != nil {
			t.Fatalf("alice refused: %v", err)
		}
		logs.mustLog(t, "request", map[string]string{"identity": "netsy://c1/client/alice"})
	})
	t.Run("server TLS only", func(t *testing.T) {
		lg, logs := newLogger("client")
		addr := serve(t, mustServer(t, ServerOptions{CertFile: c.n1Cert, KeyFile: c.n1Key, AcceptRole: RoleClient, Clock: clk, Logger: lg}), lg, clk)
		p, err := check(t, addr, mustClient(t, withCert))
		if err != nil {
			t.Fatalf("client refused: %v", err)
		}
		if id, _ := FromCert(serverCert(t, p)); id != peerID("c1", "n1") {
			t.Fatalf("server certificate %v", id)
		}
		e := logs.mustLog(t, "request", map[string]string{"code": "OK"})
		if _, ok := e["identity"]; ok {
			t.Fatalf("no certificate was asked for, yet the request has an identity: %v", e)
		}
	})
}

func TestRefusals(t *testing.T) {
	c := newCluster(t)
	other := newPKI(t, "c1") // another CA, claiming the same cluster
	foreignCert, foreignKey, _ := other.issue(clientID("c1", "mallory"))
	c2Cert, c2Key, _ := c.issue(peerID("c2", "n9"))
	shortCert, shortKey, _ := c.issue(clientID("c1", "temp"), func(l *Leaf) { l.Validity = time.Hour })
	earlyCert, earlyKey, _ := c.issue(clientID("c1", "early"), func(l *Leaf) { l.NotBefore = t0.Add(time.Hour) })
	anonCert, anonKey := c.issueRaw("stranger", noIdentityTemplate("stranger"))
	twoTmpl := noIdentityTemplate("twice")
	twoTmpl.URIs = append(twoTmpl.URIs, peerID("c1", "a").URI(), peerID("c1", "b").URI())
	twoCert, twoKey := c.issueRaw("twice", twoTmpl)
	serverOnlyCert, serverOnlyKey, _ := c.issue(peerID("c1", "n3"), func(l *Leaf) { l.ClientAuth = false })

	for _, tc := range []struct {
		name      string
		port      string // "peer", "client" (--client-cert-auth) or "client-optional"
		cert, key string
		advance   time.Duration // of the server's clock
		identity  string
		reason    string
	}{
		{name: "no certificate, client-cert-auth", port: "client",
			identity: "no certificate", reason: "a certificate is required"},
		{name: "no certificate on the peer port", port: "peer",
			identity: "no certificate", reason: "a certificate is required"},
		{name: "another CA", port: "client", cert: foreignCert, key: foreignKey,
			identity: "netsy://c1/client/mallory", reason: "not signed by a CA of the trusted CA file " + c.caFile + ` (issuer "CN=netsy development CA c1")`},
		{name: "client certificate on the peer port", port: "peer", cert: c.aliceCert, key: c.aliceKey,
			identity: "netsy://c1/client/alice", reason: "a client identity is not accepted here (only peer identities)"},
		{name: "peer certificate on the client port", port: "client", cert: c.n2Cert, key: c.n2Key,
			identity: "netsy://c1/peer/n2", reason: "a peer identity is not accepted here (only client identities)"},
		{name: "peer certificate presented where optional", port: "client-optional", cert: c.n2Cert, key: c.n2Key,
			identity: "netsy://c1/peer/n2", reason: "a peer identity is not accepted here (only client identities)"},
		{name: "peer of another cluster", port: "peer", cert: c2Cert, key: c2Key,
			identity: "netsy://c2/peer/n9", reason: `cluster id "c2" is not this cluster's ("c1")`},
		{name: "expired", port: "client", cert: shortCert, key: shortKey, advance: time.Hour + time.Second,
			identity: "netsy://c1/client/temp", reason: "certificate expired at 2031-03-01T12:00:00Z (now 2031-03-01T13:00:01Z)"},
		{name: "not yet valid", port: "client", cert: earlyCert, key: earlyKey,
			identity: "netsy://c1/client/early", reason: "certificate is not valid before 2031-03-01T13:00:00Z (now 2031-03-01T12:00:00Z)"},
		{name: "no netsy identity", port: "client", cert: anonCert, key: anonKey,
			identity: "no netsy identity (subject CN=stranger)", reason: "certificate has no netsy:// URI SAN"},
		{name: "two identities", port: "peer", cert: twoCert, key: twoKey,
			identity: "no netsy identity (subject CN=twice): certificate has 2 netsy:// URI SANs, want exactly one",
			reason:   "certificate has 2 netsy:// URI SANs, want exactly one"},
		{name: "server-only certificate as a client's", port: "peer", cert: serverOnlyCert, key: serverOnlyKey,
			identity: "netsy://c1/peer/n3", reason: "certificate is not for client authentication (extended key usage)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			lg, logs := newLogger("port")
			var o ServerOptions
			by := "client port"
			switch tc.port {
			case "peer":
				o, by = c.peerPort(t, clk), "peer port"
			case "client":
				o = c.clientPort(t, clk, true)
			case "client-optional":
				o = c.clientPort(t, clk, false)
			}
			o.Logger = lg
			srvCfg := mustServer(t, o)
			clk.Advance(tc.advance)
			// The client trusts the server; only its own certificate is
			// in question. Its clock stays at t0.
			cl := mustClient(t, ClientOptions{CertFile: tc.cert, KeyFile: tc.key, TrustedCAFile: c.caFile, Clock: clock.NewFake(t0)})

			serverErr, clientErr := rawHandshake(t, srvCfg, cl)
			var refused *RefusedError
			if !errors.As(serverErr, &refused) {
				t.Fatalf("server handshake error %v (%T), want a *RefusedError", serverErr, serverErr)
			}
			want := "tls: " + by + " refused " + tc.identity + ": " + tc.reason
			if refused.Error() != want || refused.By != by || refused.Identity != tc.identity || refused.Reason != tc.reason {
				t.Fatalf("refusal\n got %q\nwant %q", refused.Error(), want)
			}
			if clientErr == nil || !strings.Contains(clientErr.Error(), "bad certificate") {
				t.Fatalf("client saw %v, want a bad certificate alert", clientErr)
			}
			e := logs.mustLog(t, "tls handshake refused", map[string]string{"@level": "warn", "by": by, "identity": tc.identity, "reason": tc.reason})
			if r, _ := e["remote"].(string); !strings.HasPrefix(r, "127.0.0.1:") {
				t.Fatalf("refusal logged without the remote address: %v", e)
			}

			// The same over gRPC: the call fails, the refusal is logged
			// once more, and no request reaches the service.
			addr, stop := serveStop(t, srvCfg, lg, clk)
			if _, err := check(t, addr, cl); status.Code(err) != codes.Unavailable {
				t.Fatalf("gRPC call: %v, want Unavailable", err)
			}
			stop()
			if n := len(logs.entries("tls handshake refused", map[string]string{"identity": tc.identity, "reason": tc.reason})); n < 2 {
				t.Fatalf("gRPC refusal not logged:\n%s", logs.String())
			}
			if n := len(logs.entries("request", nil)); n != 0 {
				t.Fatalf("%d requests served after a refusal", n)
			}
			if n := len(logs.entries("tls handshake failed", nil)); n != 0 {
				t.Fatalf("refusal logged twice:\n%s", logs.String())
			}
		})
	}
}

// A peer dialing a server that is not a peer of its cluster refuses it.
func TestPeerClientRefusesServers(t *testing.T) {
	c := newCluster(t)
	foreignCert, foreignKey, _ := c.issue(peerID("c2", "n9"))
	other := newPKI(t, "c1")
	otherCert, otherKey, _ := other.issue(peerID("c1", "n1"))
	for _, tc := range []struct {
		name, cert, key, identity, reason string
	}{
		{"another cluster", foreignCert, foreignKey, "netsy://c2/peer/n9", `cluster id "c2" is not this cluster's ("c1")`},
		{"a client", c.aliceCert, c.aliceKey, "netsy://c1/client/alice", "certificate is not for server authentication (extended key usage)"},
		{"another CA", otherCert, otherKey, "netsy://c1/peer/n1", "not signed by a CA of the trusted CA file " + c.caFile + ` (issuer "CN=netsy development CA c1")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			srv := mustServer(t, ServerOptions{CertFile: tc.cert, KeyFile: tc.key, AcceptRole: RoleClient, Clock: clk})
			lg, logs := newLogger("dialer")
			cl := mustClient(t, ClientOptions{CertFile: c.n2Cert, KeyFile: c.n2Key, TrustedCAFile: c.caFile,
				ServerRole: RolePeer, ClusterID: "c1", Clock: clk, Logger: lg})
			_, clientErr := rawHandshake(t, srv, cl)
			var refused *RefusedError
			if !errors.As(clientErr, &refused) || refused.By != "peer client" || refused.Identity != tc.identity || refused.Reason != tc.reason {
				t.Fatalf("client error %v, want peer client refusing %s: %s", clientErr, tc.identity, tc.reason)
			}
			logs.mustLog(t, "tls handshake refused", map[string]string{"@level": "warn", "by": "peer client", "identity": tc.identity, "reason": tc.reason})
			if _, err := check(t, serve(t, srv, lg, clk), cl); status.Code(err) != codes.Unavailable ||
				!strings.Contains(err.Error(), "tls: peer client refused "+tc.identity) {
				t.Fatalf("gRPC call: %v, want Unavailable naming the refusal", err)
			}
		})
	}
}

func TestPlaintextToTLSPort(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(t0)
	lg, logs := newLogger("peer")
	o := c.peerPort(t, clk)
	o.Logger = lg
	addr, stop := serveStop(t, mustServer(t, o), lg, clk)
	if _, err := check(t, addr, nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext call: %v, want Unavailable", err)
	}
	stop()
	e := logs.mustLog(t, "tls handshake failed", map[string]string{"@level": "warn"})
	if !strings.Contains(e["error"].(string), "first record does not look like a TLS handshake") ||
		!strings.HasPrefix(e["remote"].(string), "127.0.0.1:") {
		t.Fatalf("log entry %v", e)
	}
	if len(logs.entries("request", nil)) != 0 {
		t.Fatal("a plaintext request was served")
	}
}

func TestTLS12OnlyWhenAsked(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(t0)
	cl := mustClient(t, ClientOptions{CertFile: c.n2Cert, KeyFile: c.n2Key, TrustedCAFile: c.caFile,
		ServerRole: RolePeer, ClusterID: "c1", Clock: clk, MinVersion: tls.VersionTLS12})
	cl.MaxVersion = tls.VersionTLS12

	t.Run("refused by default", func(t *testing.T) {
		lg, logs := newLogger("peer")
		o := c.peerPort(t, clk)
		o.Logger = lg
		srv := mustServer(t, o)
		if srv.MinVersion != tls.VersionTLS13 {
			t.Fatalf("default MinVersion %#x", srv.MinVersion)
		}
		serverErr, _ := rawHandshake(t, srv, cl)
		if serverErr == nil || !strings.Contains(serverErr.Error(), "unsupported versions") {
			t.Fatalf("server accepted TLS 1.2: %v", serverErr)
		}
		addr, stop := serveStop(t, srv, lg, clk)
		if _, err := check(t, addr, cl); status.Code(err) != codes.Unavailable {
			t.Fatalf("gRPC over TLS 1.2: %v", err)
		}
		stop() // the server logs after its alert reached the client
		e := logs.mustLog(t, "tls handshake failed", map[string]string{"@level": "warn"})
		if !strings.Contains(e["error"].(string), "unsupported versions") {
			t.Fatalf("log entry %v", e)
		}
	})
	t.Run("accepted when enabled", func(t *testing.T) {
		o := c.peerPort(t, clk)
		o.MinVersion = tls.VersionTLS12
		lg, logs := newLogger("peer")
		o.Logger = lg
		p, err := check(t, serve(t, mustServer(t, o), lg, clk), cl)
		if err != nil {
			t.Fatal(err)
		}
		if st := p.AuthInfo.(interface{ AuthType() string }); st.AuthType() != "tls" {
			t.Fatal("not TLS")
		}
		if v := tlsState(t, p).Version; v != tls.VersionTLS12 {
			t.Fatalf("version %#x, want TLS 1.2", v)
		}
		// Identity checks hold in TLS 1.2 as well.
		logs.mustLog(t, "request", map[string]string{"identity": "netsy://c1/peer/n2"})
		bad := mustClient(t, ClientOptions{CertFile: c.aliceCert, KeyFile: c.aliceKey, TrustedCAFile: c.caFile, Clock: clk, MinVersion: tls.VersionTLS12})
		bad.MaxVersion = tls.VersionTLS12
		serverErr, _ := rawHandshake(t, mustServer(t, o), bad)
		var refused *RefusedError
		if !errors.As(serverErr, &refused) || refused.Identity != "netsy://c1/client/alice" {
			t.Fatalf("TLS 1.2 client certificate on the peer port: %v", serverErr)
		}
	})
	t.Run("other versions are not options", func(t *testing.T) {
		o := c.peerPort(t, clk)
		o.MinVersion = tls.VersionTLS11
		if _, err := ServerConfig(o); err == nil || !strings.Contains(err.Error(), "only TLS 1.2 and TLS 1.3") {
			t.Fatalf("TLS 1.1: %v", err)
		}
		if _, err := ClientConfig(ClientOptions{MinVersion: tls.VersionTLS10}); err == nil {
			t.Fatal("TLS 1.0 client accepted")
		}
	})
}

func TestConfigErrors(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct {
		name string
		mod  func(*ServerOptions)
		want string
	}{
		{"missing key file", func(o *ServerOptions) { o.KeyFile = c.dir + "/nope.key" },
			"--peer-cert-file/--peer-key-file: certificate " + c.n1Cert + " and key " + c.dir + "/nope.key: open " + c.dir + "/nope.key: no such file or directory"},
		{"key of another certificate", func(o *ServerOptions) { o.KeyFile = c.n2Key },
			"--peer-cert-file/--peer-key-file: certificate " + c.n1Cert + " and key " + c.n2Key + ": tls: private key does not match public key"},
		{"no certificate", func(o *ServerOptions) { o.CertFile = "" }, "--peer-cert-file and --peer-key-file: TLS on the peer port needs both"},
		{"peer port without CA", func(o *ServerOptions) { o.TrustedCAFile = "" }, "--peer-trusted-ca-file: required with --peer-cert-file, peers always authenticate each other"},
		{"client-cert-auth without CA", func(o *ServerOptions) { o.AcceptRole, o.RequireClientCert, o.TrustedCAFile = RoleClient, true, "" },
			"--trusted-ca-file: required by --client-cert-auth"},
		{"CA file of keys", func(o *ServerOptions) { o.TrustedCAFile = c.n1Key }, `--peer-trusted-ca-file: trusted CA file ` + c.n1Key + `: PEM block 1 is a "PRIVATE KEY", want only CERTIFICATE blocks`},
		{"no cluster id", func(o *ServerOptions) { o.ClusterID = "" }, "tls server: empty cluster id"},
		{"bad role", func(o *ServerOptions) { o.AcceptRole = "admin" }, `tls server: accepted role "admin" is not "peer" or "client"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := c.peerPort(t, clock.NewFake(t0))
			tc.mod(&o)
			_, err := ServerConfig(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ServerConfig: %v\nwant %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		o    ClientOptions
		want string
	}{
		{"cert without key", ClientOptions{CertFile: c.aliceCert}, "give both or neither"},
		{"peer without certificate", ClientOptions{TrustedCAFile: c.caFile, ServerRole: RolePeer, ClusterID: "c1"}, "a certificate and key are required"},
		{"peer without CA", ClientOptions{CertFile: c.n2Cert, KeyFile: c.n2Key, ServerRole: RolePeer, ClusterID: "c1"}, "a trusted CA file is required"},
		{"peer without cluster", ClientOptions{CertFile: c.n2Cert, KeyFile: c.n2Key, TrustedCAFile: c.caFile, ServerRole: RolePeer}, "empty cluster id"},
		{"client role", ClientOptions{ServerRole: RoleClient}, `server role "client"`},
		{"missing CA file", ClientOptions{TrustedCAFile: c.dir + "/none.crt"}, "none.crt: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ClientConfig(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ClientConfig: %v, want %q", err, tc.want)
			}
		})
	}
}
