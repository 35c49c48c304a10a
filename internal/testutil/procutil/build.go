package procutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const modulePath = "github.com/netsy-io/netsy"

// RepoRoot returns the directory holding the netsy go.mod, found by walking
// up from the working directory (go test runs in the package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(data), []byte("module "+modulePath)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

var (
	netsyOnce sync.Once
	netsyBin  string
	netsyDir  string
	netsyErr  error
)

// NetsyBinary returns the path of a netsy binary: $NETSY_BIN when set,
// otherwise ./cmd/netsy built once per test binary into a private temporary
// directory (so concurrent test binaries never overwrite each other's build).
// Call CleanupBuilds from TestMain to remove that directory.
func NetsyBinary() (string, error) {
	netsyOnce.Do(func() {
		if p := os.Getenv("NETSY_BIN"); p != "" {
			if _, err := os.Stat(p); err != nil {
				netsyErr = fmt.Errorf("NETSY_BIN: %w", err)
				return
			}
			netsyBin, netsyErr = filepath.Abs(p)
			return
		}
		root, err := RepoRoot()
		if err != nil {
			netsyErr = err
			return
		}
		dir, err := os.MkdirTemp("", "netsy-bin-")
		if err != nil {
			netsyErr = err
			return
		}
		netsyDir = dir
		out := filepath.Join(dir, "netsy")
		cmd := exec.Command("go", "build", "-o", out, "./cmd/netsy")
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			netsyErr = fmt.Errorf("go build ./cmd/netsy: %w\n%s", err, msg)
			return
		}
		netsyBin = out
	})
	return netsyBin, netsyErr
}

// BuildNetsy is NetsyBinary for use inside a test.
func BuildNetsy(t testing.TB) string {
	t.Helper()
	p, err := NetsyBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// CleanupBuilds removes the binaries built by this process. Call it from
// TestMain after m.Run.
func CleanupBuilds() {
	if netsyDir != "" {
		_ = os.RemoveAll(netsyDir)
	}
}

var (
	etcdOnce sync.Once
	etcdDir  string
	etcdErr  error
)

// EtcdBinDir returns the directory holding the pinned etcd, etcdctl and
// benchmark binaries, running scripts/build-etcd.sh (which is a no-op when
// they are already built) once per process.
func EtcdBinDir() (string, error) {
	etcdOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			etcdErr = err
			return
		}
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-etcd.sh"))
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			etcdErr = fmt.Errorf("scripts/build-etcd.sh: %w\n%s", err, stderr.Bytes())
			return
		}
		// The script prints only the bin directory on stdout; take the last
		// line in case a tool it calls ever writes there too.
		var last string
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				last = l
			}
		}
		if last == "" {
			etcdErr = errors.New("scripts/build-etcd.sh printed no directory")
			return
		}
		etcdDir = last
	})
	return etcdDir, etcdErr
}

func etcdTool(t testing.TB, name string) string {
	t.Helper()
	dir, err := EtcdBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// EtcdctlPath returns the path of the pinned etcdctl binary.
func EtcdctlPath(t testing.TB) string { t.Helper(); return etcdTool(t, "etcdctl") }

// EtcdPath returns the path of the pinned etcd server binary.
func EtcdPath(t testing.TB) string { t.Helper(); return etcdTool(t, "etcd") }

// EtcdBenchmarkPath returns the path of etcd's benchmark tool.
func EtcdBenchmarkPath(t testing.TB) string { t.Helper(); return etcdTool(t, "benchmark") }
