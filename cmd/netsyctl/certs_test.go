package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
	"github.com/netsy-io/netsy/internal/tlsconf"
)

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, args...)
	if code != 0 {
		t.Fatalf("netsyctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func readCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestCertsCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	out := mustRun(t, "certs", "init", "--dir", dir, "--cluster-id", "prod")
	if !strings.Contains(out, "wrote "+filepath.Join(dir, "ca.crt")+": CA certificate of cluster prod, valid until ") ||
		!strings.Contains(out, "wrote "+filepath.Join(dir, "ca.key")+": CA key") {
		t.Fatalf("init printed:\n%s", out)
	}
	if m := mode(t, filepath.Join(dir, "ca.key")); m != 0o600 {
		t.Fatalf("ca.key mode %o", m)
	}
	ca, err := tlsconf.LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	if ca.ClusterID != "prod" || !ca.Cert.IsCA || ca.Cert.PublicKeyAlgorithm != x509.ECDSA ||
		ca.Cert.NotAfter.Sub(ca.Cert.NotBefore) != caValidity {
		t.Fatalf("CA: cluster %q, CA %v, %v, valid %v", ca.ClusterID, ca.Cert.IsCA, ca.Cert.PublicKeyAlgorithm, ca.Cert.NotAfter.Sub(ca.Cert.NotBefore))
	}
	caBefore, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if _, errOut, code := run(t, "certs", "init", "--dir", dir, "--cluster-id", "prod"); code != 1 || !strings.Contains(errOut, "ca.crt exists: refusing to overwrite it") {
		t.Fatalf("second init: exit %d %s", code, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); !bytes.Equal(caBefore, after) {
		t.Fatal("second init changed ca.crt")
	}

	out = mustRun(t, "certs", "node", "n1", "--dir", dir, "--hosts", "n1.example, 10.0.0.1")
	if !strings.Contains(out, "node certificate netsy://prod/peer/n1 for n1.example,10.0.0.1,localhost,127.0.0.1,::1") {
		t.Fatalf("node printed:\n%s", out)
	}
	n1 := readCertFile(t, filepath.Join(dir, "n1.crt"))
	if id, err := tlsconf.FromCert(n1); err != nil || id != (tlsconf.Identity{ClusterID: "prod", Role: tlsconf.RolePeer, Name: "n1"}) {
		t.Fatalf("node identity %v %v", id, err)
	}
	if strings.Join(n1.DNSNames, ",") != "n1.example,localhost" || len(n1.IPAddresses) != 3 ||
		n1.IPAddresses[0].String() != "10.0.0.1" || n1.IPAddresses[1].String() != "127.0.0.1" || n1.IPAddresses[2].String() != "::1" {
		t.Fatalf("node SANs %v %v", n1.DNSNames, n1.IPAddresses)
	}
	if len(n1.ExtKeyUsage) != 2 || n1.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || n1.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("node key usage %v", n1.ExtKeyUsage)
	}
	if n1.NotAfter.Sub(n1.NotBefore) != leafValidity {
		t.Fatalf("node valid %v", n1.NotAfter.Sub(n1.NotBefore))
	}
	if m := mode(t, filepath.Join(dir, "n1.key")); m != 0o600 {
		t.Fatalf("n1.key mode %o", m)
	}

	out = mustRun(t, "certs", "client", "alice", "--dir", dir, "--cluster-id", "prod", "-o", "json")
	var written []writtenFile
	if err := json.Unmarshal([]byte(out), &written); err != nil || len(written) != 2 ||
		written[0].Path != filepath.Join(dir, "alice.crt") || written[0].Identity != "netsy://prod/client/alice" {
		t.Fatalf("client -o json: %v\n%s", err, out)
	}
	alice := readCertFile(t, filepath.Join(dir, "alice.crt"))
	if len(alice.ExtKeyUsage) != 1 || alice.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || len(alice.DNSNames)+len(alice.IPAddresses) != 0 {
		t.Fatalf("client certificate: usage %v, hosts %v %v", alice.ExtKeyUsage, alice.DNSNames, alice.IPAddresses)
	}
	if !written[0].NotAfter.Equal(alice.NotAfter) {
		t.Fatalf("printed expiry %v, certificate's %v", written[0].NotAfter, alice.NotAfter)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"certs", "client", "alice", "--dir", dir}, "alice.crt exists: refusing to overwrite it"},
		{[]string{"certs", "client", "bob", "--dir", dir, "--cluster-id", "staging"}, `--cluster-id "staging": the CA in ` + dir + ` is cluster "prod"'s`},
		{[]string{"certs", "node", "bad/name", "--dir", dir}, "is not allowed"},
		{[]string{"certs", "node", "ca", "--dir", dir}, `name "ca" is the CA's files`},
		{[]string{"certs", "node", "n9", "--dir", dir, "--hosts", "n9:2379"}, `host "n9:2379" is neither a DNS name nor an IP address`},
		{[]string{"certs", "node", "--dir", dir}, "want one NAME"},
		{[]string{"certs", "client", "x", "--dir", filepath.Join(dir, "none")}, "create the CA with `netsyctl certs init"},
		{[]string{"certs", "init", "--dir", t.TempDir()}, "--cluster-id: required"},
		{[]string{"certs", "init", "--dir", t.TempDir(), "--cluster-id", "a b"}, "--cluster-id: cluster id \"a b\""},
		{[]string{"certs", "client", "x", "--dir", dir, "--hosts", "h"}, "flag provided but not defined: -hosts"},
		{[]string{"certs", "revoke"}, "usage: netsyctl certs init"},
	} {
		if _, errOut, code := run(t, tc.args...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("netsyctl %s: exit %d %q, want %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bob.key")); !os.IsNotExist(err) {
		t.Fatal("a refused command left a key behind")
	}
}

// logBuf collects a server's log lines.
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

// tlsServer serves health and a one-member etcd Cluster service on
// 127.0.0.1 with the client-port TLS of a node of the cluster in dir.
func tlsServer(t *testing.T, opts tlsconf.ServerOptions) (addr string, logs *logBuf, stop func()) {
	t.Helper()
	logs = &logBuf{}
	lg := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug, JSONFormat: true})
	opts.Logger, opts.Clock = lg, clock.Real()
	cfg, err := tlsconf.ServerConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(tlsconf.ServerCredentials(cfg, lg)), grpc.WaitForHandlers(true),
		grpc.ChainUnaryInterceptor(tlsconf.UnaryRequestLog(lg, clock.Real())))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	pb.RegisterClusterServer(srv, &oneMember{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	var once sync.Once
	stop = func() { once.Do(func() { srv.Stop(); <-done }) }
	t.Cleanup(stop)
	return lis.Addr().String(), logs, stop
}

type oneMember struct{ pb.UnimplementedClusterServer }

func (*oneMember) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return &pb.MemberListResponse{Header: &pb.ResponseHeader{ClusterId: 7, MemberId: 9},
		Members: []*pb.Member{{ID: 9, Name: "n1", ClientURLs: []string{"https://127.0.0.1:2379"}}}}, nil
}

// healthCheck dials addr with cfg and reports whether a health check
// succeeded.
func healthCheck(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// The certificates of `netsyctl certs` make a working TLS cluster: the
// node certificate serves both ports, peers and clients are told apart, and
// another cluster's certificates are refused.
func TestCertsMakeACluster(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	mustRun(t, "certs", "init", "--dir", dir, "--cluster-id", "prod")
	for _, n := range []string{"n1", "n2", "n3"} {
		mustRun(t, "certs", "node", n, "--dir", dir, "--hosts", n+".example")
	}
	mustRun(t, "certs", "client", "alice", "--dir", dir)
	mustRun(t, "certs", "init", "--dir", other, "--cluster-id", "staging")
	mustRun(t, "certs", "client", "mallory", "--dir", other)
	mustRun(t, "certs", "node", "n1", "--dir", other)
	f := func(d, name string) string { return filepath.Join(d, name) }

	clientPort := tlsconf.ServerOptions{CertFile: f(dir, "n1.crt"), KeyFile: f(dir, "n1.key"), TrustedCAFile: f(dir, "ca.crt"),
		ClusterID: "prod", AcceptRole: tlsconf.RoleClient, RequireClientCert: true}
	peerPort := clientPort
	peerPort.AcceptRole = tlsconf.RolePeer
	clientAddr, clientLogs, stopClient := tlsServer(t, clientPort)
	peerAddr, peerLogs, stopPeer := tlsServer(t, peerPort)

	client := func(d, name string) *tls.Config {
		cfg, err := tlsconf.ClientConfig(tlsconf.ClientOptions{CertFile: f(d, name+".crt"), KeyFile: f(d, name+".key"), TrustedCAFile: f(dir, "ca.crt")})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	peer := func(name string) *tls.Config {
		cfg, err := tlsconf.ClientConfig(tlsconf.ClientOptions{CertFile: f(dir, name+".crt"), KeyFile: f(dir, name+".key"), TrustedCAFile: f(dir, "ca.crt"),
			ServerRole: tlsconf.RolePeer, ClusterID: "prod"})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if err := healthCheck(t, clientAddr, client(dir, "alice")); err != nil {
		t.Fatalf("alice on the client port: %v", err)
	}
	if err := healthCheck(t, clientAddr, client(other, "mallory")); err == nil {
		t.Fatal("another cluster's client accepted")
	}
	if err := healthCheck(t, peerAddr, peer("n2")); err != nil {
		t.Fatalf("n2 on the peer port: %v", err)
	}
	if err := healthCheck(t, peerAddr, peer("n3")); err != nil {
		t.Fatalf("n3 on the peer port: %v", err)
	}
	if err := healthCheck(t, peerAddr, client(dir, "alice")); err == nil {
		t.Fatal("a client accepted on the peer port")
	}
	if err := healthCheck(t, peerAddr, client(other, "n1")); err == nil {
		t.Fatal("another cluster's node accepted on the peer port")
	}
	stopClient()
	stopPeer()
	for _, want := range []string{`"identity":"netsy://prod/client/alice"`, `"@message":"tls handshake refused"`,
		`"identity":"netsy://staging/client/mallory"`, `"reason":"not signed by a CA of the trusted CA file ` + f(dir, "ca.crt")} {
		if !strings.Contains(clientLogs.String(), want) {
			t.Errorf("client port log lacks %s:\n%s", want, clientLogs.String())
		}
	}
	for _, want := range []string{`"identity":"netsy://prod/peer/n2"`, `"identity":"netsy://prod/peer/n3"`,
		`"reason":"a client identity is not accepted here (only peer identities)"`, `"identity":"netsy://staging/peer/n1"`} {
		if !strings.Contains(peerLogs.String(), want) {
			t.Errorf("peer port log lacks %s:\n%s", want, peerLogs.String())
		}
	}
}

// --cacert, --cert and --key reach the etcd client.
func TestClientTLSFlags(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	mustRun(t, "certs", "init", "--dir", dir, "--cluster-id", "prod")
	mustRun(t, "certs", "node", "n1", "--dir", dir)
	mustRun(t, "certs", "client", "alice", "--dir", dir)
	mustRun(t, "certs", "init", "--dir", other, "--cluster-id", "prod")
	mustRun(t, "certs", "client", "alice", "--dir", other)
	f := func(d, name string) string { return filepath.Join(d, name) }
	addr, logs, stop := tlsServer(t, tlsconf.ServerOptions{CertFile: f(dir, "n1.crt"), KeyFile: f(dir, "n1.key"),
		TrustedCAFile: f(dir, "ca.crt"), ClusterID: "prod", AcceptRole: tlsconf.RoleClient, RequireClientCert: true})

	out := mustRun(t, "members", "--endpoints", addr, "--cacert", f(dir, "ca.crt"), "--cert", f(dir, "alice.crt"), "--key", f(dir, "alice.key"), "-o", "json")
	var rows []memberRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].Name != "n1" {
		t.Fatalf("members over TLS: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no client certificate", []string{"--cacert", f(dir, "ca.crt")}, "member list from " + addr},
		{"another CA's client", []string{"--cacert", f(dir, "ca.crt"), "--cert", f(other, "alice.crt"), "--key", f(other, "alice.key")}, "member list from " + addr},
		{"server not trusted", []string{"--cacert", f(other, "ca.crt"), "--cert", f(dir, "alice.crt"), "--key", f(dir, "alice.key")}, "member list from " + addr},
		{"plaintext", nil, "member list from " + addr},
		{"cert without key", []string{"--cert", f(dir, "alice.crt")}, "--cert and --key: give both or neither"},
		{"missing CA file", []string{"--cacert", f(dir, "nope.crt")}, "--cacert/--cert/--key: tls client: open " + f(dir, "nope.crt")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"members", "--endpoints", addr, "--timeout", "1s"}, tc.args...)
			if _, errOut, code := run(t, args...); code != 1 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d %q, want failure with %q", code, errOut, tc.want)
			}
		})
	}
	stop()
	e := logs.String()
	if !strings.Contains(e, `"@message":"request"`) || !strings.Contains(e, `"identity":"netsy://prod/client/alice"`) ||
		!strings.Contains(e, `"method":"/etcdserverpb.Cluster/MemberList"`) {
		t.Fatalf("the request log lacks alice's MemberList:\n%s", e)
	}
	for _, want := range []string{`"identity":"no certificate","reason":"a certificate is required"`,
		`"reason":"not signed by a CA of the trusted CA file ` + f(dir, "ca.crt"), "first record does not look like a TLS handshake"} {
		if !strings.Contains(e, want) {
			t.Errorf("server log lacks %s:\n%s", want, e)
		}
	}
	if n := strings.Count(e, `"@message":"request"`); n != 1 {
		t.Errorf("%d requests served, want alice's alone:\n%s", n, e)
	}
}

// etcdctl takes the same certificates with the same flags.
func TestCertsWorkWithEtcdctl(t *testing.T) {
	etcdctl := procutil.EtcdctlPath(t)
	dir := t.TempDir()
	mustRun(t, "certs", "init", "--dir", dir, "--cluster-id", "prod")
	mustRun(t, "certs", "node", "n1", "--dir", dir)
	mustRun(t, "certs", "client", "alice", "--dir", dir)
	f := func(name string) string { return filepath.Join(dir, name) }
	addr, logs, stop := tlsServer(t, tlsconf.ServerOptions{CertFile: f("n1.crt"), KeyFile: f("n1.key"),
		TrustedCAFile: f("ca.crt"), ClusterID: "prod", AcceptRole: tlsconf.RoleClient, RequireClientCert: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, etcdctl, "--endpoints", "https://"+addr, "--cacert", f("ca.crt"),
		"--cert", f("alice.crt"), "--key", f("alice.key"), "member", "list")
	cmd.Env = []string{"ETCDCTL_API=3"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "n1") {
		t.Fatalf("etcdctl member list: %v\n%s", err, out)
	}
	stop()
	if !strings.Contains(logs.String(), `"identity":"netsy://prod/client/alice"`) {
		t.Fatalf("the request log lacks alice:\n%s", logs.String())
	}
}
