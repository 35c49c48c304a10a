package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHelpListsEveryFlag(t *testing.T) {
	var out syncBuffer
	if code := Run(context.Background(), []string{"--help"}, &out); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, f := range []string{"-data-dir", "-client-addr", "-http-addr", "-progress-notify-interval", "-log-level", "-log-format",
		"-storage", "-s3-endpoint", "-s3-region", "-s3-path-style", "-quorum", "-snapshot-every-revisions", "-snapshot-keep", "NETSY_"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

func TestBadValueNamesTheFlag(t *testing.T) {
	var out syncBuffer
	code := Run(context.Background(), []string{"--log-format", "xml", "--data-dir", t.TempDir()}, &out)
	if code == 0 || !strings.Contains(out.String(), "--log-format") {
		t.Fatalf("exit %d, output %q", code, out.String())
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
	var out syncBuffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, &out) }()
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
