//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// TestEtcdctlClusterRPCs: etcd's cluster RPCs on a 3-node cluster on
// MinIO, with the real etcdctl given every node's endpoint. move-leader to
// an unknown member fails and moves nothing; move-leader to a replica makes
// it the leader every endpoint reports; member add answers how nodes join;
// move-leader to a SIGKILLed (Degraded) node fails and moves nothing, and
// member remove deregisters it; two netsyctl handoffs back to back both
// work.
func TestEtcdctlClusterRPCs(t *testing.T) {
	skipUnlessNetsy(t)
	srv := miniotest.Start(t)
	c := startCluster(t, 3, srv)
	elector, primary := c.roles()
	var eps []string
	for _, id := range c.running() {
		eps = append(eps, c.nodes[id].Endpoint)
	}
	etcdctl := &ctl{t: t, bin: procutil.EtcdctlPath(t), endpoint: strings.Join(eps, ",")}

	// Membership reaches every node with the Elector's next push or
	// heartbeat answer.
	members := map[string]uint64{} // node id -> member id
	cli := c.client(c.running()...)
	for start := time.Now(); len(members) != 3; time.Sleep(20 * time.Millisecond) {
		ml, err := cli.MemberList(opCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		clear(members)
		for _, m := range ml.Members {
			members[m.Name] = m.ID
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("member list: %v", ml.Members)
		}
	}
	// liveCtl is etcdctl given the running nodes only: move-leader and
	// endpoint status fail on an endpoint that does not answer.
	liveCtl := func() *ctl {
		var live []string
		for _, id := range c.running() {
			live = append(live, c.nodes[id].Endpoint)
		}
		return &ctl{t: t, bin: etcdctl.bin, endpoint: strings.Join(live, ",")}
	}
	leaderOf := func() map[string]uint64 {
		var status []struct {
			Endpoint string
			Status   struct {
				Leader uint64 `json:"leader"`
			}
		}
		liveCtl().okJSON(&status, "endpoint", "status")
		out := map[string]uint64{}
		for _, st := range status {
			out[st.Endpoint] = st.Status.Leader
		}
		return out
	}

	etcdctl.fails("no registered node has member id 99", "move-leader", "99")
	for ep, l := range leaderOf() {
		if l != members[primary] {
			t.Fatalf("after a refused move-leader, %s reports leader %x, want the Primary %s (%x)", ep, l, primary, members[primary])
		}
	}

	to := c.other(primary, elector)
	start := time.Now()
	want := fmt.Sprintf("Leadership transferred from %x to %x\n", members[primary], members[to])
	if got := etcdctl.ok("move-leader", fmt.Sprintf("%x", members[to])); got != want {
		t.Fatalf("move-leader: %q, want %q", got, want)
	}
	t.Logf("move-leader to %s took %v", to, time.Since(start))
	// Answered once the new Primary is Active: every node names it within
	// a heartbeat or two, and a write through the old Primary works.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok := true
		for _, l := range leaderOf() {
			ok = ok && l == members[to]
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoint status after move-leader to %s (%x): %x", to, members[to], leaderOf())
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustPut(t, c.client(primary), "after-move", "v")

	etcdctl.fails("a node joins by starting with the cluster's bucket", "member", "add", "n4", "--peer-urls=http://127.0.0.1:1")

	// A node killed (not stopped: a graceful stop deregisters itself) stays
	// registered until it is removed; the Elector lets it go once it has
	// heard it is gone and the bucket holds what it acknowledged.
	gone := c.other(to, elector)
	if err := c.nodes[gone].Kill(); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%x", members[gone])
	// Once the Elector judges it Degraded, move-leader to it is refused
	// and moves nothing.
	c.waitState(10*time.Second, func(v clusterview.View) bool {
		for _, n := range v.Nodes {
			if n.NodeID == gone {
				return n.Health == "Degraded"
			}
		}
		return false
	})
	liveCtl().fails("is DEGRADED to the Elector, so it cannot take the Primary role", "move-leader", id)
	for _, l := range leaderOf() {
		if l != members[to] {
			t.Fatalf("a refused move-leader to a Degraded member moved the leader to %x", l)
		}
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		out, errOut, err := liveCtl().run("", "member", "remove", id)
		if err == nil {
			// etcdctl pads the id to 16 hex digits ("%16x"): an id
			// whose top nibble is zero prints with a leading space.
			if want := fmt.Sprintf("Member %16x removed from cluster ", members[gone]); !strings.HasPrefix(out, want) {
				t.Fatalf("member remove: %q", out)
			}
			break
		}
		// Refused until the Elector sees it Degraded and the bucket
		// caught up: each refusal says why.
		if !strings.Contains(errorLines(errOut), "netsy: member remove") || time.Now().After(deadline) {
			t.Fatalf("member remove %s: %v\n%s", gone, err, errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var list struct {
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
	}
	liveCtl().okJSON(&list, "member", "list")
	for _, m := range list.Members {
		if m.Name == gone {
			t.Fatalf("member list still lists %s: %+v", gone, list.Members)
		}
	}
	if len(list.Members) != 2 {
		t.Fatalf("member list: %+v", list.Members)
	}

	// netsyctl handoff returns once the new Primary is Active, so a
	// second one right after moves the role again (and back here).
	var live []string
	for _, id := range c.running() {
		live = append(live, c.nodes[id].ClientAddr)
	}
	for range 2 {
		out := netsyctlOK(t, nil, "handoff", "--endpoints", strings.Join(live, ","), "-o", "json")
		if !strings.Contains(out, `"primary"`) {
			t.Fatalf("handoff: %s", out)
		}
		t.Logf("handoff: %s", strings.Join(strings.Fields(out), " "))
	}
	mustPut(t, c.client(c.running()...), "after-handoffs", "v")
}
