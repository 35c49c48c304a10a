package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The credentials deploy/minio/minio.sh starts MinIO with.
const (
	minioUser     = "netsyminio"
	minioPassword = "netsyminiosecret"
	minioRegion   = "us-east-1"
)

// minioServer is the one MinIO a run shares between all netsy-minio
// servers; each server gets a fresh bucket. It is started on first use
// through deploy/minio/minio.sh and stopped when the run ends.
type minioServer struct {
	root string // repository root, for the script
	dir  string

	mu      sync.Mutex
	addr    string
	client  *minio.Client
	started bool
	err     error
}

func (m *minioServer) script() string { return filepath.Join(m.root, "deploy", "minio", "minio.sh") }

// start runs the script's install (a no-op once built) and start once.
func (m *minioServer) start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.err != nil {
		return m.err
	}
	m.err = m.launch(ctx)
	m.started = m.err == nil
	return m.err
}

func (m *minioServer) launch(ctx context.Context) error {
	if out, err := exec.CommandContext(ctx, "bash", m.script(), "install").CombinedOutput(); err != nil {
		return fmt.Errorf("minio.sh install: %w\n%s", err, out)
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	console, err := freeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	_, cport, _ := net.SplitHostPort(console)
	cmd := exec.CommandContext(ctx, "bash", m.script(), "start", m.dir, port)
	cmd.Env = append(os.Environ(), "MINIO_CONSOLE_PORT="+cport,
		"MINIO_ROOT_USER="+minioUser, "MINIO_ROOT_PASSWORD="+minioPassword)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("minio.sh start: %w\n%s", err, out)
	}
	m.addr = addr
	m.client, err = minio.New(addr, &minio.Options{
		Creds:  credentials.NewStaticV4(minioUser, minioPassword, ""),
		Region: minioRegion,
	})
	return err
}

// bucket creates a fresh bucket for one server run.
func (m *minioServer) bucket(ctx context.Context, tag string) (string, error) {
	if err := m.start(ctx); err != nil {
		return "", err
	}
	name := "bench-" + strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(tag))
	if len(name) > 63 {
		name = name[:63]
	}
	name = strings.TrimRight(name, "-")
	if err := m.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: minioRegion}); err != nil {
		return "", fmt.Errorf("make bucket %s: %w", name, err)
	}
	return name, nil
}

// removeBucket drops a run's bucket and its objects so MinIO's disk use
// stays small over a long run.
func (m *minioServer) removeBucket(ctx context.Context, name string) {
	_ = m.client.RemoveBucketWithOptions(ctx, name, minio.RemoveBucketOptions{ForceDelete: true})
}

// netsyArgs and env point a netsy server at bucket.
func (m *minioServer) netsyArgs(bucket string) []string {
	return []string{"--storage", "s3://" + bucket, "--s3-endpoint", "http://" + m.addr, "--s3-path-style", "--s3-region", minioRegion}
}

func (m *minioServer) env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + minioUser, "AWS_SECRET_ACCESS_KEY=" + minioPassword}
}

// stop stops MinIO if it was started.
func (m *minioServer) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return
	}
	_ = exec.Command("bash", m.script(), "stop", m.dir).Run()
	m.started = false
}
