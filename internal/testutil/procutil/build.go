package procutil

import (
	"bufio"
	"bytes"
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

// builds holds the binaries built by this process, one per command.
var (
	buildsMu  sync.Mutex
	builds    = map[string]*build{}
	buildsDir string
)

type build struct {
	once sync.Once
	path string
	err  error
}

// binary returns $envVar when set, otherwise ./cmd/<name> built once per
// test binary into a private temporary directory (so concurrent test
// binaries never overwrite each other's build).
func binary(name, envVar string) (string, error) {
	buildsMu.Lock()
	b := builds[name]
	if b == nil {
		b = &build{}
		builds[name] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		if p := os.Getenv(envVar); p != "" {
			if _, err := os.Stat(p); err != nil {
				b.err = fmt.Errorf("%s: %w", envVar, err)
				return
			}
			b.path, b.err = filepath.Abs(p)
			return
		}
		root, err := RepoRoot()
		if err != nil {
			b.err = err
			return
		}
		buildsMu.Lock()
		if buildsDir == "" {
			buildsDir, err = os.MkdirTemp("", "netsy-bin-")
		}
		dir := buildsDir
		buildsMu.Unlock()
		if err != nil {
			b.err = err
			return
		}
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, msg)
			return
		}
		b.path = out
	})
	return b.path, b.err
}

// NetsyBinary returns the path of a netsy binary: $NETSY_BIN when set,
// otherwise ./cmd/netsy built once per test binary into a private temporary
// directory (so concurrent test binaries never overwrite each other's build).
// Call CleanupBuilds from TestMain to remove that directory.
func NetsyBinary() (string, error) { return binary("netsy", "NETSY_BIN") }

// NetsyctlBinary is NetsyBinary for netsyctl ($NETSYCTL_BIN).
func NetsyctlBinary() (string, error) { return binary("netsyctl", "NETSYCTL_BIN") }

// BuildNetsy is NetsyBinary for use inside a test.
func BuildNetsy(t testing.TB) string {
	t.Helper()
	p, err := NetsyBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BuildNetsyctl is NetsyctlBinary for use inside a test.
func BuildNetsyctl(t testing.TB) string {
	t.Helper()
	p, err := NetsyctlBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// CleanupBuilds removes the binaries built by this process. Call it from
// TestMain after m.Run.
func CleanupBuilds() {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	if buildsDir != "" {
		_ = os.RemoveAll(buildsDir)
	}
}

var (
	etcdOnce sync.Once
	etcdDir  string
	etcdErr  error
)

// runBuildScript runs scripts/NAME in root, which prints the directory it
// built into (and nothing else on stdout; the last line is taken in case a
// tool it calls ever writes there too), and returns that directory.
func runBuildScript(root, name string) (string, error) {
	cmd := exec.Command("bash", filepath.Join(root, "scripts", name))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/%s: %w\n%s", name, err, stderr.Bytes())
	}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	if last == "" {
		return "", fmt.Errorf("scripts/%s printed no directory", name)
	}
	return last, nil
}

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
		etcdDir, etcdErr = runBuildScript(root, "build-etcd.sh")
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
