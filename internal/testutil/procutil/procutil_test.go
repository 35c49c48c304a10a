package procutil

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p < minPort || p >= maxPort {
			t.Fatalf("port %d outside [%d, %d)", p, minPort, maxPort)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// TestEtcdLifecycle exercises the handle against the pinned etcd, which is
// always available, so the harness is proven before netsy exists.
func TestEtcdLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real etcd")
	}
	s := StartEtcd(t, Options{})
	first := s.PID()
	if first == 0 || !s.Running() {
		t.Fatalf("not running after start: pid %d", first)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("running after Kill")
	}
	if err := syscall.Kill(first, 0); err == nil {
		t.Fatalf("pid %d still exists after Kill", first)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.PID() == first {
		t.Fatal("restart kept the old pid")
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if _, err := os.Stat(s.DataDir); err != nil {
		t.Fatalf("data dir: %v", err)
	}
	if pids := KillAll(); len(pids) != 0 {
		t.Fatalf("processes left behind: %v", pids)
	}
}

// TestServerDiesWithTestBinary proves that a server cannot outlive a test
// binary that is killed outright (as `go test -timeout` does), when no
// cleanup runs: a child copy of this test binary starts etcd, reports its
// pid and is then SIGKILLed.
func TestServerDiesWithTestBinary(t *testing.T) {
	if os.Getenv("PROCUTIL_ORPHAN_HELPER") == "1" {
		s := StartEtcd(t, Options{})
		fmt.Printf("PID %d\n", s.PID())
		time.Sleep(time.Minute)
		return
	}
	if testing.Short() {
		t.Skip("starts a real etcd")
	}
	// Build etcd in this process first so the helper does not race a build.
	EtcdPath(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithTestBinary$", "-test.v")
	cmd.Env = append(os.Environ(), "PROCUTIL_ORPHAN_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "PID %d", &pid); err == nil {
			break
		}
	}
	if pid == 0 {
		t.Fatal("helper reported no etcd pid")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	_ = cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("etcd pid %d survived its test binary", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
