//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// waitHealthz polls GET /healthz on s until it answers want or within
// runs out, and returns the last answer.
func waitHealthz(s *procutil.Server, want int, within time.Duration) (int, string) {
	deadline := time.Now().Add(within)
	for {
		code, body := 0, ""
		if resp, err := http.Get("http://" + s.HTTPAddr + "/healthz"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, body = resp.StatusCode, string(b)
		} else {
			body = err.Error()
		}
		if code == want || time.Now().After(deadline) {
			return code, body
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// outageWrite is one attempted write.
type outageWrite struct {
	key, value string
	rev        int64
	err        error
	done       time.Time
}

// TestObjstoreMinIOOutage freezes MinIO (SIGSTOP: requests hang, as on a
// dead network path) for 10 s under a steady sync-mode write load. Writes
// must fail (Unavailable once the backlog is stale) rather than be
// acknowledged without reaching storage, /healthz must be 503 saying so
// meanwhile and 200 again after, writes resume once MinIO is back, and
// nothing acknowledged may be lost — checked on the live server and again
// after a restore from the bucket onto an empty data directory.
func TestObjstoreMinIOOutage(t *testing.T) {
	if target != procutil.KindNetsy {
		t.Skip("object storage is netsy's own")
	}
	const (
		writers = 8
		outage  = 10 * time.Second
	)
	srv := miniotest.Start(t)
	args, env := minioArgs(srv, "outage")
	s := procutil.StartNetsy(t, procutil.Options{Args: args, Env: env})
	cli := newClient(t, s)

	var (
		mu     sync.Mutex
		writes []outageWrite
	)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				key, value := fmt.Sprintf("outage/w%d/%06d", w, n), fmt.Sprintf("v%d", n)
				opCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
				resp, err := cli.Put(opCtx, key, value)
				cancel()
				if ctx.Err() != nil {
					return
				}
				ow := outageWrite{key: key, value: value, err: err, done: time.Now()}
				if err == nil {
					ow.rev = resp.Header.Revision
				}
				mu.Lock()
				writes = append(writes, ow)
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}

	time.Sleep(2 * time.Second)
	t.Cleanup(func() { syscall.Kill(srv.PID, syscall.SIGCONT) })
	if err := syscall.Kill(srv.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	// While writes fail, /healthz says so (once the oldest entry has
	// waited 5 s for upload).
	code, body := waitHealthz(s, http.StatusServiceUnavailable, outage-time.Second)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "writes fail: object storage unavailable") {
		t.Errorf("/healthz during the outage: %d %q", code, body)
	}
	t.Logf("/healthz %v into the outage: %d %s", time.Since(frozen).Round(100*time.Millisecond), code, strings.TrimSpace(body))
	time.Sleep(time.Until(frozen.Add(outage)))
	if err := syscall.Kill(srv.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	if code, body := waitHealthz(s, http.StatusOK, 15*time.Second); code != http.StatusOK {
		t.Errorf("/healthz after the outage: %d %q", code, body)
	}
	// Writes resume: wait for acknowledgements after the thaw (an event),
	// not a fixed 5 s; every writer gets a few through, so the checks
	// below see the server writing again, not one lucky put.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		resumed := 0
		for _, w := range writes {
			if w.err == nil && w.done.After(thawed) {
				resumed++
			}
		}
		mu.Unlock()
		if resumed >= 10*writers {
			break
		}
	}
	stop()
	wg.Wait()

	var before, during, after, failed, unavailable int
	acked := &ackLog{keys: map[string]ackedKey{}}
	for _, w := range writes {
		if w.err != nil {
			failed++
			if status.Code(errors.Unwrap(w.err)) == codes.Unavailable || status.Code(w.err) == codes.Unavailable {
				unavailable++
			}
			continue
		}
		acked.add(w.key, w.value, w.rev)
		switch {
		case w.done.Before(frozen):
			before++
		case w.done.Before(thawed):
			during++
			// A write acknowledged well into the outage never reached the
			// bucket: that would be an acknowledged write a crash could lose.
			if w.done.After(frozen.Add(500 * time.Millisecond)) {
				t.Errorf("%s acknowledged at revision %d, %v into the outage", w.key, w.rev, w.done.Sub(frozen).Round(time.Millisecond))
			}
		default:
			after++
		}
	}
	t.Logf("acknowledged: %d before, %d during, %d after the outage; %d failed (%d Unavailable)", before, during, after, failed, unavailable)
	if failed == 0 || unavailable == 0 {
		t.Errorf("a 10 s outage produced %d failed writes, %d of them Unavailable; want both > 0", failed, unavailable)
	}
	if after == 0 {
		t.Errorf("no write was acknowledged in the 10 s after MinIO came back")
	}
	checkAcked(t, cli, "outage/", acked)

	// Everything acknowledged is in the bucket, not only on the local disk.
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	checkAcked(t, newClient(t, s), "outage/", acked)
}
