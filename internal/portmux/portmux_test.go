package portmux

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/tlsconf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const clusterID = "c1"

// served is a Mux on 127.0.0.1 with a gRPC health server on its gRPC side
// and an HTTP server answering "http" on its HTTP side, stopped at cleanup.
func served(t *testing.T, tlsCfg *tls.Config) (*Mux, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(l, Options{TLS: tlsCfg, SniffTimeout: 5 * time.Second})
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(tlsconf.ServerCredentials(tlsCfg, nil)))
	}
	g := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	h := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "http "+r.Proto)
	})}
	gdone, hdone := make(chan struct{}), make(chan struct{})
	go func() { defer close(gdone); _ = g.Serve(m.GRPC()) }()
	go func() { defer close(hdone); _ = h.Serve(m.HTTP()) }()
	m.Start()
	t.Cleanup(func() {
		g.Stop()
		h.Close()
		m.Close()
		<-gdone
		<-hdone
	})
	return m, l.Addr().String()
}

func grpcCheck(ctx context.Context, addr string, opts ...grpc.DialOption) error {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func httpGet(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestPlaintextRoutesGRPCByPrefaceAndHTTPByItsFirstBytes(t *testing.T) {
	_, addr := served(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := grpcCheck(ctx, addr); err != nil {
		t.Fatalf("gRPC health check: %v", err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if got, err := httpGet(ctx, &http.Client{Transport: tr}, "http://"+addr+"/"); err != nil || got != "http HTTP/1.1" {
		t.Fatalf("HTTP GET: %q, %v", got, err)
	}
	// A request shorter than the preface that then waits for the answer
	// (HTTP/1.0 without a body) is routed on its first bytes.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "http HTTP/1.0") {
		t.Fatalf("HTTP/1.0 request shorter than the preface got %q", b)
	}
}

// A client that says nothing holds up nobody: routing is per connection.
func TestSilentClientDoesNotHoldUpOthers(t *testing.T) {
	_, addr := served(t, nil)
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Half a preface, then silence.
	io.WriteString(silent, h2Preface[:10])
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := grpcCheck(ctx, addr); err != nil {
		t.Fatalf("gRPC behind a silent client: %v", err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if _, err := httpGet(ctx, &http.Client{Transport: tr}, "http://"+addr+"/"); err != nil {
		t.Fatalf("HTTP behind a silent client: %v", err)
	}
}

func TestSniffTimeoutClosesSilentClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(l, Options{SniffTimeout: 50 * time.Millisecond, Clock: clock.Real()})
	m.Start()
	defer m.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("silent client: read %v, want EOF once the sniff timeout closed it", err)
	}
}

// tlsFiles writes a CA, a server certificate and the named client
// certificates of clusterID to a temporary directory.
type tlsFiles struct {
	dir    string
	ca     *tlsconf.CA
	caPool *x509.CertPool
}

func newTLSFiles(t *testing.T) *tlsFiles {
	t.Helper()
	now := clock.Real().Wall()
	ca, err := tlsconf.NewCA(clusterID, now.Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFiles{dir: t.TempDir(), ca: ca, caPool: x509.NewCertPool()}
	f.caPool.AddCert(ca.Cert)
	if err := os.WriteFile(filepath.Join(f.dir, "ca.pem"), ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	f.issue(t, "server", tlsconf.Leaf{
		Identity: tlsconf.Identity{ClusterID: clusterID, Role: tlsconf.RolePeer, Name: "n1"},
		Hosts:    []string{"127.0.0.1"}, ServerAuth: true, ClientAuth: true,
	})
	return f
}

func (f *tlsFiles) issue(t *testing.T, name string, l tlsconf.Leaf) {
	t.Helper()
	l.NotBefore, l.Validity = clock.Real().Wall().Add(-time.Hour), 24*time.Hour
	_, cert, key, err := f.ca.Issue(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, name+".pem"), cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, name+"-key.pem"), key, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (f *tlsFiles) path(name string) string { return filepath.Join(f.dir, name) }

func (f *tlsFiles) client(t *testing.T, name string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: f.caPool, MinVersion: tls.VersionTLS13}
	if name != "" {
		kp, err := tls.LoadX509KeyPair(f.path(name+".pem"), f.path(name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg
}

// Over TLS, gRPC clients (ALPN "h2" only) reach gRPC and HTTP clients
// (offering "http/1.1", with or without "h2") reach HTTP, both held to the
// same client-certificate rules: without a valid client certificate
// neither gets an answer.
func TestTLSRoutesByALPNAndHoldsBothSidesToTheClientCertificate(t *testing.T) {
	f := newTLSFiles(t)
	f.issue(t, "alice", tlsconf.Leaf{Identity: tlsconf.Identity{ClusterID: clusterID, Role: tlsconf.RoleClient, Name: "alice"}, ClientAuth: true})
	f.issue(t, "stranger", tlsconf.Leaf{Identity: tlsconf.Identity{ClusterID: "other", Role: tlsconf.RoleClient, Name: "mallory"}, ClientAuth: true, AnyCluster: true})
	srv, err := tlsconf.ServerConfig(tlsconf.ServerOptions{
		CertFile: f.path("server.pem"), KeyFile: f.path("server-key.pem"), TrustedCAFile: f.path("ca.pem"),
		ClusterID: clusterID, AcceptRole: tlsconf.RoleClient, RequireClientCert: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := served(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	for _, c := range []struct {
		name   string
		client string
		ok     bool
	}{{"valid client certificate", "alice", true}, {"no certificate", "", false}, {"other cluster's certificate", "stranger", false}} {
		grpcErr := grpcCheck(ctx, addr, grpc.WithTransportCredentials(credentials.NewTLS(f.client(t, c.client))))
		if (grpcErr == nil) != c.ok {
			t.Errorf("%s: gRPC health check: %v, want ok=%v", c.name, grpcErr, c.ok)
		}
		for _, protos := range [][]string{{"h2", "http/1.1"}, {"http/1.1"}, nil} {
			cfg := f.client(t, c.client)
			cfg.NextProtos = protos
			tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: slices.Contains(protos, "h2")}
			got, err := httpGet(ctx, &http.Client{Transport: tr}, "https://"+addr+"/")
			tr.CloseIdleConnections()
			switch {
			case c.ok && (err != nil || got != "http HTTP/1.1"):
				t.Errorf("%s, ALPN %q: HTTP GET %q, %v; want the HTTP side over HTTP/1.1", c.name, protos, got, err)
			case !c.ok && err == nil:
				t.Errorf("%s, ALPN %q: HTTP GET answered %q", c.name, protos, got)
			}
		}
	}
}

// The gRPC hot path through the Mux against the same server on its own
// listener: the Mux acts once per connection, so a call costs the same.
func BenchmarkGRPCCall(b *testing.B) {
	for _, viaMux := range []bool{false, true} {
		name := "direct"
		if viaMux {
			name = "portmux"
		}
		b.Run(name, func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			g := grpc.NewServer()
			healthpb.RegisterHealthServer(g, health.NewServer())
			serveL := l
			var m *Mux
			if viaMux {
				m = New(l, Options{})
				serveL = m.GRPC()
				m.Start()
			}
			done := make(chan struct{})
			go func() { defer close(done); _ = g.Serve(serveL) }()
			defer func() {
				g.Stop()
				if m != nil {
					m.Close()
				}
				<-done
			}()
			cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			hc := healthpb.NewHealthClient(cc)
			ctx := context.Background()
			if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
