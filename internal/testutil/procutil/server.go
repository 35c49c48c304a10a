package procutil

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Kind names the server implementation a Server runs.
type Kind string

// The two implementations the harnesses compare.
const (
	KindNetsy Kind = "netsy"
	KindEtcd  Kind = "etcd"
)

// Options configure StartNetsy and StartEtcd. Zero values pick sensible
// defaults: fresh free ports, a fresh data directory under t.TempDir().
type Options struct {
	// Binary overrides the server binary (default: BuildNetsy / EtcdPath).
	Binary string
	// DataDir is reused as is, so a test can start a second server on the
	// data of a first one.
	DataDir string
	// ClientAddr is the host:port of the etcd v3 API.
	ClientAddr string
	// HTTPAddr is netsy's health and metrics listener (ignored for etcd).
	HTTPAddr string
	// PeerAddr is the peer listener of etcd and of netsy.
	PeerAddr string
	// Args are appended to the generated flags.
	Args []string
	// Env entries (KEY=VALUE) are added to the inherited environment.
	Env []string
	// ReadyTimeout bounds a start or restart (default 60s: the machine is
	// shared and a restart may replay a lot of log).
	ReadyTimeout time.Duration
	// StopTimeout is the grace between SIGTERM and SIGKILL in Stop
	// (default 10s).
	StopTimeout time.Duration
}

// Server is a running (or stopped) server process owned by one test.
// Its methods are safe for concurrent use.
type Server struct {
	Kind Kind
	// Endpoint is the client URL, e.g. "http://127.0.0.1:23456".
	Endpoint   string
	ClientAddr string
	HTTPAddr   string
	PeerAddr   string
	DataDir    string
	// LogPath collects stdout and stderr of every incarnation.
	LogPath string

	t            testing.TB
	bin          string
	extraArgs    []string
	env          []string
	readyTimeout time.Duration
	stopTimeout  time.Duration
	autoPorts    bool

	mu   sync.Mutex
	proc *process
}

type process struct {
	pid   int
	osp   *os.Process
	done  chan struct{}
	state *os.ProcessState
}

// StartNetsy starts the netsy binary and waits until GET /readyz on its HTTP
// address returns 200.
func StartNetsy(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = BuildNetsy(t)
	}
	return start(t, KindNetsy, opts)
}

// StartEtcd starts a single-member etcd and waits until its /health is true.
func StartEtcd(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = EtcdPath(t)
	}
	return start(t, KindEtcd, opts)
}

// Start starts a server of the given kind.
func Start(t testing.TB, kind Kind, opts Options) *Server {
	t.Helper()
	switch kind {
	case KindNetsy:
		return StartNetsy(t, opts)
	case KindEtcd:
		return StartEtcd(t, opts)
	}
	t.Fatalf("unknown server kind %q", kind)
	return nil
}

func start(t testing.TB, kind Kind, opts Options) *Server {
	t.Helper()
	s := &Server{
		Kind:         kind,
		DataDir:      opts.DataDir,
		ClientAddr:   opts.ClientAddr,
		HTTPAddr:     opts.HTTPAddr,
		PeerAddr:     opts.PeerAddr,
		t:            t,
		bin:          opts.Binary,
		extraArgs:    opts.Args,
		env:          opts.Env,
		readyTimeout: opts.ReadyTimeout,
		stopTimeout:  opts.StopTimeout,
		autoPorts:    opts.ClientAddr == "" && opts.HTTPAddr == "" && opts.PeerAddr == "",
	}
	if s.readyTimeout == 0 {
		s.readyTimeout = 60 * time.Second
	}
	if s.stopTimeout == 0 {
		s.stopTimeout = 10 * time.Second
	}
	// Directories are created before the cleanup below is registered, so
	// (cleanups run last-in first-out) the process is gone before its
	// directories are removed.
	if s.DataDir == "" {
		s.DataDir = filepath.Join(t.TempDir(), "data")
	}
	s.LogPath = filepath.Join(t.TempDir(), string(kind)+".log")
	if err := s.pickPorts(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Logf("procutil: stopping %s: %v", s.Kind, err)
		}
		if t.Failed() {
			t.Logf("procutil: last lines of %s log %s:\n%s", s.Kind, s.LogPath, s.LogTail(80))
		}
	})

	// A free port can be taken by another test binary between our bind test
	// and the server's bind; with ports we chose ourselves, choose again.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		err = s.launch()
		if err == nil {
			t.Logf("procutil: %s pid %d serving %s (data %s)", s.Kind, s.PID(), s.Endpoint, s.DataDir)
			return s
		}
		if !s.autoPorts || !strings.Contains(s.LogTail(20), "address already in use") {
			break
		}
		if perr := s.pickPorts(); perr != nil {
			break
		}
	}
	t.Fatalf("start %s: %v\nlog tail:\n%s", kind, err, s.LogTail(40))
	return nil
}

func (s *Server) pickPorts() error {
	if s.autoPorts {
		s.ClientAddr, s.HTTPAddr, s.PeerAddr = "", "", ""
	}
	var err error
	if s.ClientAddr == "" {
		if s.ClientAddr, err = freeAddr(); err != nil {
			return err
		}
	}
	switch s.Kind {
	case KindNetsy:
		if s.HTTPAddr == "" {
			s.HTTPAddr, err = freeAddr()
		}
		if err == nil && s.PeerAddr == "" {
			s.PeerAddr, err = freeAddr()
		}
	case KindEtcd:
		if s.PeerAddr == "" {
			s.PeerAddr, err = freeAddr()
		}
	}
	s.Endpoint = "http://" + s.ClientAddr
	return err
}

func (s *Server) args() []string {
	var a []string
	switch s.Kind {
	case KindNetsy:
		a = []string{
			"--data-dir", s.DataDir,
			"--client-addr", s.ClientAddr,
			"--http-addr", s.HTTPAddr,
			"--peer-addr", s.PeerAddr,
		}
		if !s.hasArg("--node-id") {
			// One node id per data directory, stable across restarts.
			h := fnv.New32a()
			h.Write([]byte(s.DataDir))
			a = append(a, "--node-id", fmt.Sprintf("n-%08x", h.Sum32()))
		}
	case KindEtcd:
		peer := "http://" + s.PeerAddr
		a = []string{
			"--name", "e2e",
			"--data-dir", s.DataDir,
			"--listen-client-urls", s.Endpoint,
			"--advertise-client-urls", s.Endpoint,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", "e2e=" + peer,
			"--initial-cluster-state", "new",
		}
	}
	return append(a, s.extraArgs...)
}

func (s *Server) hasArg(name string) bool {
	for _, a := range s.extraArgs {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// launch launches one incarnation and waits for readiness. The caller
// must not hold s.mu.
func (s *Server) launch() error {
	s.mu.Lock()
	if s.proc != nil && !s.proc.exited() {
		s.mu.Unlock()
		return errors.New("already running")
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	args := s.args()
	fmt.Fprintf(logf, "=== procutil %s: %s %s\n", time.Now().Format(time.RFC3339Nano), s.bin, strings.Join(args, " "))
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group keeps a terminal ^C aimed at `go test` from
		// racing the harness's own orderly stop.
		Setpgid: true,
	}
	// Tied: the server dies with the test binary even if no cleanup runs.
	waited, err := StartTied(cmd)
	if err != nil {
		_ = logf.Close()
		s.mu.Unlock()
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p := &process{pid: cmd.Process.Pid, osp: cmd.Process, done: make(chan struct{})}
	register(p.pid, cmd.Process)
	go func() {
		<-waited
		unregister(p.pid)
		_ = logf.Close()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	s.proc = p
	s.mu.Unlock()
	return s.waitReady(p)
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (s *Server) waitReady(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.readyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	url := "http://" + s.HTTPAddr + "/readyz"
	if s.Kind == KindEtcd {
		url = s.Endpoint + "/health"
	}
	var last string
	for {
		ok, detail := Probe(ctx, hc, url, s.Kind)
		if ok {
			return nil
		}
		last = detail
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready: %v", s.Kind, p.state)
		case <-ctx.Done():
			_ = s.Kill()
			return fmt.Errorf("%s not ready after %v (last probe of %s: %s)", s.Kind, s.readyTimeout, url, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Probe asks a server's health endpoint whether it serves: netsy's /readyz
// answering 200, or etcd's /health reporting "health":"true". The second
// result says why not.
func Probe(ctx context.Context, hc *http.Client, url string, kind Kind) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("%s: %s", resp.Status, body)
	}
	// etcd answers 200 with "health":"false" while it has no leader.
	if kind == KindEtcd && !strings.Contains(string(body), `"health":"true"`) {
		return false, string(body)
	}
	return true, ""
}

// PID returns the process id of the current incarnation (0 if never
// started).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid
}

// Running reports whether the current incarnation has not exited.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Exited is closed when the current incarnation exits.
func (s *Server) Exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.proc.done
}

// Stop sends SIGTERM and waits for a clean exit, escalating to SIGKILL after
// the stop timeout. It returns an error if the process had to be killed or
// exited with a non-zero status. Stopping a stopped server is a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil || p.exited() {
		return nil
	}
	_ = p.osp.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(s.stopTimeout):
		_ = p.osp.Kill()
		<-p.done
		return fmt.Errorf("%s pid %d ignored SIGTERM for %v; killed", s.Kind, p.pid, s.stopTimeout)
	}
	if !cleanExit(p.state) {
		return fmt.Errorf("%s pid %d exited after SIGTERM: %v", s.Kind, p.pid, p.state)
	}
	return nil
}

// cleanExit accepts status 0 and death by SIGTERM: etcd, like many servers,
// finishes its orderly shutdown and then re-raises the signal it received so
// that its parent sees why it stopped.
func cleanExit(st *os.ProcessState) bool {
	if st.Success() {
		return true
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// Kill sends SIGKILL (a crash: nothing is flushed) and waits until the
// process is reaped.
func (s *Server) Kill() error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil || p.exited() {
		return nil
	}
	if err := p.osp.Kill(); err != nil && !p.exited() {
		return fmt.Errorf("kill %s pid %d: %w", s.Kind, p.pid, err)
	}
	<-p.done
	return nil
}

// Restart stops the server if it runs (gracefully, see Stop) and starts it
// again with the same flags, ports and data directory, waiting for
// readiness. To simulate a crash, call Kill first.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		s.t.Logf("procutil: restart: %v", err)
	}
	if err := s.launch(); err != nil {
		return fmt.Errorf("restart %s: %w\nlog tail:\n%s", s.Kind, err, s.LogTail(40))
	}
	return nil
}

// LogTail returns up to the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	f, err := os.Open(s.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const max = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var (
	liveMu sync.Mutex
	live   = map[int]*os.Process{}
)

func register(pid int, p *os.Process) {
	liveMu.Lock()
	live[pid] = p
	liveMu.Unlock()
}

func unregister(pid int) {
	liveMu.Lock()
	delete(live, pid)
	liveMu.Unlock()
}

// KillAll SIGKILLs every process this package started that is still alive
// and returns their pids. TestMain calls it after m.Run as a last line of
// defence; a non-empty result means some test forgot its cleanup.
func KillAll() []int {
	liveMu.Lock()
	defer liveMu.Unlock()
	var pids []int
	for pid, p := range live {
		_ = p.Kill()
		pids = append(pids, pid)
	}
	return pids
}
