package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/netsy-io/netsy/internal/clock"
)

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestServerCertificateRotation(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(t0)
	lg, logs := newLogger("peer")
	o := c.peerPort(t, clk)
	o.Logger = lg
	addr := serve(t, mustServer(t, o), lg, clk)
	cl := mustClient(t, ClientOptions{CertFile: c.n2Cert, KeyFile: c.n2Key, TrustedCAFile: c.caFile,
		ServerRole: RolePeer, ClusterID: "c1", Clock: clk})
	serial := func() string {
		t.Helper()
		p, err := check(t, addr, cl)
		if err != nil {
			t.Fatal(err)
		}
		return serverCert(t, p).SerialNumber.String()
	}
	first := readCert(t, c.n1Cert)
	if got := serial(); got != first.SerialNumber.String() {
		t.Fatalf("serving serial %s, want %s", got, first.SerialNumber)
	}

	newCert, newKey, second := c.issue(peerID("c1", "n1"))
	replaceFile(t, c.n1Cert, readBytes(t, newCert))
	replaceFile(t, c.n1Key, readBytes(t, newKey))
	// The files are looked at no more than once per CheckInterval.
	if got := serial(); got != first.SerialNumber.String() {
		t.Fatalf("within the check interval: serial %s, want the old %s", got, first.SerialNumber)
	}
	clk.Advance(CheckInterval)
	if got := serial(); got != second.SerialNumber.String() {
		t.Fatalf("after rotation: serial %s, want the new %s", got, second.SerialNumber)
	}
	logs.mustLog(t, "reloaded tls files", map[string]string{"@level": "info", "serial": second.SerialNumber.Text(16)})

	// A certificate written before its key is not used, and said once.
	thirdCert, thirdKey, third := c.issue(peerID("c1", "n1"))
	replaceFile(t, c.n1Cert, readBytes(t, thirdCert))
	for i := 0; i < 3; i++ {
		clk.Advance(CheckInterval)
		if got := serial(); got != second.SerialNumber.String() {
			t.Fatalf("half-rotated: serial %s, want the previous %s", got, second.SerialNumber)
		}
	}
	e := logs.mustLog(t, "tls files changed but cannot be used; keeping the previous ones", map[string]string{"@level": "warn"})
	if msg := e["error"].(string); !strings.Contains(msg, "private key does not match public key") || !strings.Contains(msg, c.n1Cert) {
		t.Fatalf("warning %v", e)
	}
	replaceFile(t, c.n1Key, readBytes(t, thirdKey))
	clk.Advance(CheckInterval)
	if got := serial(); got != third.SerialNumber.String() {
		t.Fatalf("after the key: serial %s, want %s", got, third.SerialNumber)
	}

	// A file missing for a moment keeps the pair in use.
	if err := os.Remove(c.n1Key); err != nil {
		t.Fatal(err)
	}
	clk.Advance(CheckInterval)
	if got := serial(); got != third.SerialNumber.String() {
		t.Fatalf("key missing: serial %s, want %s", got, third.SerialNumber)
	}
	if n := len(logs.entries("tls files changed but cannot be used; keeping the previous ones", nil)); n != 2 {
		t.Fatalf("%d warnings, want 2:\n%s", n, logs.String())
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, err := readCerts(path, true)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestClientCertificateRotation(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(t0)
	lg, logs := newLogger("client")
	o := c.clientPort(t, clk, true)
	o.Logger = lg
	addr := serve(t, mustServer(t, o), lg, clk)
	cl := mustClient(t, ClientOptions{CertFile: c.aliceCert, KeyFile: c.aliceKey, TrustedCAFile: c.caFile, Clock: clk})
	if _, err := check(t, addr, cl); err != nil {
		t.Fatal(err)
	}
	logs.mustLog(t, "request", map[string]string{"identity": "netsy://c1/client/alice"})

	bobCert, bobKey, _ := c.issue(clientID("c1", "bob"))
	replaceFile(t, c.aliceCert, readBytes(t, bobCert))
	replaceFile(t, c.aliceKey, readBytes(t, bobKey))
	clk.Advance(CheckInterval)
	if _, err := check(t, addr, cl); err != nil {
		t.Fatal(err)
	}
	logs.mustLog(t, "request", map[string]string{"identity": "netsy://c1/client/bob"})
}

func TestTrustedCARotation(t *testing.T) {
	c := newCluster(t)
	next := newPKI(t, "c1")
	carolCert, carolKey, _ := next.issue(clientID("c1", "carol"))
	clk := clock.NewFake(t0)
	lg, logs := newLogger("client")
	caFile := filepath.Join(t.TempDir(), "trusted.crt")
	copyFile(t, c.caFile, caFile)
	o := c.clientPort(t, clk, true)
	o.TrustedCAFile, o.Logger = caFile, lg
	addr := serve(t, mustServer(t, o), lg, clk)
	alice := mustClient(t, ClientOptions{CertFile: c.aliceCert, KeyFile: c.aliceKey, TrustedCAFile: c.caFile, Clock: clk})
	carol := mustClient(t, ClientOptions{CertFile: carolCert, KeyFile: carolKey, TrustedCAFile: c.caFile, Clock: clk})
	accepted := func(cl *tls.Config) bool {
		_, err := check(t, addr, cl)
		return err == nil
	}
	if !accepted(alice) || accepted(carol) {
		t.Fatal("before rotation: want alice in and carol out")
	}
	// Both CAs during the change-over.
	replaceFile(t, caFile, append(c.ca.CertPEM(), next.ca.CertPEM()...))
	clk.Advance(CheckInterval)
	if !accepted(alice) || !accepted(carol) {
		t.Fatal("with both CAs: want both in")
	}
	logs.mustLog(t, "reloaded tls files", map[string]string{"files": "trusted CA file " + caFile, "certificates": "2"})
	// Then the new CA alone.
	replaceFile(t, caFile, next.ca.CertPEM())
	clk.Advance(CheckInterval)
	if accepted(alice) || !accepted(carol) {
		t.Fatal("after rotation: want alice out and carol in")
	}
	logs.mustLog(t, "tls handshake refused", map[string]string{"identity": "netsy://c1/client/alice",
		"reason": "not signed by a CA of the trusted CA file " + caFile + ` (issuer "CN=netsy development CA c1")`})
}

func TestExpiry(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(t0)
	r, err := NewReloader(c.n1Cert, c.n1Key, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := readCert(t, c.n1Cert).NotAfter; !r.Expiry().Equal(want) || r.File() != c.n1Cert {
		t.Fatalf("Reloader.Expiry %v, want %v", r.Expiry(), want)
	}
	short, _, shortCert := c.issue(clientID("c1", "x"), func(l *Leaf) { l.Validity = time.Hour })
	bundle := filepath.Join(c.dir, "bundle.crt")
	writeFile(t, bundle, append(c.ca.CertPEM(), readBytes(t, short)...))
	p, err := NewCAPool(bundle, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Expiry().Equal(shortCert.NotAfter) {
		t.Fatalf("CAPool.Expiry %v, want the earliest %v", p.Expiry(), shortCert.NotAfter)
	}

	col := NewExpiryCollector(c.n1Cert, c.caFile, "", c.n1Cert, filepath.Join(c.dir, "missing.crt"))
	values := func() map[string]float64 {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(col)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if probs, err := promlint.NewWithMetricFamilies(mfs).Lint(); err != nil || len(probs) > 0 {
			t.Fatalf("lint: %v %v", probs, err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "netsy_tls_certificate_expiry_seconds" {
				t.Fatalf("metric %s", mf.GetName())
			}
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	got := values()
	want := map[string]float64{
		c.n1Cert: float64(readCert(t, c.n1Cert).NotAfter.Unix()),
		c.caFile: float64(c.ca.Cert.NotAfter.Unix()),
	}
	if len(got) != 2 || got[c.n1Cert] != want[c.n1Cert] || got[c.caFile] != want[c.caFile] {
		t.Fatalf("metrics %v, want %v", got, want)
	}
	// The metric follows the file on disk.
	replaceFile(t, c.n1Cert, readBytes(t, short))
	if got := values()[c.n1Cert]; got != float64(shortCert.NotAfter.Unix()) {
		t.Fatalf("after rotation %v, want %v", got, float64(shortCert.NotAfter.Unix()))
	}
}

func TestIdentityFromContext(t *testing.T) {
	c := newCluster(t)
	if _, ok := IdentityFromContext(context.Background()); ok {
		t.Fatal("identity without a peer")
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{})
	if _, ok := IdentityFromContext(ctx); ok {
		t.Fatal("identity on a plaintext connection")
	}
	withCert := func(cert *x509.Certificate) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
			State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}})
	}
	if id, ok := IdentityFromContext(withCert(readCert(t, c.aliceCert))); !ok || id != clientID("c1", "alice") {
		t.Fatalf("identity %v %v", id, ok)
	}
	if _, ok := IdentityFromContext(withCert(c.ca.Cert)); ok {
		t.Fatal("the CA certificate (netsy://c1 with no role) read as an identity")
	}

	// The stream request log carries it too.
	clk := clock.NewFake(t0)
	lg, logs := newLogger("peer")
	o := c.peerPort(t, clk)
	o.Logger = lg
	addr, stop := serveStop(t, mustServer(t, o), lg, clk)
	cl := mustClient(t, ClientOptions{CertFile: c.n2Cert, KeyFile: c.n2Key, TrustedCAFile: c.caFile,
		ServerRole: RolePeer, ClusterID: "c1", Clock: clk})
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cl)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(context.Background())
	w, err := healthpb.NewHealthClient(conn).Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	stop()
	logs.mustLog(t, "stream", map[string]string{"method": "/grpc.health.v1.Health/Watch", "identity": "netsy://c1/peer/n2", "@level": "debug"})
}
