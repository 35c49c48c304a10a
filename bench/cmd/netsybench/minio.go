package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/netsy-io/netsy/bench/internal/s3put"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// The credentials deploy/minio/minio.sh starts MinIO with.
const (
	minioUser     = "netsyminio"
	minioPassword = "netsyminiosecret"
	minioRegion   = "us-east-1"
)

// minioServer is the one MinIO a run shares between all MinIO targets;
// each server or cluster gets a fresh bucket. It is installed on first use
// through deploy/minio/minio.sh, started as a child of the harness (tied,
// so that it dies with the harness even when no cleanup runs) with the
// script's settings, and stopped when the run ends.
type minioServer struct {
	root string // repository root, for the script
	dir  string

	mu      sync.Mutex
	addr    string
	client  *minio.Client
	proc    *exec.Cmd
	exited  <-chan error
	logf    *os.File
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
	bin := os.Getenv("NETSY_MINIO_BIN")
	if bin == "" {
		bin = filepath.Join(m.root, ".cache", "bin", "minio")
	}
	if err := os.MkdirAll(filepath.Join(m.dir, "data"), 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(m.dir, "minio.log")
	if m.logf, err = os.Create(logPath); err != nil {
		return err
	}
	// The flags and environment of deploy/minio/minio.sh start.
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, filepath.Join(m.dir, "data"))
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+minioUser, "MINIO_ROOT_PASSWORD="+minioPassword,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	cmd.Stdout, cmd.Stderr = m.logf, m.logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if m.exited, err = procutil.StartTied(cmd); err != nil {
		m.logf.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	m.proc = cmd
	hc := &http.Client{Timeout: time.Second}
	deadline := time.After(time.Minute)
	for {
		// MinIO answers 200 on /minio/health/ready once it serves requests.
		if ok, _ := procutil.Probe(ctx, hc, "http://"+addr+"/minio/health/ready", procutil.KindNetsy); ok {
			break
		}
		select {
		case err := <-m.exited:
			m.proc = nil
			_ = m.logf.Close()
			return fmt.Errorf("minio exited during startup: %v\nlog tail:\n%s", err, logTail(logPath, 20))
		case <-deadline:
			m.kill()
			return fmt.Errorf("minio not ready within a minute; log tail:\n%s", logTail(logPath, 20))
		case <-ctx.Done():
			m.kill()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
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

// bucketBytes sums the sizes of the objects in bucket (what a server
// stored there, not MinIO's own metadata beside them) and counts them.
func (m *minioServer) bucketBytes(ctx context.Context, bucket string) (int64, int, error) {
	var total int64
	var n int
	for obj := range m.client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			return 0, 0, fmt.Errorf("list %s: %w", bucket, obj.Err)
		}
		total += obj.Size
		n++
	}
	return total, n, nil
}

// seqPutWarmup PUTs open the connection before a baseline is timed.
const seqPutWarmup = 10

// seqPut is MinIO's own sequential conditional-PUT rate, measured in the
// run: what one sync-mode put waits for.
type seqPut struct {
	PUTs      int     `json:"puts"`
	BodyBytes int     `json:"body_bytes"`
	PerSec    float64 `json:"per_sec"`
	P50       float64 `json:"p50_secs"`
	P99       float64 `json:"p99_secs"`
}

// seqPuts measures, on a fresh bucket of this MinIO, n conditional PUTs
// (If-None-Match: *) of s3put.DefaultSize bodies to unique keys, one at a
// time from the harness through minio-go, after a few untimed ones. The
// bucket is removed again.
func (m *minioServer) seqPuts(ctx context.Context, tag string, n int) (*seqPut, error) {
	bucket, err := m.bucket(ctx, tag)
	if err != nil {
		return nil, err
	}
	defer m.removeBucket(context.WithoutCancel(ctx), bucket)
	if _, err := s3put.Run(ctx, seqPutWarmup, 1, s3put.MinioGo(m.client, bucket, "warmup", s3put.DefaultSize)); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	r, err := s3put.Run(ctx, n, 1, s3put.MinioGo(m.client, bucket, "seq", s3put.DefaultSize))
	if err != nil {
		return nil, err
	}
	return &seqPut{PUTs: r.PUTs, BodyBytes: s3put.DefaultSize, PerSec: r.PerSec(),
		P50: r.Pct(50).Seconds(), P99: r.Pct(99).Seconds()}, nil
}

// netsyArgs and env point a netsy server at bucket.
func (m *minioServer) netsyArgs(bucket string) []string {
	return []string{"--storage", "s3://" + bucket, "--s3-endpoint", "http://" + m.addr, "--s3-path-style", "--s3-region", minioRegion}
}

// s3Flags are netsyctl's flags for this MinIO (the storage URLs apart).
func (m *minioServer) s3Flags() []string {
	return []string{"--s3-endpoint", "http://" + m.addr, "--s3-path-style", "--s3-region", minioRegion}
}

func (m *minioServer) env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + minioUser, "AWS_SECRET_ACCESS_KEY=" + minioPassword}
}

// t4Args and t4Env point a t4 node at prefix in bucket. t4 takes its
// static credentials from flags or their T4_ environment variables; the
// environment keeps them out of the process list.
func (m *minioServer) t4Args(bucket, prefix string) []string {
	return []string{"--s3-bucket", bucket, "--s3-prefix", prefix, "--s3-endpoint", "http://" + m.addr, "--s3-region", minioRegion}
}

func (m *minioServer) t4Env() []string {
	return []string{"T4_S3_ACCESS_KEY_ID=" + minioUser, "T4_S3_SECRET_ACCESS_KEY=" + minioPassword}
}

// pid is MinIO's process id, 0 when it is not running.
func (m *minioServer) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil || m.proc.Process == nil {
		return 0
	}
	return m.proc.Process.Pid
}

// stop stops MinIO if it was started: SIGTERM, SIGKILL after 10 s.
func (m *minioServer) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return
	}
	_ = m.proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.proc.Process.Kill()
		<-m.exited
	}
	m.proc = nil
	m.started = false
	_ = m.logf.Close()
}

func (m *minioServer) kill() {
	_ = m.proc.Process.Kill()
	<-m.exited
	m.proc = nil
	_ = m.logf.Close()
}
