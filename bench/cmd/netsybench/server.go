package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// kind is the server implementation behind a variant; it decides the flags
// a server is started with and how readiness is probed.
type kind string

const (
	kindNetsy kind = "netsy"
	kindEtcd  kind = "etcd"
	// kindT4 is t4 (github.com/t4db/t4), an S3-backed etcd-compatible
	// store, run through its binary only (scripts/build-t4.sh).
	kindT4 kind = "t4"
)

// variant is one server configuration that can sit in a column of the
// table. Adding a configuration is one entry in variants.
type variant struct {
	Name string
	Kind kind
	Args []string
	// MinIO runs the server against a fresh bucket on the MinIO the
	// harness starts.
	MinIO bool `json:",omitempty"`
	// SyncUploads marks netsy variants that acknowledge only after the
	// chunk is in object storage; their put rows report entries per PUT.
	SyncUploads bool `json:",omitempty"`
	// Nodes is the number of processes of a cluster variant (see
	// deployment); 0 and 1 are a single server.
	Nodes int `json:",omitempty"`
}

// cluster reports whether the variant runs several processes.
func (v variant) cluster() bool { return v.Nodes > 1 }

var variants = []variant{
	// Sync mode (--quorum 0) on the file object store under the data
	// directory.
	{Name: "netsy", Kind: kindNetsy, Args: []string{"--quorum", "0"}, SyncUploads: true},
	// Acknowledge on the local fsync; chunks upload in the background.
	{Name: "netsy-local", Kind: kindNetsy, Args: []string{"--quorum", "-1"}},
	// Sync mode against MinIO on loopback.
	{Name: "netsy-minio", Kind: kindNetsy, Args: []string{"--quorum", "0"}, MinIO: true, SyncUploads: true},
	{Name: "etcd", Kind: kindEtcd},
	// Three nodes on one MinIO bucket, majority quorum (the default).
	{Name: "netsy-cluster", Kind: kindNetsy, Args: []string{"--quorum", "-1"}, MinIO: true, Nodes: 3},
	// Three etcd members with etcd's defaults.
	{Name: "etcd-cluster", Kind: kindEtcd, Nodes: 3},
	// Three t4 nodes on one fresh bucket and prefix of the MinIO (the
	// leader lock is an object there too); the leader waits for a
	// quorum of follower acks before it commits.
	{Name: "t4-cluster", Kind: kindT4, Args: []string{"--follower-wait-mode", "quorum"}, MinIO: true, Nodes: 3},
}

func lookupVariant(name string) (variant, error) {
	for _, v := range variants {
		if v.Name == name {
			return v, nil
		}
	}
	var names []string
	for _, v := range variants {
		names = append(names, v.Name)
	}
	return variant{}, fmt.Errorf("unknown target %q (known: %s)", name, strings.Join(names, ", "))
}

// binaries are the server executables the harness runs.
type binaries struct {
	Netsy     string
	Netsyctl  string
	Etcd      string
	Benchmark string
	T4        string
}

// server is one server process started by the harness, with its own data
// directory and loopback ports. It can be stopped and started again on the
// same data and ports.
type server struct {
	Variant    variant
	ClientAddr string // host:port of the etcd v3 API
	HTTPAddr   string // netsy's health/metrics/pprof listener, t4's --metrics-addr
	PeerAddr   string // the peer listener of etcd, netsy and t4
	DataDir    string
	LogPath    string
	Pprof      bool // etcd: serve /debug/pprof on the client URL; t4: on HTTPAddr
	// Name is netsy's --node-id or etcd's --name; empty for a single
	// server (netsy: the host name, etcd: "bench").
	Name string
	// InitialCluster and ClusterToken are etcd's bootstrap flags for a
	// member of a cluster; empty for a single member.
	InitialCluster string
	ClusterToken   string

	bin   string
	extra []string
	env   []string // added to the harness's environment

	mu   sync.Mutex
	proc *proc
}

type proc struct {
	pid   int
	osp   *os.Process
	done  chan struct{}
	state *os.ProcessState
}

// live tracks every process the harness started so that an interrupted run
// stops them all before it exits.
var (
	liveMu sync.Mutex
	live   = map[*server]bool{}
)

func stopAllServers() {
	liveMu.Lock()
	var all []*server
	for s := range live {
		all = append(all, s)
	}
	liveMu.Unlock()
	for _, s := range all {
		_ = s.Stop()
	}
}

func newServer(v variant, bins binaries, dir string, extra []string) (*server, error) {
	s := &server{
		Variant: v,
		DataDir: filepath.Join(dir, "data"),
		LogPath: filepath.Join(dir, "server.log"),
		extra:   extra,
	}
	var err error
	if s.ClientAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	// netsy's peer listener defaults to 127.0.0.1:2380, outside the
	// harness's ports; every server gets one of its own.
	if s.PeerAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	switch v.Kind {
	case kindNetsy:
		s.bin = bins.Netsy
		if s.HTTPAddr, err = freeAddr(); err != nil {
			return nil, err
		}
	case kindEtcd:
		s.bin = bins.Etcd
	case kindT4:
		s.bin = bins.T4
		if s.HTTPAddr, err = freeAddr(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("variant %s: unknown kind %q", v.Name, v.Kind)
	}
	return s, nil
}

func (s *server) args() []string {
	var a []string
	switch s.Variant.Kind {
	case kindNetsy:
		a = []string{
			"--data-dir", s.DataDir,
			"--client-addr", s.ClientAddr,
			"--http-addr", s.HTTPAddr,
			"--peer-addr", s.PeerAddr,
			"--log-level", "warn",
		}
		if s.Name != "" {
			a = append(a, "--node-id", s.Name)
		}
	case kindEtcd:
		client := "http://" + s.ClientAddr
		peer := "http://" + s.PeerAddr
		name, initial := "bench", "bench="+peer
		if s.Name != "" {
			name, initial = s.Name, s.InitialCluster
		}
		a = []string{
			"--name", name,
			"--data-dir", s.DataDir,
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", initial,
			"--initial-cluster-state", "new",
			"--log-level", "warn",
		}
		if s.ClusterToken != "" {
			a = append(a, "--initial-cluster-token", s.ClusterToken)
		}
		if s.Pprof {
			a = append(a, "--enable-pprof")
		}
	case kindT4:
		// --peer-listen makes it a cluster node; the bucket, prefix and
		// endpoint come from minioServer.t4Args in extra.
		a = []string{"run",
			"--data-dir", s.DataDir,
			"--listen", s.ClientAddr,
			"--metrics-addr", s.HTTPAddr,
			"--peer-listen", s.PeerAddr,
			"--log-level", "warn",
		}
		if s.Name != "" {
			a = append(a, "--node-id", s.Name)
		}
		if s.Pprof {
			a = append(a, "--pprof")
		}
	}
	a = append(a, s.Variant.Args...)
	return append(a, s.extra...)
}

// label names the server in messages: the variant, and the node of a
// cluster.
func (s *server) label() string {
	if s.Name == "" {
		return s.Variant.Name
	}
	return s.Variant.Name + "/" + s.Name
}

// PprofBase is the URL prefix of the server's net/http/pprof handlers.
func (s *server) PprofBase() string {
	if s.Variant.Kind == kindEtcd {
		return "http://" + s.ClientAddr + "/debug/pprof"
	}
	return "http://" + s.HTTPAddr + "/debug/pprof"
}

// Launch starts a process without waiting for it to serve.
func (s *server) Launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		return errors.New("already running")
	}
	if err := os.MkdirAll(filepath.Dir(s.LogPath), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := s.args()
	fmt.Fprintf(logf, "=== netsybench %s: %s %s\n", time.Now().Format(time.RFC3339Nano), s.bin, strings.Join(args, " "))
	cmd := exec.Command(s.bin, args...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own process group: a terminal ^C reaches only the harness, which
	// then stops the servers in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Tied: the server is killed with the harness even if no cleanup runs.
	waited, err := procutil.StartTied(cmd)
	if err != nil {
		_ = logf.Close()
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p := &proc{pid: cmd.Process.Pid, osp: cmd.Process, done: make(chan struct{})}
	go func() {
		<-waited
		_ = logf.Close()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	s.proc = p
	liveMu.Lock()
	live[s] = true
	liveMu.Unlock()
	return nil
}

// Start launches the process and waits until its readiness probe passes.
func (s *server) Start(ctx context.Context, timeout time.Duration) error {
	if err := s.Launch(); err != nil {
		return err
	}
	if err := s.waitReady(ctx, timeout); err != nil {
		_ = s.Kill()
		return fmt.Errorf("%s: %w\nlog tail:\n%s", s.label(), err, logTail(s.LogPath, 30))
	}
	return nil
}

func (s *server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := s.current()
	hc := &http.Client{Timeout: time.Second}
	url := "http://" + s.HTTPAddr + "/readyz"
	if s.Variant.Kind == kindEtcd {
		url = "http://" + s.ClientAddr + "/health"
	}
	var last string
	for {
		kind := procutil.KindNetsy
		if s.Variant.Kind == kindEtcd {
			kind = procutil.KindEtcd
		}
		ok, detail := procutil.Probe(ctx, hc, url, kind)
		if ok {
			return nil
		}
		last = detail
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready: %v", p.state)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (last probe of %s: %s)", timeout, url, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *server) current() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// PID is the process id of the running incarnation, 0 if none.
func (s *server) PID() int {
	p := s.current()
	if p == nil || p.exited() {
		return 0
	}
	return p.pid
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits, escalating to SIGKILL after 30s. It
// reports an error when the process had to be killed or exited uncleanly.
func (s *server) Stop() error {
	p := s.current()
	defer func() {
		liveMu.Lock()
		delete(live, s)
		liveMu.Unlock()
	}()
	if p == nil || p.exited() {
		return nil
	}
	_ = p.osp.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.osp.Kill()
		<-p.done
		return fmt.Errorf("%s pid %d ignored SIGTERM for 30s; killed", s.label(), p.pid)
	}
	if !cleanExit(p.state) {
		return fmt.Errorf("%s pid %d exited after SIGTERM: %v", s.label(), p.pid, p.state)
	}
	return nil
}

// Kill sends SIGKILL and waits until the process is reaped.
func (s *server) Kill() error {
	p := s.current()
	if p == nil || p.exited() {
		return nil
	}
	_ = p.osp.Kill()
	<-p.done
	liveMu.Lock()
	delete(live, s)
	liveMu.Unlock()
	return nil
}

// cleanExit accepts status 0 and death by SIGTERM (etcd re-raises the
// signal after its orderly shutdown).
func cleanExit(st *os.ProcessState) bool {
	if st == nil {
		return false
	}
	if st.Success() {
		return true
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// Ports come from [20000, 32000): below the kernel's ephemeral range, so an
// outgoing connection cannot take a port between the probe and the
// server's bind. A port is never handed out twice in one run because a
// stopped server keeps its ports for its restart.
var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

func freeAddr() (string, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 500 {
		p := 20000 + rand.IntN(12000)
		if handedOut[p] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		handedOut[p] = true
		return addr, nil
	}
	return "", errors.New("no free port in [20000, 32000)")
}

func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procStatus reads the memory fields (in KiB) of /proc/PID/status.
func procStatus(pid int) (map[string]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasSuffix(rest, " kB") {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(rest, " kB")), 10, 64)
		if err == nil {
			out[name] = v
		}
	}
	if _, ok := out["VmRSS"]; !ok {
		return nil, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
	}
	return out, nil
}
