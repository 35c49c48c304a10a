package miniotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

const (
	defaultUser     = "netsyminio"
	defaultPassword = "netsyminiosecret"
	// Region is the region every test server reports; SDK clients must sign with it.
	Region = "us-east-1"
	// Bucket is the bucket Start creates.
	Bucket = "netsy-test"

	readyTimeout  = 60 * time.Second
	stopGrace     = 10 * time.Second
	startAttempts = 5
)

// Server is a running MinIO owned by one test.
type Server struct {
	// Endpoint is the URL S3 clients use, e.g. "http://127.0.0.1:23456".
	Endpoint string
	// Addr is Endpoint's host:port.
	Addr string
	// Bucket was created empty for this server.
	Bucket string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	// Region is the signing region.
	Region string
	// Dir holds the data directory, minio.log and minio.pid.
	Dir string
	// PID is the MinIO process id; Restart changes it.
	PID int

	bin     string
	console string // the console's host:port, kept across restarts

	mu     sync.Mutex    // serializes Stop, Kill and Restart
	cmd    *exec.Cmd     // the current process
	exited chan struct{} // closed when cmd.Wait returns
}

// Start runs MinIO for t and returns it with a fresh bucket; see the package
// doc for binary lookup and skipping.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binary(t)
	user := envOr("MINIO_ROOT_USER", defaultUser)
	password := envOr("MINIO_ROOT_PASSWORD", defaultPassword)
	dir := t.TempDir()

	var s *Server
	var lastErr error
	for range startAttempts {
		s, lastErr = launch(bin, dir, user, password)
		if lastErr == nil {
			break
		}
		// Another process may have taken the port between our probe and
		// MinIO's bind; anything else is a real failure.
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
		t.Logf("miniotest: retrying on a new port: %v", lastErr)
	}
	if lastErr != nil {
		t.Fatalf("miniotest: start minio: %v", lastErr)
	}
	t.Cleanup(s.Stop)
	t.Logf("miniotest: minio pid %d on %s (data %s)", s.PID, s.Endpoint, dir)

	s.Bucket = Bucket
	s.CreateBucket(t, Bucket)
	return s
}

// binary finds the MinIO binary, installing it when NETSY_REQUIRE_MINIO=1.
func binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("NETSY_MINIO_BIN"); bin != "" {
		if !isExecutable(bin) {
			t.Fatalf("miniotest: NETSY_MINIO_BIN=%s is not an executable file", bin)
		}
		return bin
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	bin := filepath.Join(root, ".cache", "bin", "minio")
	if isExecutable(bin) {
		return bin
	}
	if os.Getenv("NETSY_REQUIRE_MINIO") != "1" {
		t.Skipf("miniotest: no MinIO binary at %s; run `bash deploy/minio/minio.sh install` "+
			"(or set NETSY_MINIO_BIN), and set NETSY_REQUIRE_MINIO=1 to make a missing binary fail", bin)
	}
	if err := install(t, root); err != nil {
		t.Fatalf("miniotest: NETSY_REQUIRE_MINIO=1 and installing MinIO failed: %v", err)
	}
	if !isExecutable(bin) {
		t.Fatalf("miniotest: NETSY_REQUIRE_MINIO=1 but the install left no binary at %s", bin)
	}
	return bin
}

// install runs minio.sh install under a file lock so test binaries of
// several packages starting at once build MinIO only once.
func install(t testing.TB, root string) error {
	if err := os.MkdirAll(filepath.Join(root, ".cache"), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(root, ".cache", "minio-install.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	for {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock install: %w", err)
	}
	t.Logf("miniotest: building MinIO (a few minutes on a cold cache)")
	cmd := exec.Command("bash", filepath.Join(root, "deploy", "minio", "minio.sh"), "install")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

func launch(bin, dir, user, password string) (*Server, error) {
	// procutil's record of the ports this process handed out: a proxy
	// or node of the same test must never be given MinIO's ports.
	port, err := procutil.Port()
	if err != nil {
		return nil, err
	}
	console, err := procutil.Port()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &Server{
		Endpoint:  "http://" + addr,
		Addr:      addr,
		AccessKey: user,
		SecretKey: password,
		Region:    Region,
		Dir:       dir,
		bin:       bin,
		console:   net.JoinHostPort("127.0.0.1", strconv.Itoa(console)),
	}
	if err := s.run(); err != nil {
		return nil, err
	}
	return s, nil
}

// run starts MinIO on s's addresses and data directory and waits until it
// is ready; the caller holds s.mu or owns s alone.
func (s *Server) run() error {
	logPath := filepath.Join(s.Dir, "minio.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child keeps its own descriptor
	cmd := exec.Command(s.bin, "server", "--quiet",
		"--address", s.Addr,
		"--console-address", s.console,
		filepath.Join(s.Dir, "data"))
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", // the console is never used by tests; it only costs memory
		"MINIO_UPDATE=off",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Tied to this test binary: the kernel kills MinIO if the binary dies
	// without running its cleanups. StartTied forks on a thread kept for
	// MinIO's whole life; a parent-death signal set on an ordinary thread
	// fires when the runtime retires that thread, killing MinIO mid-test.
	waited, err := procutil.StartTied(cmd)
	if err != nil {
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited, s.PID = cmd, exited, cmd.Process.Pid
	go func() {
		// Owned by s: ends when the process does, which Stop guarantees.
		<-waited
		close(exited)
	}()
	// Same file minio.sh writes, so `minio.sh stop DIR` works on it too.
	if err := os.WriteFile(filepath.Join(s.Dir, "minio.pid"), []byte(strconv.Itoa(s.PID)+"\n"), 0o644); err != nil {
		s.stop(syscall.SIGTERM)
		return err
	}
	if err := s.waitReady(); err != nil {
		s.stop(syscall.SIGTERM)
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w; log:\n%s", err, bytes.TrimSpace(log))
	}
	return nil
}

func (s *Server) waitReady() error {
	clk := clock.Real()
	deadline := clk.Now().Add(readyTimeout)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	url := s.Endpoint + "/minio/health/ready"
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("minio exited during startup (%v)", s.cmd.ProcessState)
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if clk.Now().After(deadline) {
			return fmt.Errorf("minio not ready on %s after %v (last: %v)", s.Addr, readyTimeout, err)
		}
		select {
		case <-s.exited:
		case <-clk.After(50 * time.Millisecond):
		}
	}
}

// Stop terminates MinIO (SIGTERM, then SIGKILL after a grace period) and
// waits for it to exit. It is idempotent and registered with t.Cleanup, so
// tests call it only to simulate an outage.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop(syscall.SIGTERM)
}

// Kill SIGKILLs MinIO (a crash) and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop(syscall.SIGKILL)
}

// stop sends sig unless MinIO has exited, SIGKILLs it after the grace
// period, and waits; the caller holds s.mu or owns s alone.
func (s *Server) stop(sig syscall.Signal) {
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Signal(sig)
		select {
		case <-s.exited:
		case <-clock.Real().After(stopGrace):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	_ = os.Remove(filepath.Join(s.Dir, "minio.pid"))
}

// Restart starts MinIO again after Stop or Kill, on the same address and
// data directory, and waits until it is ready: to its clients, the same
// server back after an outage. It fails if MinIO is running, or if its
// port stays taken (a port below 32768 is not handed to outgoing
// connections, so only another listener can take it meanwhile).
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.exited:
	default:
		return fmt.Errorf("miniotest: restart: minio pid %d is running", s.PID)
	}
	var err error
	for range startAttempts {
		if err = s.run(); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		<-clock.Real().After(time.Second)
	}
	if err != nil {
		return fmt.Errorf("miniotest: restart minio on %s: %w", s.Addr, err)
	}
	return nil
}

// Client returns a minio-go client with root credentials, for setting up or
// inspecting state behind the code under test.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := minio.New(s.Addr, &minio.Options{
		Creds:     credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure:    false,
		Region:    s.Region,
		Transport: tr,
	})
	if err != nil {
		t.Fatalf("miniotest: client: %v", err)
	}
	return c
}

// CreateBucket creates another empty bucket on the server.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client(t).MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("miniotest: create bucket %s: %v", name, err)
	}
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// repoRoot walks up from the working directory (a package directory under
// go test) to the directory holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory; cannot find .cache/bin/minio")
		}
		dir = parent
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
