// Package testserver is Netsy's drop-in replacement for
// k8s.io/apiserver/pkg/storage/etcd3/testserver.
//
// test/k8s/run.sh copies this file over the upstream package inside a
// scratch copy of k8s.io/apiserver. The exported API (NewTestConfig, RunEtcd)
// is kept, so the apiserver's storage tests compile unchanged, but instead of
// embedding etcd in the test process every RunEtcd call launches an external
// server binary on a fresh data directory and fresh ports:
//
//   - NETSY_BIN: a netsy binary (flags --data-dir, --client-addr, --http-addr,
//     --peer-addr, --node-id, --progress-notify-interval, --log-level; ready when GET /readyz on the
//     http address returns 200);
//   - ETCD_BIN: a real etcd binary, used to validate the harness itself.
//
// NETSY_BIN wins when both are set. Optional environment:
//
//   - NETSY_LOG_LEVEL: --log-level passed to netsy (default "info");
//   - NETSY_CLUSTER_NODES: when > 1, each RunEtcd starts that many netsy
//     nodes sharing one file bucket (a cluster, --quorum -1 by default) and
//     returns a client of a node that is not the Primary: the suites then
//     run against a replica's endpoint;
//   - K8S_TEST_LOG_DIR: where the server log of every failed test is copied;
//   - K8S_TEST_ALLOW_ANY_START_REV: do not fail a test whose fresh server is
//     not at revision 1 (only log it);
//   - K8S_TEST_PID_FILE: every launched server PID is appended to this file so
//     the runner can stop leftovers if the test binary dies without cleanup.
//
// The embed.Config a test builds or receives from NewTestConfig is only read
// as a description of the wanted server: Dir and WatchProgressNotifyInterval
// (and UnsafeNoFsync for etcd) are honoured; an unset interval means etcd's
// default of 10 minutes; client TLS is refused.
package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

const (
	// Servers of this harness listen on 127.0.0.1 in this port range only
	// (ports from 32768 up may be taken by outgoing connections).
	portMin = 20000
	portMax = 32000

	startAttempts = 5
	readyTimeout  = 60 * time.Second
	logTailLines  = 15

	etcdDefaultProgressNotifyInterval = 10 * time.Minute
)

// NewTestConfig returns the description of a fresh single-node server: a new
// private data directory (removed when the test ends), fsync disabled and
// etcd's default settings otherwise. Ports are chosen when the server is
// launched by RunEtcd, which also fills in the client URLs.
func NewTestConfig(t testing.TB) *embed.Config {
	cfg := embed.NewConfig()
	cfg.UnsafeNoFsync = true
	cfg.Dir = t.TempDir()
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// RunEtcd launches a server described by cfg (NewTestConfig(t) when nil),
// waits until it is ready and returns a client connected to it. The server
// process is killed and its directory removed when the test ends.
func RunEtcd(t testing.TB, cfg *embed.Config) *kubernetes.Client {
	t.Helper()
	if cfg == nil {
		cfg = NewTestConfig(t)
	}
	if !cfg.ClientTLSInfo.Empty() || cfg.ClientAutoTLS {
		t.Fatal("testserver: client TLS is not supported by the external-server harness")
	}
	kind, bin := serverBinary(t)

	var srv *server
	var errs []error
	for attempt := 0; attempt < startAttempts && srv == nil; attempt++ {
		s, err := launch(t, kind, bin, cfg, attempt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		srv = s
	}
	if srv == nil {
		t.Fatalf("testserver: could not start %s: %v", kind, errors.Join(errs...))
	}

	u := url.URL{Scheme: "http", Host: srv.clientAddr}
	cfg.ListenClientUrls = []url.URL{u}
	cfg.AdvertiseClientUrls = []url.URL{u}

	client, err := kubernetes.New(clientv3.Config{
		Endpoints:   []string{u.String()},
		DialTimeout: 10 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithBlock()},
		Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		t.Fatalf("testserver: connecting to %s at %s: %v", kind, u.String(), err)
	}

	// Every test expects a brand-new store.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	resp, err := client.Client.Get(ctx, "/")
	cancel()
	if err != nil {
		t.Fatalf("testserver: first request to fresh %s failed: %v", kind, err)
	}
	if rev := resp.Header.GetRevision(); rev != 1 {
		if os.Getenv("K8S_TEST_ALLOW_ANY_START_REV") == "" {
			t.Fatalf("testserver: fresh %s reports revision %d, want 1 (etcd starts at 1; K8S_TEST_ALLOW_ANY_START_REV=1 runs on anyway)", kind, rev)
		}
		t.Logf("testserver: fresh %s reports revision %d, want 1", kind, rev)
	}

	client.KV = storagetesting.NewKVRecorder(client.KV)
	client.Kubernetes = storagetesting.NewKubernetesRecorder(client.Kubernetes)
	return client
}

func serverBinary(t testing.TB) (kind, bin string) {
	t.Helper()
	switch {
	case os.Getenv("NETSY_BIN") != "":
		kind, bin = "netsy", os.Getenv("NETSY_BIN")
	case os.Getenv("ETCD_BIN") != "":
		kind, bin = "etcd", os.Getenv("ETCD_BIN")
	default:
		t.Fatal("testserver: set NETSY_BIN (netsy) or ETCD_BIN (etcd) to the server binary to test against")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("testserver: %s binary: %v", kind, err)
	}
	return kind, bin
}

type server struct {
	clientAddr string
	procs      []*proc
}

type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	logPath string
}

// launch starts one server process. An error means the process did not
// become ready (for example a port was taken after we picked it); the
// process is already stopped then and the caller may retry.
func launch(t testing.TB, kind, bin string, cfg *embed.Config, attempt int) (*server, error) {
	runDir := filepath.Join(cfg.Dir, fmt.Sprintf("run%d", attempt))
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, err
	}
	interval := cfg.WatchProgressNotifyInterval
	if interval <= 0 {
		interval = cfg.ExperimentalWatchProgressNotifyInterval
	}
	if interval <= 0 {
		// What etcd does with an unset interval.
		interval = etcdDefaultProgressNotifyInterval
	}
	nodes := 1
	if n, err := strconv.Atoi(os.Getenv("NETSY_CLUSTER_NODES")); err == nil && n > 1 && kind == "netsy" {
		nodes = n
	}
	s := &server{}
	var httpAddrs, clientAddrs []string
	for i := range nodes {
		ports, err := pickPorts(3) // client, http (etcd: metrics), peer
		if err != nil {
			s.stop()
			return nil, err
		}
		clientAddr, httpAddr := addr(ports[0]), addr(ports[1])
		dir := runDir
		if nodes > 1 {
			dir = filepath.Join(runDir, fmt.Sprintf("n%d", i+1))
		}
		dataDir := filepath.Join(dir, "data")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			s.stop()
			return nil, err
		}
		var args []string
		switch kind {
		case "netsy":
			level := os.Getenv("NETSY_LOG_LEVEL")
			if level == "" {
				level = "info"
			}
			args = []string{
				"--data-dir", dataDir,
				"--client-addr", clientAddr,
				"--http-addr", httpAddr,
				"--progress-notify-interval", interval.String(),
				"--log-level", level,
				"--peer-addr", addr(ports[2]),
				"--node-id", "k8s",
			}
			if nodes > 1 {
				args[len(args)-1] = fmt.Sprintf("k8s-n%d", i+1)
				args = append(args, "--storage", "file://"+filepath.Join(runDir, "bucket"), "--cluster-id", "k8s")
			}
		case "etcd":
			peer := "http://" + addr(ports[2])
			client := "http://" + clientAddr
			args = []string{
				"--name", "default",
				"--data-dir", dataDir,
				"--listen-client-urls", client,
				"--advertise-client-urls", client,
				"--listen-peer-urls", peer,
				"--initial-advertise-peer-urls", peer,
				"--initial-cluster", "default=" + peer,
				"--listen-metrics-urls", "http://" + httpAddr,
				"--watch-progress-notify-interval", interval.String(),
				// A single member needs no realistic timeouts; short ones make
				// the first leader election (and so start-up) ~5x faster.
				"--heartbeat-interval", "10",
				"--election-timeout", "100",
			}
			if cfg.UnsafeNoFsync {
				args = append(args, "--unsafe-no-fsync")
			}
		}
		p, err := start(bin, args, filepath.Join(dir, "server.log"))
		if err != nil {
			s.stop()
			return nil, err
		}
		s.procs = append(s.procs, p)
		httpAddrs, clientAddrs = append(httpAddrs, httpAddr), append(clientAddrs, clientAddr)
	}
	for i, p := range s.procs {
		if err := p.waitReady("http://" + httpAddrs[i] + "/readyz"); err != nil {
			s.stop()
			return nil, fmt.Errorf("attempt %d (client %s): %w\n%s", attempt+1, clientAddrs[i], err, tail(p.logPath))
		}
	}
	s.clientAddr = clientAddrs[0]
	if nodes > 1 {
		replica, err := replicaOf(httpAddrs, clientAddrs)
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("attempt %d: %w", attempt+1, err)
		}
		s.clientAddr = replica
		t.Logf("testserver: %d-node cluster; the client uses %s, a replica", nodes, replica)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			for _, p := range s.procs {
				t.Logf("testserver: %s log saved as %s, last lines:\n%s", kind, saveLog(t, p.logPath), tail(p.logPath))
			}
		}
	})
	return s, nil
}

// start runs one server process with its output in logPath.
func start(bin string, args []string, logPath string) (*proc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Kill the server if the test binary dies without running cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	logFile.Close() // the child holds its own descriptor
	recordPID(cmd.Process.Pid)
	p := &proc{cmd: cmd, exited: make(chan struct{}), logPath: logPath}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// replicaOf asks the cluster for its Primary and returns the client
// address of another node.
func replicaOf(httpAddrs, clientAddrs []string) (string, error) {
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + httpAddrs[0] + "/cluster/leader")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var leader struct {
		Primary struct {
			ClientURLs []string `json:"client_urls"`
		} `json:"primary"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&leader); err != nil {
		return "", fmt.Errorf("/cluster/leader: %w", err)
	}
	for _, a := range clientAddrs {
		if !slices.Contains(leader.Primary.ClientURLs, "http://"+a) {
			return a, nil
		}
	}
	return "", fmt.Errorf("no node other than the Primary (%v)", leader.Primary.ClientURLs)
}

func (s *proc) waitReady(readyURL string) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyTimeout)
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		select {
		case <-s.exited:
			return fmt.Errorf("server exited before becoming ready: %v", s.waitErr)
		default:
		}
		if resp, err := hc.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				// A port collision shows up as an early exit; make sure the
				// process answering is still ours.
				select {
				case <-s.exited:
					return fmt.Errorf("server exited right after readiness: %v", s.waitErr)
				case <-time.After(5 * time.Millisecond):
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready at %s after %v", readyURL, readyTimeout)
		}
		time.Sleep(delay)
	}
}

// stop kills the servers outright: their data is thrown away anyway, and a
// graceful shutdown would wait for the streams of clients the tests never
// close (seconds per test).
func (s *server) stop() {
	for _, p := range s.procs {
		select {
		case <-p.exited:
			continue
		default:
		}
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

var (
	portMu    sync.Mutex
	handedOut = map[int]bool{}
)

// pickPorts returns n distinct ports in [portMin, portMax) that are free on
// 127.0.0.1 right now and were not handed out before by this process.
func pickPorts(n int) ([]int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("no free port in range")
		}
		p := portMin + rand.IntN(portMax-portMin)
		if handedOut[p] {
			continue
		}
		l, err := net.Listen("tcp", addr(p))
		if err != nil {
			continue
		}
		l.Close()
		handedOut[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

var pidMu sync.Mutex

func recordPID(pid int) {
	path := os.Getenv("K8S_TEST_PID_FILE")
	if path == "" {
		return
	}
	pidMu.Lock()
	defer pidMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintln(f, pid)
	f.Close()
}

func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// saveLog copies a failed test's server log to K8S_TEST_LOG_DIR and returns
// where it is.
func saveLog(t testing.TB, path string) string {
	dir := os.Getenv("K8S_TEST_LOG_DIR")
	if dir == "" {
		return path + " (removed with the test's temp dir)"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err.Error()
	}
	dst := filepath.Join(dir, name+".log")
	for i := 2; ; i++ { // one test may run several servers
		if _, err := os.Stat(dst); err != nil {
			break
		}
		dst = filepath.Join(dir, fmt.Sprintf("%s.%d.log", name, i))
	}
	if err := os.WriteFile(dst, bytes.TrimSpace(data), 0o644); err != nil {
		return err.Error()
	}
	return dst
}
