package tlsconf

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/netsy-io/netsy/internal/clock"
)

func goleakMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fake time of every test: certificates are valid around it, and
// the wall clock plays no part in any verification.
var t0 = time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)

// logBuf collects log output written from server goroutines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// entries returns the logged entries with message msg whose fields
// include every key and value of want.
func (l *logBuf) entries(msg string, want map[string]string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		if line == "" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			continue
		}
		if e["@message"] != msg {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && fmt.Sprint(e[k]) == v
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

// mustLog fails unless exactly one entry matches, and returns it.
func (l *logBuf) mustLog(t *testing.T, msg string, want map[string]string) map[string]any {
	t.Helper()
	got := l.entries(msg, want)
	if len(got) != 1 {
		t.Fatalf("%d log entries %q with %v, want 1; log:\n%s", len(got), msg, want, l.String())
	}
	return got[0]
}

func newLogger(name string) (hclog.Logger, *logBuf) {
	buf := &logBuf{}
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: buf, Level: hclog.Trace, JSONFormat: true}), buf
}

// pki is a test cluster's CA with its files in a temporary directory.
type pki struct {
	n      int // numbers the files issued
	t      *testing.T
	dir    string
	ca     *CA
	caFile string
}

func newPKI(t *testing.T, clusterID string) *pki {
	t.Helper()
	ca, err := NewCA(clusterID, t0.Add(-24*time.Hour), 10*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &pki{t: t, dir: dir, ca: ca, caFile: filepath.Join(dir, "ca.crt")}
	writeFile(t, p.caFile, ca.CertPEM())
	return p
}

// issue writes a certificate for id (peer: server and client auth, 1 year;
// client: client auth) and returns its files.
func (p *pki) issue(id Identity, mod ...func(*Leaf)) (certFile, keyFile string, cert *x509.Certificate) {
	p.t.Helper()
	l := Leaf{Identity: id, Hosts: []string{"localhost", "127.0.0.1"}, NotBefore: t0.Add(-time.Hour),
		Validity: 365 * 24 * time.Hour, ClientAuth: true, ServerAuth: id.Role == RolePeer, AnyCluster: true}
	for _, m := range mod {
		m(&l)
	}
	cert, certPEM, keyPEM, err := p.ca.Issue(l)
	if err != nil {
		p.t.Fatal(err)
	}
	p.n++
	base := filepath.Join(p.dir, fmt.Sprintf("%s-%s-%s-%d", id.ClusterID, id.Role, id.Name, p.n))
	writeFile(p.t, base+".crt", certPEM)
	writeFile(p.t, base+".key", keyPEM)
	return base + ".crt", base + ".key", cert
}

// issueRaw signs a template as is (certificates Issue refuses to make).
func (p *pki) issueRaw(name string, tmpl *x509.Certificate) (certFile, keyFile string) {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	if tmpl.SerialNumber == nil {
		if tmpl.SerialNumber, err = newSerial(); err != nil {
			p.t.Fatal(err)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.Cert, key.Public(), p.ca.Key)
	if err != nil {
		p.t.Fatal(err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		p.t.Fatal(err)
	}
	base := filepath.Join(p.dir, name)
	writeFile(p.t, base+".crt", certPEM(der))
	writeFile(p.t, base+".key", kp)
	return base + ".crt", base + ".key"
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// replaceFile swaps a file's content by rename, as rotation tools do.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, to, b)
}

func peerID(cluster, name string) Identity { return Identity{cluster, RolePeer, name} }
func clientID(cluster, name string) Identity {
	return Identity{cluster, RoleClient, name}
}

// serve starts a gRPC server with a health service on 127.0.0.1:0, the
// TLS of cfg and the request log, stopped at the end of the test.
func serve(t *testing.T, cfg *tls.Config, logger hclog.Logger, clk clock.Clock) string {
	addr, _ := serveStop(t, cfg, logger, clk)
	return addr
}

// serveStop is serve with a stop that returns once every connection's
// goroutine is done, so all they logged can be read.
func serveStop(t *testing.T, cfg *tls.Config, logger hclog.Logger, clk clock.Clock) (string, func()) {
	t.Helper()
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if cfg != nil {
		creds = ServerCredentials(cfg, logger)
	}
	srv := grpc.NewServer(grpc.Creds(creds), grpc.WaitForHandlers(true),
		grpc.ChainUnaryInterceptor(UnaryRequestLog(logger, clk)),
		grpc.ChainStreamInterceptor(StreamRequestLog(logger, clk)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	stop := func() { srv.Stop(); <-done }
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// check makes one health check on a new connection (nil cfg: plaintext)
// and returns what the client saw of the server.
func check(t *testing.T, addr string, cfg *tls.Config) (*peer.Peer, error) {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var p peer.Peer
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
	return &p, err
}

func serverCert(t *testing.T, p *peer.Peer) *x509.Certificate {
	t.Helper()
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		t.Fatalf("no TLS server certificate in %#v", p.AuthInfo)
	}
	return info.State.PeerCertificates[0]
}

func noIdentityTemplate(name string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		NotBefore:   t0.Add(-time.Hour),
		NotAfter:    t0.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
}

func tlsState(t *testing.T, p *peer.Peer) tls.ConnectionState {
	t.Helper()
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("not TLS: %#v", p.AuthInfo)
	}
	return info.State
}
