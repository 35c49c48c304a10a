//go:build e2e

// Package e2e drives real server processes with real clients: the pinned
// etcdctl binary and go.etcd.io/etcd/client/v3. Every test runs unchanged
// against netsy or against etcd (NETSY_E2E_TARGET=netsy|etcd), so each
// expectation is first proven on etcd and then holds netsy to it.
//
// The files carry the e2e build tag so that `go test ./...` on a shared
// machine does not start servers; run them with `go test -tags e2e`.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// parallel: a test that calls t.Parallel() (marked "see parallel in
// main_test.go") spends its time waiting on its servers (restarts, builds,
// restores) rather than computing, and asserts no latency: no "within N s",
// no time-to-recover, no lease or interval measured. go test starts such tests
// only after every serial test has ended, and runs up to -parallel of them at
// once, so the timed tests (failover, partitions, linearizability, outages)
// still run alone on the machine. A test that times anything stays serial.

// target is the server implementation under test, fixed by TestMain.
var target procutil.Kind

func TestMain(m *testing.M) {
	switch v := os.Getenv("NETSY_E2E_TARGET"); v {
	case "", "netsy":
		target = procutil.KindNetsy
	case "etcd":
		target = procutil.KindEtcd
	default:
		fmt.Fprintf(os.Stderr, "NETSY_E2E_TARGET=%q: want netsy or etcd\n", v)
		os.Exit(2)
	}
	// Build up front: a broken build is reported once instead of by every
	// test, and compile time is not charged to the first test's deadlines.
	if _, err := procutil.EtcdBinDir(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if target == procutil.KindNetsy {
		for _, build := range []func() (string, error){procutil.NetsyBinary, procutil.NetsyctlBinary} {
			if _, err := build(); err != nil {
				fmt.Fprintln(os.Stderr, "e2e:", err)
				os.Exit(1)
			}
		}
	}
	code := m.Run()
	if pids := procutil.KillAll(); len(pids) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: killed server processes a test left running: %v\n", pids)
		if code == 0 {
			code = 1
		}
	}
	procutil.CleanupBuilds()
	os.Exit(code)
}

// startServer starts a fresh single-node server of the target kind with its
// own data directory. It is stopped when the test ends. With
// NETSY_E2E_REPLICA=1 (netsy only) it starts a 3-node cluster instead and
// returns a node that is not the Primary, so the suite runs against a
// replica's endpoint.
func startServer(t *testing.T) *procutil.Server {
	t.Helper()
	if replicaMode() {
		return startReplica(t)
	}
	return procutil.Start(t, target, procutil.Options{})
}

// startReplica starts three nodes on one shared file store and returns a
// replica, once the cluster has a Primary.
func startReplica(t *testing.T) *procutil.Server {
	t.Helper()
	c := startCluster(t, 3, nil)
	v := c.waitState(30*time.Second, func(v clusterview.View) bool { return v.Primary != nil })
	s := c.nodes[c.other(v.Primary.NodeID)]
	// Membership reaches the replica with the Elector's next push or
	// heartbeat answer.
	cli := newClient(t, s)
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		if ml, err := cli.MemberList(t.Context()); err == nil && len(ml.Members) == 3 {
			break
		}
	}
	return s
}

// replicaMode reports whether startServer returns a replica of a cluster.
func replicaMode() bool {
	return target == procutil.KindNetsy && os.Getenv("NETSY_E2E_REPLICA") == "1"
}

// newClient returns a client/v3 client for s, closed when the test ends.
func newClient(t *testing.T, s *procutil.Server) *clientv3.Client {
	t.Helper()
	return newClientEndpoints(t, []string{s.Endpoint})
}

// newClientEndpoints is newClient for several endpoints.
func newClientEndpoints(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 10 * time.Second,
		// The client logs every retried call; the crash test makes
		// thousands on purpose.
		Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			// gRPC's default reconnect backoff grows to two minutes; a test
			// that restarts its server many times needs the client back
			// within a fraction of a second.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay:  20 * time.Millisecond,
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   300 * time.Millisecond,
				},
				MinConnectTimeout: time.Second,
			}),
		},
	})
	if err != nil {
		t.Fatalf("client for %v: %v", eps, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// opCtx bounds one client call; generous because the machine is shared.
func opCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustPut writes key=value and returns the revision of the write.
func mustPut(t *testing.T, cli *clientv3.Client, key, value string, opts ...clientv3.OpOption) int64 {
	t.Helper()
	resp, err := cli.Put(opCtx(t), key, value, opts...)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

// currentRev returns the store revision as seen by a linearizable read.
func currentRev(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(opCtx(t), "\x00never-written")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	return resp.Header.Revision
}
