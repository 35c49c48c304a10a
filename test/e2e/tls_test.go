//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
	"github.com/netsy-io/netsy/internal/tlsconf"
)

// pki is a directory of certificates for cluster "netsy": the CA, nodes
// n1, n2, n3 and clients app and kube-apiserver made by the `netsyctl
// certs` commands of docs/security.md, run as written, and the ones no
// operator should have (expired, another CA, another cluster's), made
// here.
type pki struct {
	dir string
	ca  *tlsconf.CA
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

func makePKI(t *testing.T) pki {
	t.Helper()
	block := docFileBlock(t, "security.md", "certs")
	work := t.TempDir()
	bin := t.TempDir()
	if err := os.Symlink(procutil.BuildNetsyctl(t), filepath.Join(bin, "netsyctl")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+block)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the certs block of docs/security.md: %v\n%s\n--- output\n%s", err, block, out)
	}
	p := pki{dir: filepath.Join(work, "pki")}
	for _, name := range []string{"ca", "n1", "n2", "n3", "app", "kube-apiserver"} {
		for _, ext := range []string{".crt", ".key"} {
			if _, err := os.Stat(p.path(name + ext)); err != nil {
				t.Fatalf("docs/security.md's certs block made no %s: %v", name+ext, err)
			}
		}
	}
	var err error
	if p.ca, err = tlsconf.LoadCA(p.path("ca.crt"), p.path("ca.key")); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p.issue(t, p.ca, "late", tlsconf.Leaf{Identity: tlsconf.Identity{ClusterID: "netsy", Role: tlsconf.RoleClient, Name: "late"},
		NotBefore: now.Add(-48 * time.Hour), Validity: 24 * time.Hour, ClientAuth: true})
	p.issue(t, p.ca, "foreign", tlsconf.Leaf{Identity: tlsconf.Identity{ClusterID: "other", Role: tlsconf.RolePeer, Name: "n9"},
		NotBefore: now.Add(-time.Hour), Validity: 24 * time.Hour, ServerAuth: true, ClientAuth: true, AnyCluster: true})
	stranger, err := tlsconf.NewCA("netsy", now.Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p.issue(t, stranger, "stranger", tlsconf.Leaf{Identity: tlsconf.Identity{ClusterID: "netsy", Role: tlsconf.RoleClient, Name: "stranger"},
		NotBefore: now.Add(-time.Hour), Validity: 24 * time.Hour, ClientAuth: true})
	return p
}

// issue writes name.crt and name.key, the key first and each by rename,
// as a rotation would; it returns the certificate.
func (p pki) issue(t *testing.T, ca *tlsconf.CA, name string, l tlsconf.Leaf) *x509.Certificate {
	t.Helper()
	cert, certPEM, keyPEM, err := ca.Issue(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{name + ".key", keyPEM}, {name + ".crt", certPEM}} {
		tmp := p.path(f.name + ".new")
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p.path(f.name)); err != nil {
			t.Fatal(err)
		}
	}
	return cert
}

// tlsConfig is a client's TLS holding name's certificate ("" for none),
// verifying the server against the cluster's CA.
func (p pki) tlsConfig(t *testing.T, name string) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.Cert)
	// h2, as gRPC clients offer: a gRPC server closes a connection that
	// did not negotiate it.
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}}
	if name != "" {
		kp, err := tls.LoadX509KeyPair(p.path(name+".crt"), p.path(name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg
}

// handshake dials addr with TLS and reads once: with TLS 1.3 a server's
// verdict on the client's certificate arrives after the client's side of
// the handshake is done. It returns the connection's state and the error
// of the handshake or of the read; a read that only times out is not an
// error (the server accepted the client and waits for it to speak).
func handshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		err = nil
	}
	return conn.ConnectionState(), err
}

// tlsCluster is a cluster with mutual TLS on both ports.
type tlsCluster struct {
	*cluster
	pki pki
}

func (c *tlsCluster) endpoint(id string) string { return "https://" + c.nodes[id].ClientAddr }

// etcdctl is the pinned etcdctl against node id with the app's client
// certificate.
func (c *tlsCluster) etcdctl(id string) *ctl {
	return &ctl{t: c.t, bin: procutil.EtcdctlPath(c.t), endpoint: c.endpoint(id)}
}

func (c *tlsCluster) certArgs(name string) []string {
	return []string{"--cacert=" + c.pki.path("ca.crt"), "--cert=" + c.pki.path(name+".crt"), "--key=" + c.pki.path(name+".key")}
}

// startTLSCluster starts n nodes on MinIO with mutual TLS on both ports,
// the shared settings in a config file and each node's certificate in its
// own flags.
func startTLSCluster(t *testing.T, n int) *tlsCluster {
	t.Helper()
	var ids []string
	for i := 1; i <= n; i++ {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	p := makePKI(t)
	srv := miniotest.Start(t)
	file := filepath.Join(t.TempDir(), "netsy.yaml")
	config := fmt.Sprintf(`# shared by every node
cluster-id: netsy
storage: s3://%s/tls
s3-endpoint: %s
s3-region: %s
s3-path-style: true
elector-lease: %s
elector-renew: 1s
trusted-ca-file: %s
client-cert-auth: true
peer-trusted-ca-file: %s
`, srv.Bucket, srv.Endpoint, srv.Region, clusterElectorLease, p.path("ca.crt"), p.path("ca.crt"))
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
	c := &tlsCluster{cluster: &cluster{t: t, nodes: map[string]*procutil.Server{}}, pki: p}
	for _, id := range ids {
		crt, key := p.path(id+".crt"), p.path(id+".key")
		c.nodes[id] = procutil.StartNetsy(t, procutil.Options{Env: env, Args: []string{
			"--node-id", id, "--config-file", file,
			"--cert-file", crt, "--key-file", key, "--peer-cert-file", crt, "--peer-key-file", key,
		}})
	}
	c.waitState(30*time.Second, func(v clusterview.View) bool {
		return v.Primary != nil && v.RegisteredNodes == uint32(n)
	})
	return c
}

// logLine waits until node id's log has a line matching every pattern.
func (c *tlsCluster) logLine(id string, patterns ...string) string {
	c.t.Helper()
	var res []*regexp.Regexp
	for _, p := range patterns {
		res = append(res, regexp.MustCompile(p))
	}
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(c.nodes[id].LogPath)
	lines:
		for _, line := range strings.Split(string(data), "\n") {
			for _, re := range res {
				if !re.MatchString(line) {
					continue lines
				}
			}
			return line
		}
	}
	c.t.Fatalf("%s logged no line matching %q; last lines:\n%s", id, patterns, c.nodes[id].LogTail(20))
	return ""
}

// TestTLSCluster runs three nodes on MinIO with mutual TLS on both ports
// and checks, against the running processes: etcdctl with a client
// certificate on every node (writes through a replica are forwarded to
// the Primary over the peer port's TLS), netsyctl, each refusal with its
// error and log line, the certificate expiry metric, kube-apiserver with
// --etcd-cafile/--etcd-certfile/--etcd-keyfile, the Kubernetes manifests
// by a server-side dry run, and a certificate rotated on disk.
func TestTLSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO, three nodes and kube-apiserver")
	}
	skipUnlessNetsy(t)
	c := startTLSCluster(t, 3)
	_, primary := c.roles()
	replica := c.other(primary)

	t.Run("etcdctl on every node", func(t *testing.T) {
		for _, id := range c.running() {
			c.etcdctl(id).ok(append(c.certArgs("app"), "put", "tls/"+id, "through "+id)...)
		}
		for _, id := range c.running() {
			out := c.etcdctl(id).ok(append(c.certArgs("app"), "get", "tls/", "--prefix", "--print-value-only")...)
			for _, via := range c.running() {
				if !strings.Contains(out, "through "+via) {
					t.Fatalf("get on %s lacks the write through %s:\n%s", id, via, out)
				}
			}
		}
	})

	t.Run("netsyctl", func(t *testing.T) {
		args := []string{"cluster-state", "--endpoints", c.nodes[replica].ClientAddr,
			"--cacert", c.pki.path("ca.crt"), "--cert", c.pki.path("app.crt"), "--key", c.pki.path("app.key"),
			"--peer-cert", c.pki.path(replica + ".crt"), "--peer-key", c.pki.path(replica + ".key"), "-o", "json"}
		out, err := exec.Command(procutil.BuildNetsyctl(t), args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"node_id": "n3"`) || !strings.Contains(string(out), `"node_id": "`+primary+`"`) {
			t.Fatalf("netsyctl cluster-state over TLS: %v\n%s", err, out)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		node := c.nodes[replica]
		cases := []struct {
			name, addr, cert string
			// logged: the node's log line names the identity and the reason.
			identity, reason string
		}{
			{"no certificate", node.ClientAddr, "", `identity="no certificate"`, `reason="a certificate is required"`},
			{"another CA", node.ClientAddr, "stranger", `identity=netsy://netsy/client/stranger`,
				`reason="not signed by a CA of the trusted CA file [^ ]*ca.crt`},
			{"a client certificate on the peer port", node.PeerAddr, "app", `by="peer port" identity=netsy://netsy/client/app`,
				`reason="a client identity is not accepted here \(only peer identities\)"`},
			{"a peer certificate of another cluster id", node.PeerAddr, "foreign", `by="peer port" identity=netsy://other/peer/n9`,
				`reason="cluster id \\"other\\" is not this cluster's \(\\"netsy\\"\)"`},
			{"an expired certificate", node.ClientAddr, "late", `identity=netsy://netsy/client/late`,
				`reason="certificate expired at [0-9TZ:-]+ \(now `},
		}
		for _, tc := range cases {
			_, err := handshake(tc.addr, c.pki.tlsConfig(t, tc.cert))
			if err == nil || !strings.Contains(err.Error(), "remote error: tls: bad certificate") {
				t.Errorf("%s: %v, want the server's bad_certificate alert", tc.name, err)
				continue
			}
			line := c.logLine(replica, `tls handshake refused`, regexp.QuoteMeta(tc.identity), tc.reason)
			t.Logf("%s: client got %q; node logged %s", tc.name, err, line)
		}
		// The app's certificate passes where the others failed.
		if st, err := handshake(node.ClientAddr, c.pki.tlsConfig(t, "app")); err != nil || st.Version != tls.VersionTLS13 {
			t.Fatalf("the app's certificate: %v (version %#x)", err, st.Version)
		}
		// TLS 1.2 is not offered unless --tls-min-version 1.2 asks for it.
		old := c.pki.tlsConfig(t, "app")
		old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		if _, err := handshake(node.ClientAddr, old); err == nil || !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("TLS 1.2 client: %v, want a protocol version alert", err)
		}

		// Plaintext to the TLS ports: an etcd client without TLS gets no
		// answer, and the node logs the non-TLS handshake.
		plain, err := clientv3.New(clientv3.Config{Endpoints: []string{node.ClientAddr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if _, err := plain.Get(ctx, "tls/"); err == nil {
			t.Fatal("the client port answered a plaintext client")
		} else {
			t.Logf("plaintext client: %v", err)
		}
		c.logLine(replica, `tls handshake failed`, `first record does not look like a TLS handshake`)
		conn, err := net.DialTimeout("tcp", node.PeerAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if n, err := conn.Read(make([]byte, 64)); n > 0 || err == nil {
			t.Fatalf("the peer port answered a plaintext HTTP/2 client (%d bytes, %v)", n, err)
		}
		c.logLine(replica, `tls handshake failed`, `remote=127.0.0.1:[0-9]+`, `first record does not look like a TLS handshake`)
	})

	t.Run("expiry metric", func(t *testing.T) {
		resp, err := http.Get("http://" + c.nodes[replica].HTTPAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cert, err := tls.LoadX509KeyPair(c.pki.path(replica+".crt"), c.pki.path(replica+".key"))
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(cert.Certificate[0])
		series := fmt.Sprintf(`netsy_tls_certificate_expiry_seconds{file=%q} `, c.pki.path(replica+".crt"))
		var got float64 = -1
		for _, l := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, series); ok {
				got, _ = strconv.ParseFloat(v, 64)
			}
		}
		if got != float64(leaf.NotAfter.Unix()) {
			t.Fatalf("%s= %v, want %d (the certificate's NotAfter):\n%s", series, got, leaf.NotAfter.Unix(), grepLines(string(body), "netsy_tls"))
		}
	})

	t.Run("kube-apiserver", func(t *testing.T) {
		k := startKubeAPIServer(t, c)
		k.kubectl("create", "configmap", "e2e-1", "--from-literal=k=v1")
		if out := k.kubectl("get", "configmaps", "-o", "name"); !strings.Contains(out, "configmap/e2e-1\n") {
			t.Fatalf("list lacks e2e-1:\n%s", out)
		}
		// The watch starts from the list it prints first, so it sees what
		// is created once the list is out.
		watch := k.watch("get", "configmaps", "--watch", "-o", "name")
		watch.expect("configmap/e2e-1")
		k.kubectl("create", "configmap", "e2e-2", "--from-literal=k=v2")
		watch.expect("configmap/e2e-2")
		// What kube-apiserver stored is in Netsy, read on another node.
		out := c.etcdctl(primary).ok(append(c.certArgs("app"), "get", "/registry/configmaps/default/", "--prefix", "--keys-only")...)
		for _, want := range []string{"/registry/configmaps/default/e2e-1", "/registry/configmaps/default/e2e-2"} {
			if !strings.Contains(out, want+"\n") {
				t.Fatalf("Netsy lacks %s:\n%s", want, out)
			}
		}

		// The deployment manifests, checked by the apiserver itself.
		root, err := procutil.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		out = k.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", filepath.Join(root, "deploy", "kubernetes"))
		for _, want := range []string{"configmap/netsy-config", "secret/netsy-s3", "secret/netsy-tls", "service/netsy",
			"service/netsy-client", "statefulset.apps/netsy", "poddisruptionbudget.policy/netsy"} {
			if !strings.Contains(out, want+" created (server dry run)\n") {
				t.Errorf("kubectl apply --dry-run=server: no %s:\n%s", want, out)
			}
		}
		// The Helm chart with every optional feature on (helm_test.go).
		dryRunHelmChart(t, k)
	})

	// Last: it replaces the replica's certificate.
	t.Run("rotation", func(t *testing.T) {
		before, err := handshake(c.nodes[replica].ClientAddr, c.pki.tlsConfig(t, "app"))
		if err != nil {
			t.Fatal(err)
		}
		rotated := c.pki.issue(t, c.pki.ca, replica, tlsconf.Leaf{
			Identity:  tlsconf.Identity{ClusterID: "netsy", Role: tlsconf.RolePeer, Name: replica},
			Hosts:     []string{"localhost", "127.0.0.1", "::1"},
			NotBefore: time.Now().Add(-time.Minute), Validity: 48 * time.Hour, ServerAuth: true, ClientAuth: true,
		})
		if rotated.SerialNumber.Cmp(before.PeerCertificates[0].SerialNumber) == 0 {
			t.Fatal("the new certificate has the old serial")
		}
		// A handshake looks at the files when the last look is a second
		// old (tlsconf.CheckInterval): allow a few.
		var served *big.Int
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(100 * time.Millisecond) {
			st, err := handshake(c.nodes[replica].ClientAddr, c.pki.tlsConfig(t, "app"))
			if err != nil {
				t.Fatal(err)
			}
			if served = st.PeerCertificates[0].SerialNumber; served.Cmp(rotated.SerialNumber) == 0 {
				break
			}
		}
		if served.Cmp(rotated.SerialNumber) != 0 {
			t.Fatalf("still serving serial %x after the rotation to %x", served, rotated.SerialNumber)
		}
		// The peer port serves it too, and the node still works with its
		// peers: a write through it reaches the Primary.
		st, err := handshake(c.nodes[replica].PeerAddr, c.pki.tlsConfig(t, replica))
		if err != nil || st.PeerCertificates[0].SerialNumber.Cmp(rotated.SerialNumber) != 0 {
			t.Fatalf("peer port after the rotation: %v", err)
		}
		c.etcdctl(replica).ok(append(c.certArgs("app"), "put", "tls/rotated", "yes")...)
	})
}

// TestTLSStartup checks, on the netsy process, what the operator is told
// before anything listens: a plaintext port on an address other than
// loopback is refused with the flag to give, --insecure-plaintext lets it
// start, a config file's unknown key is named with its line, and
// --print-config shows flag > environment > file > default.
func TestTLSStartup(t *testing.T) {
	skipUnlessNetsy(t)
	netsy := procutil.BuildNetsy(t)
	run := func(env []string, args ...string) (stdout, stderr string, err error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, netsy, args...)
		cmd.Env = append(os.Environ(), env...)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}
	exitCode := func(err error) int {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return -1
	}

	t.Run("plaintext on a non-loopback address", func(t *testing.T) {
		for _, tc := range []struct {
			flag, advertise, scheme, want string
		}{
			{"--client-addr", "--advertise-client", "http://", "plaintext is served only on loopback addresses: give --cert-file and --key-file for TLS, or --insecure-plaintext"},
			{"--peer-addr", "--advertise-peer", "", "plaintext is served only on loopback addresses: give --peer-cert-file, --peer-key-file and --peer-trusted-ca-file"},
		} {
			port := procutil.FreePort(t)
			addr := fmt.Sprintf("0.0.0.0:%d", port)
			_, stderr, err := run(nil, "--data-dir", t.TempDir(), tc.flag, addr, tc.advertise, fmt.Sprintf("%s127.0.0.1:%d", tc.scheme, port))
			if exitCode(err) != 2 || !strings.Contains(stderr, tc.flag+" "+addr+": "+tc.want) {
				t.Fatalf("netsy %s %s: %v (exit %d), stderr:\n%s", tc.flag, addr, err, exitCode(err), stderr)
			}
			// Nothing was left listening.
			if conn, err := net.DialTimeout("tcp", strings.Replace(addr, "0.0.0.0", "127.0.0.1", 1), time.Second); err == nil {
				conn.Close()
				t.Fatalf("%s is listening after the refusal", addr)
			}
		}
		// --insecure-plaintext means it: the node starts and serves.
		addr := fmt.Sprintf("0.0.0.0:%d", procutil.FreePort(t))
		srv := procutil.StartNetsy(t, procutil.Options{Args: []string{"--client-addr", addr, "--insecure-plaintext",
			"--advertise-client", "http://" + strings.Replace(addr, "0.0.0.0", "127.0.0.1", 1)}})
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{strings.Replace(addr, "0.0.0.0", "127.0.0.1", 1)},
			DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, "plain", "on purpose"); err != nil {
			t.Fatalf("put to %s with --insecure-plaintext: %v\n%s", addr, err, srv.LogTail(20))
		}
	})

	t.Run("config file", func(t *testing.T) {
		dir := t.TempDir()
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte("log-level: info\n# etcd's name, not ours\nlisten-client-urls: http://127.0.0.1:2379\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, err := run(nil, "--data-dir", t.TempDir(), "--config-file", bad)
		if exitCode(err) != 2 || !strings.Contains(stderr, bad+`:3: unknown key "listen-client-urls"`) {
			t.Fatalf("unknown key: %v (exit %d), stderr:\n%s", err, exitCode(err), stderr)
		}

		good := filepath.Join(dir, "netsy.yaml")
		if err := os.WriteFile(good, []byte("log-level: warn\nquorum: 0\nname: from-file\nsnapshot-keep: 7\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, err := run([]string{"NETSY_LOG_LEVEL=error", "NETSY_QUORUM=1"},
			"--config-file", good, "--print-config", "--name", "from-flag", "--quorum", "-1")
		if err != nil {
			t.Fatalf("--print-config: %v\n%s", err, stderr)
		}
		for _, line := range []string{
			"name: from-flag # flag",                 // flag over file
			"quorum: -1 # flag",                      // flag over env and file
			"log-level: error # env NETSY_LOG_LEVEL", // env over file
			"snapshot-keep: 7 # file " + good + ":4", // file over default
			"client-addr: 127.0.0.1:2379 # default",  // default
		} {
			if !strings.Contains(stdout, line+"\n") {
				t.Errorf("--print-config lacks %q:\n%s", line, stdout)
			}
		}
	})
}

// docFileBlock returns the shell block of docs/<file> between
// "<!-- begin tested: name -->" and "<!-- end tested -->", without its
// code fence.
func docFileBlock(t *testing.T, file, name string) string {
	t.Helper()
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", file))
	if err != nil {
		t.Fatal(err)
	}
	begin := "<!-- begin tested: " + name + " -->"
	_, rest, ok := strings.Cut(string(doc), begin)
	if !ok {
		t.Fatalf("docs/%s has no %q", file, begin)
	}
	block, _, ok := strings.Cut(rest, "<!-- end tested -->")
	if !ok {
		t.Fatalf("docs/%s: %q is not closed", file, begin)
	}
	body, ok := strings.CutPrefix(strings.TrimSpace(block), "```sh\n")
	if !ok || !strings.HasSuffix(body, "```") {
		t.Fatalf("docs/%s: the %s block is not one ```sh fence:\n%s", file, name, block)
	}
	return strings.TrimSuffix(body, "```")
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// kubeAPIServer is a kube-apiserver process storing in a TLS Netsy cluster.
type kubeAPIServer struct {
	t          *testing.T
	kubectlBin string
	kubeconfig string
	log        string
}

func startKubeAPIServer(t *testing.T, c *tlsCluster) *kubeAPIServer {
	t.Helper()
	dir, err := procutil.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	write := func(name, data string) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	saKey := write("sa.key", string(keyPEM))
	saPub := write("sa.pub", string(pubPEM))
	tokens := write("tokens.csv", "e2e-admin-token,admin,admin,system:masters\n")
	port := procutil.FreePort(t)
	var endpoints []string
	for _, id := range c.running() {
		endpoints = append(endpoints, c.endpoint(id))
	}
	k := &kubeAPIServer{t: t, kubectlBin: filepath.Join(dir, "kubectl"), log: filepath.Join(work, "kube-apiserver.log")}
	k.kubeconfig = write("kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority: %s
users:
- name: admin
  user:
    token: e2e-admin-token
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
`, port, filepath.Join(work, "certs", "apiserver.crt")))
	logf, err := os.Create(k.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "kube-apiserver"),
		"--etcd-servers="+strings.Join(endpoints, ","),
		"--etcd-cafile="+c.pki.path("ca.crt"),
		"--etcd-certfile="+c.pki.path("kube-apiserver.crt"),
		"--etcd-keyfile="+c.pki.path("kube-apiserver.key"),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir="+filepath.Join(work, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC", "--token-auth-file="+tokens,
		"--profiling=false")
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := procutil.StartTied(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			data, _ := os.ReadFile(k.log)
			t.Logf("kube-apiserver log tail:\n%s", tail(string(data), 60))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/readyz", port), nil)
		req.Header.Set("Authorization", "Bearer e2e-admin-token")
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			data, _ := os.ReadFile(k.log)
			t.Fatalf("kube-apiserver exited: %v\n%s", err, tail(string(data), 60))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready within 90s")
		}
	}
	return k
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (k *kubeAPIServer) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, k.kubectlBin, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	return cmd
}

// kubectl runs kubectl and returns its output, failing the test on an
// error.
func (k *kubeAPIServer) kubectl(args ...string) string {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(k.t.Context(), 60*time.Second)
	defer cancel()
	out, err := k.command(ctx, args...).CombinedOutput()
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubeWatch is a running `kubectl get --watch`.
type kubeWatch struct {
	t     *testing.T
	lines chan string
}

func (k *kubeAPIServer) watch(args ...string) *kubeWatch {
	k.t.Helper()
	ctx, cancel := context.WithCancel(k.t.Context())
	cmd := k.command(ctx, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		k.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	done, err := procutil.StartTied(cmd)
	if err != nil {
		k.t.Fatal(err)
	}
	w := &kubeWatch{t: k.t, lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	k.t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *kubeWatch) expect(line string) {
	w.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				w.t.Fatalf("the watch ended before %q", line)
			}
			if l == line {
				return
			}
			w.t.Logf("watch: %s", l)
		case <-timeout:
			w.t.Fatalf("the watch did not report %q within 30s", line)
		}
	}
}
