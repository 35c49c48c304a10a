package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/node"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
	"github.com/netsy-io/netsy/internal/version"
)

func freeAddr(t *testing.T) string { return procutil.FreeAddr(t) }

// startNode runs a node in this process on a fresh data directory.
func startNode(t *testing.T) *node.Node {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = freeAddr(t), freeAddr(t), freeAddr(t)
	cfg.NodeID = "n1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.StartWith(ctx, cfg, hclog.NewNullLogger(), node.Deps{Clock: clock.Real(), WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestVersionCommand(t *testing.T) {
	out, errOut, code := run(t, "version")
	if code != 0 || !strings.Contains(out, "netsy version: "+version.Version) || !strings.Contains(out, "etcd API version: "+engine.Version) ||
		!strings.Contains(out, "go version: "+runtime.Version()) || !strings.Contains(out, "git commit: ") {
		t.Fatalf("version: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, "version", "-o", "json")
	var v version.Info
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v != version.Get() {
		t.Fatalf("version -o json: exit %d, %v: %s%s", code, err, out, errOut)
	}
}

func TestParseArgsTakesFlagsAnywhere(t *testing.T) {
	fs := newFlagSet("t", io.Discard)
	dir := fs.String("data-dir", "", "")
	out := fs.String("o", "table", "")
	pos, err := parseArgs(fs, []string{"FILE", "--data-dir", "D", "-o", "json", "--", "-notaflag"})
	if err != nil || *dir != "D" || *out != "json" || fmt.Sprint(pos) != "[FILE -notaflag]" {
		t.Fatalf("parseArgs = %v, %v; data-dir %q, o %q", pos, err, *dir, *out)
	}
}

// TestClientLogsStayOut runs a command against an endpoint where nothing
// listens: the client retries and, with its default logger, prints JSON
// log lines on stderr. netsyctl prints its own error only.
func TestClientLogsStayOut(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	captured := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		captured <- string(b)
	}()
	out, errOut, code := run(t, "members", "--endpoints", freeAddr(t), "--timeout", "1s")
	os.Stderr = stderr
	w.Close()
	logged := <-captured
	r.Close()
	if code == 0 {
		t.Fatal("members against a closed port succeeded")
	}
	if logged != "" || strings.Contains(out+errOut, "{") {
		t.Fatalf("client log lines leaked:\nprocess stderr: %q\nstdout: %q\nstderr: %q", logged, out, errOut)
	}
	if !strings.Contains(errOut, "netsyctl members: member list from") {
		t.Fatalf("error: %q", errOut)
	}
}

func TestSnapshotSaveJSONAndRestore(t *testing.T) {
	n := startNode(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n.ClientAddr()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}} {
		if _, err := cli.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if _, err := cli.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	out, errOut, code := run(t, "snapshot", "save", "--endpoints", n.ClientAddr(), "-o", "json", path)
	if code != 0 {
		t.Fatalf("snapshot save: exit %d: %s", code, errOut)
	}
	var saved struct {
		Path     string `json:"path"`
		Bytes    int64  `json:"bytes"`
		Revision int64  `json:"revision"`
		Index    uint64 `json:"index"`
	}
	if err := json.Unmarshal([]byte(out), &saved); err != nil {
		t.Fatalf("snapshot save -o json: %v\n%s", err, out)
	}
	fi, err := os.Stat(path)
	if err != nil || saved.Path != path || saved.Bytes != fi.Size() || saved.Revision != 5 || saved.Index == 0 {
		t.Fatalf("snapshot save -o json = %+v; file %v %v", saved, fi, err)
	}

	dataDir := filepath.Join(t.TempDir(), "restored")
	out, errOut, code = run(t, "snapshot", "restore", path, "--data-dir", dataDir, "-o", "json")
	if code != 0 {
		t.Fatalf("snapshot restore: exit %d: %s", code, errOut)
	}
	var restored struct {
		File     string `json:"file"`
		Format   string `json:"format"`
		DataDir  string `json:"data_dir"`
		Storage  string `json:"storage"`
		Revision int64  `json:"revision"`
		Index    uint64 `json:"index"`
		Keys     int    `json:"keys"`
		Leases   int    `json:"leases"`
	}
	if err := json.Unmarshal([]byte(out), &restored); err != nil {
		t.Fatalf("snapshot restore -o json: %v\n%s", err, out)
	}
	abs, _ := filepath.Abs(dataDir)
	if restored.File != path || restored.Format != "netsyctl" || restored.DataDir != dataDir || restored.Storage != "file://"+filepath.Join(abs, "objects") ||
		restored.Revision != 5 || restored.Index != saved.Index || restored.Keys != 1 || restored.Leases != 0 {
		t.Fatalf("snapshot restore -o json = %+v", restored)
	}

	// Again into the same directory: refused, and the table form says why.
	_, errOut, code = run(t, "snapshot", "restore", path, "--data-dir", dataDir)
	if code == 0 || !strings.Contains(errOut, "restore target is not empty") || !strings.Contains(errOut, dataDir) {
		t.Fatalf("restore into a used directory: exit %d: %s", code, errOut)
	}
}

func TestSnapshotRestoreUsage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.db")
	page := make([]byte, 4096)
	binary.LittleEndian.PutUint32(page[16:20], 0xED0CDAED)
	os.WriteFile(path, page, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "restore", path}, "--data-dir: required"},
		{[]string{"snapshot", "restore", "--data-dir", t.TempDir()}, "usage: netsyctl snapshot restore FILE --data-dir DIR"},
		{[]string{"snapshot", "restore", path, "--data-dir", filepath.Join(t.TempDir(), "d")}, "snapshot of etcd's own database"},
		{[]string{"snapshot", "frobnicate"}, "usage: netsyctl snapshot save"},
	} {
		_, errOut, code := run(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d: %s; want %q", tc.args, code, errOut, tc.want)
		}
	}
}
