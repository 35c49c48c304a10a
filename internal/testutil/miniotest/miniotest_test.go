package miniotest_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"
	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/testutil/miniotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartServesAndStops(t *testing.T) {
	s := miniotest.Start(t)
	port, err := strconv.Atoi(s.Addr[strings.LastIndex(s.Addr, ":")+1:])
	if err != nil || port < 20000 || port >= 32000 || !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Fatalf("addr %s outside 127.0.0.1:20000-32000", s.Addr)
	}
	pid, err := os.ReadFile(filepath.Join(s.Dir, "minio.pid"))
	if err != nil || strings.TrimSpace(string(pid)) != strconv.Itoa(s.PID) {
		t.Fatalf("minio.pid = %q, %v; want %d", pid, err, s.PID)
	}
	c := s.Client(t)
	ctx := t.Context()
	if _, err := c.PutObject(ctx, s.Bucket, "hello", bytes.NewReader([]byte("world")), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, s.Bucket, "hello", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || string(body) != "world" {
		t.Fatalf("get = %q, %v", body, err)
	}
	s.Stop()
	if err := syscall.Kill(s.PID, 0); err == nil {
		t.Fatalf("minio pid %d still alive after Stop", s.PID)
	}
	s.Stop() // idempotent; t.Cleanup calls it again too
}

// TestKillRestart: a killed server comes back on the same endpoint with
// its objects, under a new pid; Restart refuses a running server.
func TestKillRestart(t *testing.T) {
	s := miniotest.Start(t)
	c := s.Client(t)
	ctx := t.Context()
	if _, err := c.PutObject(ctx, s.Bucket, "hello", bytes.NewReader([]byte("world")), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
	old := s.PID
	s.Kill()
	if err := syscall.Kill(old, 0); err == nil {
		t.Fatalf("minio pid %d still alive after Kill", old)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.PID == old {
		t.Fatalf("pid %d unchanged by Restart", s.PID)
	}
	obj, err := c.GetObject(ctx, s.Bucket, "hello", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || string(body) != "world" {
		t.Fatalf("get after restart = %q, %v", body, err)
	}
}
