package node

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// etcd's MoveLeader moves the Primary to the member named, through any
// node, and answers once that member is the Active Primary: a write
// through it and a second move right after both work. An unknown member
// is NotFound and moves nothing.
func TestMoveLeaderMovesThePrimaryAndASecondMoveRightAfterWorks(t *testing.T) {
	c := newTestCluster(t, -1, "n1", "n2", "n3")
	primary := c.separated(10 * time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	allHealthy(t, c)
	var others []string
	for _, id := range c.ids() {
		if id != primary {
			others = append(others, id)
		}
	}
	cli := c.client(others[0])
	if _, err := cli.MoveLeader(ctx, 0x99); status.Code(err) != codes.NotFound {
		t.Fatalf("move-leader to an unknown member: %v", err)
	}
	if p, _ := c.node(others[0]).roles.Primary(); p.GetNodeId() != primary {
		t.Fatalf("a refused move-leader moved the Primary to %s", p.GetNodeId())
	}
	for _, to := range []string{others[0], others[1]} {
		start := time.Now()
		if _, err := cli.MoveLeader(ctx, c.node(to).roles.MemberID()); err != nil {
			t.Fatalf("move-leader to %s: %v", to, err)
		}
		// Answered only once the new Primary is Active.
		if !c.node(to).roles.Active() {
			t.Fatalf("move-leader to %s answered before it was Active", to)
		}
		t.Logf("move-leader to %s took %v", to, time.Since(start))
		if _, err := cli.Put(ctx, "after-"+to, "v"); err != nil {
			t.Fatalf("write after the move to %s: %v", to, err)
		}
	}
	if p := c.ready(10 * time.Second); p != others[1] {
		t.Fatalf("the Primary is %s, want %s", p, others[1])
	}
}

// allHealthy waits until the Elector judges every node Healthy (a new
// Elector hears each node's heartbeat before it counts it Healthy).
func allHealthy(t *testing.T, c *testCluster) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		healthy := 0
		if el := c.elector(); el != "" {
			if cs, err := c.node(el).roles.RunningElector().ClusterState(t.Context(), true); err == nil {
				for _, n := range cs.Nodes {
					if n.Health == netsyv1.HealthState_HEALTHY {
						healthy++
					}
				}
			}
		}
		if healthy == len(c.ids()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes Healthy to the Elector", healthy, len(c.ids()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
