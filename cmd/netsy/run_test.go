package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/syncbuf"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/version"
)

func TestHelpListsEveryFlag(t *testing.T) {
	var out syncbuf.Buffer
	if code := Run(context.Background(), []string{"--help"}, &out, &out); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, f := range []string{"-data-dir", "-client-addr", "-http-addr", "-progress-notify-interval", "-metrics", "-log-level", "-log-format",
		"-name", "-storage", "-s3-endpoint", "-s3-region", "-s3-path-style", "-quorum", "-snapshot-every-revisions", "-snapshot-keep", "-retention",
		"-value-spill-min", "-max-request-bytes", "-version", "NETSY_",
		"-cert-file", "-key-file", "-trusted-ca-file", "-client-cert-auth", "-peer-cert-file", "-peer-key-file",
		"-peer-trusted-ca-file", "-tls-min-version", "-insecure-plaintext", "-config-file", "-print-config"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

func TestBadValueNamesTheFlag(t *testing.T) {
	var out syncbuf.Buffer
	code := Run(context.Background(), []string{"--log-format", "xml", "--data-dir", t.TempDir()}, &out, &out)
	if code == 0 || !strings.Contains(out.String(), "--log-format") {
		t.Fatalf("exit %d, output %q", code, out.String())
	}
}

func TestPrintConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "netsy.yaml")
	if err := os.WriteFile(file, []byte("log-level: warn\nquorum: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NETSY_LOG_LEVEL", "error")
	var out, errOut syncbuf.Buffer
	code := Run(context.Background(), []string{"--config-file", file, "--print-config", "--name", "n1"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, line := range []string{"name: n1 # flag", "log-level: error # env NETSY_LOG_LEVEL",
		"quorum: 0 # file " + file + ":2", "client-addr: 127.0.0.1:2379 # default"} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("--print-config lacks %q:\n%s", line, out.String())
		}
	}
	// An invalid configuration is printed too, then refused.
	var out2, errOut2 syncbuf.Buffer
	code = Run(context.Background(), []string{"--print-config", "--client-addr", "192.0.2.1:2379"}, &out2, &errOut2)
	if code != 2 || !strings.Contains(out2.String(), "client-addr: 192.0.2.1:2379 # flag") ||
		!strings.Contains(errOut2.String(), "--client-addr 192.0.2.1:2379: plaintext is served only on loopback") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out2.String(), errOut2.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	for port := 20000 + time.Now().Nanosecond()%10000; ; port++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			l.Close()
			return l.Addr().String()
		}
	}
}

func TestRunServesAndStopsCleanly(t *testing.T) {
	httpAddr := freeAddr(t)
	args := []string{"--data-dir", t.TempDir(), "--client-addr", freeAddr(t), "--http-addr", httpAddr}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, &out, &out) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("never ready:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Fatalf("no clean stop in the log:\n%s", out.String())
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr syncbuf.Buffer
	// --version works even next to a flag that would fail validation.
	if code := Run(context.Background(), []string{"--version", "--log-format", "xml"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--version exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"netsy version: " + version.Version, "etcd API version: " + engine.Version, "git commit: ", "go version: " + runtime.Version()} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--version output lacks %q:\n%s", want, stdout.String())
		}
	}
}

// startRun runs a node through Run in the background and waits for
// /readyz; the returned function stops it and returns everything it logged.
func startRun(t *testing.T, extra ...string) (clientAddr, httpAddr string, stop func() string) {
	t.Helper()
	clientAddr, httpAddr = freeAddr(t), freeAddr(t)
	args := append([]string{"--data-dir", t.TempDir(), "--client-addr", clientAddr, "--http-addr", httpAddr}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, out, out) }()
	stopped := false
	stop = func() string {
		if !stopped {
			stopped = true
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("exit %d:\n%s", code, out.String())
			}
		}
		return out.String()
	}
	t.Cleanup(func() { stop() })
	clk := clock.Real()
	deadline := clk.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return clientAddr, httpAddr, stop
			}
		}
		if clk.Now().After(deadline) {
			t.Fatalf("never ready:\n%s", stop())
		}
		clk.Sleep(context.Background(), 20*time.Millisecond)
	}
}

func TestQuorumWithoutReplicasWarns(t *testing.T) {
	_, _, stop := startRun(t, "--quorum", "2")
	logs := stop()
	var warn string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "[WARN]") && strings.Contains(l, "--quorum") {
			warn = l
		}
	}
	if warn == "" {
		t.Fatalf("no WARN about --quorum 2 on a node without replicas:\n%s", logs)
	}
	for _, want := range []string{"only once it is in object storage", "--quorum 0", "quorum=2"} {
		if !strings.Contains(warn, want) {
			t.Errorf("quorum warning lacks %q: %s", want, warn)
		}
	}
}

func TestQuorumZeroDoesNotWarn(t *testing.T) {
	_, _, stop := startRun(t, "--quorum", "0")
	if logs := stop(); strings.Contains(logs, "--quorum asks") {
		t.Fatalf("--quorum 0 warned:\n%s", logs)
	}
}

func TestMaxRequestBytesAndProbes(t *testing.T) {
	clientAddr, httpAddr, _ := startRun(t, "--max-request-bytes", "1024")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientAddr}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "small", strings.Repeat("v", 500)); err != nil {
		t.Fatalf("500-byte put under --max-request-bytes 1024: %v", err)
	}
	if _, err := cli.Put(ctx, "big", strings.Repeat("v", 2000)); !errors.Is(err, rpctypes.ErrRequestTooLarge) {
		t.Fatalf("2000-byte put under --max-request-bytes 1024: %v, want %v", err, rpctypes.ErrRequestTooLarge)
	}

	for _, tc := range []struct{ path, body string }{
		{"/livez", "ok\n"},
		{"/health", `{"health":"true","reason":""}` + "\n"},
	} {
		resp, err := http.Get("http://" + httpAddr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != tc.body {
			t.Errorf("GET %s: %d %q, want 200 %q", tc.path, resp.StatusCode, body, tc.body)
		}
	}
}

// TestNoS3CredentialsSaysWhatToSet starts a node on a bucket with no
// credentials anywhere (no variables, a HOME without ~/.aws, the instance
// metadata lookup disabled so nothing leaves the host): start-up fails at
// once, saying so and naming the variables to set.
func TestNoS3CredentialsSaysWhatToSet(t *testing.T) {
	home := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", home)
	t.Setenv("AWS_CONFIG_FILE", home+"/no-config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", home+"/no-credentials")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	var stdout, stderr syncbuf.Buffer
	args := []string{"--data-dir", t.TempDir(), "--client-addr", freeAddr(t), "--http-addr", freeAddr(t),
		"--storage", "s3://netsy", "--s3-endpoint", "http://" + freeAddr(t), "--s3-path-style"}
	if code := Run(context.Background(), args, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{"no S3 credentials found", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up error lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "credentials rejected") || strings.Contains(out, "retrying") {
		t.Errorf("missing credentials reported as rejected, or retried:\n%s", out)
	}
}
