//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
)

// TestClusterPrimaryKillNoFailedWrites: three nodes on MinIO; clients
// write through the two nodes that are not the Primary (four goroutines
// each, every put a new key), the Primary is SIGKILLed, and writes go on
// until the new Primary has taken over. No write fails: a write the dead
// Primary had in flight is resolved by the node that forwarded it (found
// in the new Primary's log, or sent again). Every acknowledged write is
// there afterwards exactly once (version 1: a put applied twice would be
// version 2).
func TestClusterPrimaryKillNoFailedWrites(t *testing.T) {
	skipUnlessNetsy(t)
	srv := miniotest.Start(t)
	c := startCluster(t, 3, srv)
	// The Elector elsewhere, so the kill is the Primary's alone.
	v := c.waitState(30*time.Second, func(v clusterview.View) bool {
		return v.Primary != nil && v.Elector != nil && v.Primary.NodeID != v.Elector.NodeID
	})
	primary := v.Primary.NodeID
	survivors := []string{c.other(primary)}
	survivors = append(survivors, c.other(primary, survivors[0]))

	var (
		stop    atomic.Bool
		failed  atomic.Int64
		mu      sync.Mutex
		acked   []string
		wg      sync.WaitGroup
		errSeen = map[string]int{}
	)
	for si, s := range survivors {
		cli := c.client(s)
		firstWrite(t, cli, "warm-"+s)
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					key := fmt.Sprintf("fw/%d-%d/%d", si, g, i)
					ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
					_, err := cli.Put(ctx, key, "v")
					cancel()
					mu.Lock()
					if err != nil {
						failed.Add(1)
						errSeen[err.Error()]++
					} else {
						acked = append(acked, key)
					}
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
	}
	time.Sleep(time.Second)
	if err := c.nodes[primary].Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	nv := c.waitState(20*time.Second, func(v clusterview.View) bool { return v.Primary != nil && v.Primary.NodeID != primary })
	t.Logf("new Primary %s at term %d, %v after the kill", nv.Primary.NodeID, nv.PrimaryTerm, time.Since(killed).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d writes acknowledged, %d failed", len(acked), failed.Load())
	for e, n := range errSeen {
		t.Errorf("%d writes failed with: %s", n, e)
	}
	if failed.Load() != 0 {
		t.Fatalf("%d writes failed across the Primary's SIGKILL, want 0", failed.Load())
	}
	cli := c.client(survivors[0])
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "fw/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = kv.Version
	}
	for _, k := range acked {
		switch ver, ok := got[k]; {
		case !ok:
			t.Errorf("acknowledged write %s is missing", k)
		case ver != 1:
			t.Errorf("acknowledged write %s is at version %d: applied more than once", k, ver)
		}
	}
}
