package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/node"
)

// A node with mutual TLS on both ports, its certificates made by `netsyctl
// certs`: the client commands take --cacert, --cert and --key; the peer
// commands a peer certificate with --peer-cert and --peer-key, and say so
// when it is missing.
func TestCommandsOverTLS(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"certs", "init", "--dir", dir, "--cluster-id", "c1"},
		{"certs", "node", "n1", "--dir", dir},
		{"certs", "client", "ops", "--dir", dir},
	} {
		if _, errOut, code := run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.NodeID, cfg.ClusterID = "n1", "c1"
	cfg.TLS = config.TLS{CertFile: f("n1.crt"), KeyFile: f("n1.key"), TrustedCAFile: f("ca.crt"), ClientCertAuth: true,
		PeerCertFile: f("n1.crt"), PeerKeyFile: f("n1.key"), PeerTrustedCAFile: f("ca.crt"), MinVersion: "1.3"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.StartWith(ctx, cfg, hclog.NewNullLogger(), node.Deps{Clock: clock.Real(), WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })

	clientTLS := []string{"--endpoints", n.ClientAddr(), "--cacert", f("ca.crt"), "--cert", f("ops.crt"), "--key", f("ops.key"), "--timeout", "5s"}
	peerTLS := []string{"--peer-cert", f("n1.crt"), "--peer-key", f("n1.key")}

	out, errOut, code := run(t, append([]string{"members"}, clientTLS...)...)
	if code != 0 || !strings.Contains(out, "n1") {
		t.Fatalf("members over TLS: exit %d: %s\n%s", code, errOut, out)
	}
	out, errOut, code = run(t, append(append([]string{"cluster-state"}, clientTLS...), peerTLS...)...)
	if code != 0 || !strings.Contains(out, "n1") || !strings.Contains(out, "Active") {
		t.Fatalf("cluster-state over TLS: exit %d: %s\n%s", code, errOut, out)
	}
	// Straight to the peer port, verified with --peer-cacert.
	out, errOut, code = run(t, append([]string{"cluster-state", "--peer-endpoints", cfg.PeerAddr, "--peer-cacert", f("ca.crt"), "--timeout", "5s"}, peerTLS...)...)
	if code != 0 || !strings.Contains(out, "Active") {
		t.Fatalf("cluster-state on the peer port: exit %d: %s\n%s", code, errOut, out)
	}

	_, errOut, code = run(t, append([]string{"cluster-state"}, clientTLS...)...)
	if code == 0 || !strings.Contains(errOut, "give --peer-cert and --peer-key") {
		t.Fatalf("cluster-state without a peer certificate: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, append(append([]string{"cluster-state"}, clientTLS...), "--peer-cert", f("ops.crt"), "--peer-key", f("ops.key"))...)
	if code == 0 || !strings.Contains(errOut, "accepts only peer certificates") {
		t.Fatalf("cluster-state with a client certificate on the peer port: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, append([]string{"cluster-state", "--peer-cert", f("n1.crt")}, clientTLS...)...)
	if code == 0 || !strings.Contains(errOut, "--peer-cert and --peer-key") {
		t.Fatalf("--peer-cert without --peer-key: exit %d: %s", code, errOut)
	}
}
