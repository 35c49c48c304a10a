//go:build e2e

package e2e

import (
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// TestClusterLeaseKeepsRemainingTime: three nodes on MinIO. A lease granted
// with TTL 30 through etcdctl keeps counting down across a handoff (the new
// Primary does not grant it 30 s again), every node tells the same
// remaining time, and a keep-alive through any node reaches every node's
// TimeToLive within about a second.
func TestClusterLeaseKeepsRemainingTime(t *testing.T) {
	skipUnlessNetsy(t)
	srv := miniotest.Start(t)
	c := startCluster(t, 3, srv)
	_, primary := c.roles()
	via := newCtl(t, c.nodes[c.other(primary)])
	id := via.expectMatch(`lease ([0-9a-f]+) granted with TTL\(30s\)\n`, "lease", "grant", "30")[1]
	via.expect("OK\n", "put", "--lease="+id, "lease/k", "v")

	// remaining asks every node for the lease's remaining time.
	remaining := func() map[string]int {
		t.Helper()
		out := map[string]int{}
		for _, n := range c.running() {
			m := newCtl(t, c.nodes[n]).expectMatch(`lease `+id+` granted with TTL\(30s\), remaining\((\d+)s\)\n`, "lease", "timetolive", id)
			out[n], _ = strconv.Atoi(m[1])
		}
		return out
	}

	time.Sleep(3 * time.Second)
	out, err := exec.Command(procutil.BuildNetsyctl(t), "handoff", "--endpoints", c.nodes[c.other(primary)].ClientAddr).CombinedOutput()
	if err != nil {
		t.Fatalf("netsyctl handoff: %v\n%s", err, out)
	}
	c.waitState(10*time.Second, func(v clusterview.View) bool { return v.Primary != nil && v.Primary.NodeID != primary })
	after := remaining()
	t.Logf("remaining after the handoff: %v", after)
	lo, hi := 30, 0
	for n, r := range after {
		if r > 28 || r < 15 {
			t.Errorf("node %s: %d s left after 3 s and a handoff, want at most 28 (the lease must keep counting down)", n, r)
		}
		lo, hi = min(lo, r), max(hi, r)
	}
	if hi-lo > 1 {
		t.Errorf("the nodes disagree on the remaining time: %v", after)
	}

	via.expect("lease "+id+" keepalived with TTL(30)\n", "lease", "keep-alive", "--once", id)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, renewed := remaining(), true
		for _, r := range got {
			renewed = renewed && r >= 27
		}
		if renewed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the keep-alive did not reach every node's TimeToLive within 5 s: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
