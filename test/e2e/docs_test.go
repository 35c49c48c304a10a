//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// docBlock returns the shell block of docs/operations.md between
// "<!-- begin tested: name -->" and "<!-- end tested -->", without its
// code fence.
func docBlock(t *testing.T, name string) string {
	t.Helper()
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	begin := "<!-- begin tested: " + name + " -->"
	_, rest, ok := strings.Cut(string(doc), begin)
	if !ok {
		t.Fatalf("docs/operations.md has no %q", begin)
	}
	block, _, ok := strings.Cut(rest, "<!-- end tested -->")
	if !ok {
		t.Fatalf("docs/operations.md: %q is not closed", begin)
	}
	block = strings.TrimSpace(block)
	body, ok := strings.CutPrefix(block, "```sh\n")
	if !ok || !strings.HasSuffix(body, "```") {
		t.Fatalf("docs/operations.md: the %s block is not one ```sh fence:\n%s", name, block)
	}
	return strings.TrimSuffix(body, "```")
}

// runDocBlock runs block with bash in dir, with netsyctl and etcdctl on
// PATH. netsy is a shell function that records its arguments instead of
// starting a server: the test starts each recorded node itself, on ports
// of its own. It returns the recorded netsy command lines.
func runDocBlock(t *testing.T, dir, block string) [][]string {
	t.Helper()
	bin := t.TempDir()
	for name, path := range map[string]string{"netsyctl": procutil.BuildNetsyctl(t), "etcdctl": procutil.EtcdctlPath(t)} {
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	calls := filepath.Join(t.TempDir(), "netsy-calls")
	script := "set -euo pipefail\n" +
		`netsy() { echo "$*" >> "$NETSY_CALLS"; }` + "\n" +
		block
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") && !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+bin+":/usr/bin:/bin", "NETSY_CALLS="+calls)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := procutil.RunTied(cmd); err != nil {
		t.Fatalf("the documented commands failed: %v\n--- script\n%s\n--- output\n%s", err, script, out.String())
	}
	t.Logf("documented commands ran:\n%s", out.String())
	data, err := os.ReadFile(calls)
	if err != nil {
		t.Fatalf("the documented commands never start netsy: %v", err)
	}
	var netsys [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		netsys = append(netsys, strings.Fields(l))
	}
	return netsys
}

// startDocumented starts netsy with a documented command line, on ports
// of the test's choosing.
func startDocumented(t *testing.T, args, env []string) *procutil.Server {
	t.Helper()
	if len(args) < 2 || args[0] != "--data-dir" {
		t.Fatalf("documented netsy command %q does not start with --data-dir", args)
	}
	return procutil.StartNetsy(t, procutil.Options{DataDir: args[1], Args: args[2:], Env: env})
}

// TestOperationsDocBackupRestore runs the backup-and-restore commands of
// docs/operations.md as written (with this test's ports, directories and
// MinIO in place of the examples') and checks every node they start
// serves the source's state.
func TestOperationsDocBackupRestore(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	if target != procutil.KindNetsy {
		t.Skip("netsy's own operations guide")
	}
	block := docBlock(t, "backup-restore")
	src := startServer(t)
	cli := newClient(t, src)
	compact := backupWorkload(t, cli)
	want := readState(t, cli, compact)

	minio := miniotest.Start(t)
	minio.CreateBucket(t, "netsy-restored")
	dirs := t.TempDir()
	block = strings.NewReplacer(
		"127.0.0.1:2379", src.ClientAddr,
		"http://127.0.0.1:9000", minio.Endpoint,
		"/var/lib/netsy-restored", filepath.Join(dirs, "restored"),
		"/var/lib/netsy-s3", filepath.Join(dirs, "s3"),
		"AWS_ACCESS_KEY_ID=minio ", "AWS_ACCESS_KEY_ID="+minio.AccessKey+" ",
		"AWS_SECRET_ACCESS_KEY=minio-secret ", "AWS_SECRET_ACCESS_KEY="+minio.SecretKey+" ",
	).Replace(block)
	if !strings.Contains(block, "snapshot restore") || !strings.Contains(block, "snapshot save") {
		t.Fatalf("the documented block no longer saves and restores:\n%s", block)
	}
	netsys := runDocBlock(t, t.TempDir(), block)
	if len(netsys) != 2 {
		t.Fatalf("the documented block starts %d nodes (%q), want 2: one per store", len(netsys), netsys)
	}
	creds := []string{"AWS_ACCESS_KEY_ID=" + minio.AccessKey, "AWS_SECRET_ACCESS_KEY=" + minio.SecretKey}
	for i, args := range netsys {
		s := startDocumented(t, args, creds)
		if d := want.diff(readState(t, newClient(t, s), compact)); d != "" {
			t.Errorf("node %d (netsy %s):\n%s", i+1, strings.Join(args, " "), d)
		}
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}
}

// TestOperationsDocRebuildWAL runs the documented recovery of a node on
// the default store whose local log is damaged: the log is moved aside
// and the node rebuilds it from the store inside the data directory.
func TestOperationsDocRebuildWAL(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	if target != procutil.KindNetsy {
		t.Skip("netsy's own operations guide")
	}
	block := docBlock(t, "rebuild-wal")
	dataDir := filepath.Join(t.TempDir(), "netsy")
	s := procutil.StartNetsy(t, procutil.Options{DataDir: dataDir})
	cli := newClient(t, s)
	compact := backupWorkload(t, cli)
	want := readState(t, cli, compact)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	// The damage the section is about: a sealed segment or the newest
	// snapshot that no longer reads.
	segs, _ := filepath.Glob(filepath.Join(dataDir, "wal", "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no segment to damage")
	}
	if err := os.WriteFile(segs[0], []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}

	block = strings.ReplaceAll(block, "/var/lib/netsy", dataDir)
	netsys := runDocBlock(t, t.TempDir(), block)
	if len(netsys) != 1 {
		t.Fatalf("the documented block starts %d nodes (%q), want 1", len(netsys), netsys)
	}
	r := startDocumented(t, netsys[0], nil)
	if d := want.diff(readState(t, newClient(t, r), compact)); d != "" {
		t.Errorf("after the documented rebuild:\n%s", d)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "wal.damaged")); err != nil {
		t.Errorf("the damaged log was not kept aside: %v", err)
	}
}

// TestOperationsDocUnreachableBucket checks the Storage failures claim of
// docs/operations.md that start-up against an --s3-endpoint where nothing
// listens fails within a few seconds, after 3 attempts, with the bucket's
// error: the node exits non-zero within 10 s and logs what the guide
// quotes.
func TestOperationsDocUnreachableBucket(t *testing.T) {
	skipUnlessNetsy(t)
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	quoted := []string{"within a few seconds when nothing", "exceeded maximum number of attempts, 3", "connect: connection refused"}
	flat := strings.Join(strings.Fields(string(doc)), " ")
	for _, q := range quoted {
		if !strings.Contains(flat, q) {
			t.Fatalf("docs/operations.md no longer says %q", q)
		}
	}
	bin, err := procutil.NetsyBinary()
	if err != nil {
		t.Fatal(err)
	}
	free := func() string { return fmt.Sprintf("127.0.0.1:%d", procutil.FreePort(t)) }
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--node-id", "n1", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--client-addr", free(), "--peer-addr", free(), "--http-addr", free(),
		"--storage", "s3://netsy/p", "--s3-endpoint", "http://"+free(), "--s3-path-style", "--s3-region", "us-east-1")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=netsy", "AWS_SECRET_ACCESS_KEY=netsysecret")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil {
		t.Fatalf("netsy started against an endpoint where nothing listens:\n%s", out)
	}
	t.Logf("exited after %v: %s", took.Round(10*time.Millisecond), lastLine(string(out)))
	if took > 10*time.Second {
		t.Errorf("start-up took %v to fail; the guide says a few seconds", took)
	}
	for _, q := range append(quoted[1:], `register node n1 in s3://netsy/p: load members.json`) {
		if !strings.Contains(string(out), q) {
			t.Errorf("the log lacks %q:\n%s", q, out)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
