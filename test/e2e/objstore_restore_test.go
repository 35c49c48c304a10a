//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// objstoreArgs are the flags and environment that put a netsy server on
// srv's bucket in sync mode (quorum 0: acknowledged = in object storage).
func minioArgs(srv *miniotest.Server, prefix string) (args, env []string) {
	return []string{
			"--storage", "s3://" + srv.Bucket + "/" + prefix,
			"--s3-endpoint", srv.Endpoint,
			"--s3-region", srv.Region,
			"--s3-path-style",
			"--quorum", "0",
			"--snapshot-every-revisions", "3000",
			"--snapshot-keep", "2",
		}, []string{
			"AWS_ACCESS_KEY_ID=" + srv.AccessKey,
			"AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		}
}

// ackedKey is what a client was told about one write.
type ackedKey struct {
	value string
	rev   int64
}

// ackLog collects acknowledged writes from many goroutines.
type ackLog struct {
	mu   sync.Mutex
	keys map[string]ackedKey
}

func (a *ackLog) add(key, value string, rev int64) {
	a.mu.Lock()
	a.keys[key] = ackedKey{value, rev}
	a.mu.Unlock()
}

// checkAcked reads prefix and checks every acknowledged key is there with
// its value and mod revision.
func checkAcked(t *testing.T, cli *clientv3.Client, prefix string, acked *ackLog) {
	t.Helper()
	kvs, rev, err := readAllAt(t.Context(), cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]ackedKey, len(kvs))
	for _, kv := range kvs {
		got[string(kv.Key)] = ackedKey{string(kv.Value), kv.ModRevision}
	}
	acked.mu.Lock()
	defer acked.mu.Unlock()
	missing := 0
	for k, want := range acked.keys {
		if g, ok := got[k]; !ok || g != want {
			if missing++; missing <= 10 {
				t.Errorf("acknowledged %s=%q at revision %d; after restore: %+v (present %v)", k, want.value, want.rev, g, ok)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged writes lost or changed (store revision %d)", missing, len(acked.keys), rev)
	}
	t.Logf("all %d acknowledged writes present at their revisions (store revision %d)", len(acked.keys), rev)
}

// TestObjstoreRestoreAfterWipe writes 10k keys from 64 concurrent clients
// in sync mode, SIGKILLs netsy, deletes its data directory and restarts
// it: everything acknowledged must come back from object storage alone,
// at its revision. Once against MinIO, once against the file store.
func TestObjstoreRestoreAfterWipe(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	if target != procutil.KindNetsy {
		t.Skip("object storage is netsy's own")
	}
	t.Run("minio", func(t *testing.T) {
		srv := miniotest.Start(t)
		args, env := minioArgs(srv, "restore")
		wipeAndRestore(t, args, env)
	})
	t.Run("file", func(t *testing.T) {
		args := []string{
			"--storage", "file://" + t.TempDir(),
			"--quorum", "0",
			"--snapshot-every-revisions", "3000",
			"--snapshot-keep", "2",
		}
		wipeAndRestore(t, args, nil)
	})
}

func wipeAndRestore(t *testing.T, args, env []string) {
	const (
		writers = 64
		total   = 10_000
		clients = 8
	)
	s := procutil.StartNetsy(t, procutil.Options{Args: args, Env: env})
	clis := make([]*clientv3.Client, clients)
	for i := range clis {
		clis[i] = newClient(t, s)
	}
	acked := &ackLog{keys: map[string]ackedKey{}}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := clis[w%clients]
			for n := w; n < total; n += writers {
				key, value := fmt.Sprintf("restore/%05d", n), fmt.Sprintf("v%d-%d", n, w)
				ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
				resp, err := cli.Put(ctx, key, value)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("put %s: %w", key, err)
					return
				}
				acked.add(key, value, resp.Header.Revision)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	t.Logf("%d puts from %d writers acknowledged in %v (%.0f/s)", total, writers, elapsed.Round(time.Millisecond), total/elapsed.Seconds())

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.DataDir); err != nil {
		t.Fatal(err)
	}
	restartAt := time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted on an empty data directory in %v", time.Since(restartAt).Round(time.Millisecond))
	checkAcked(t, newClient(t, s), "restore/", acked)
}
