package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A Primary whose every link freezes (as a kill -STOP does to a process:
// connections stay open, nothing moves) is replaced while writes go on
// through the other nodes; once its links move again it steps down,
// follows the new Primary within 2 s, and reads its own writes: a put
// through it is seen at once by a serializable get on it, and linearizable
// reads work there.
func TestPausedPrimaryStepsDownAndFollowsWithinTwoSeconds(t *testing.T) {
	for _, q := range []int{0, -1} {
		t.Run(fmt.Sprintf("quorum%d", q), func(t *testing.T) {
			c := newTestCluster(t, q, "n1", "n2", "n3")
			old := c.separated(10 * time.Second)
			var others []string
			for _, id := range c.ids() {
				if id != old {
					others = append(others, id)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			if _, err := c.client(old).Put(ctx, "before", "pause"); err != nil {
				t.Fatal(err)
			}
			for _, id := range others {
				c.net.Stall(old, id)
			}
			paused := time.Now()
			// Writes go on through the others. Those forwarded to the paused
			// Primary fail (their outcome is unknown, as on etcd when the
			// leader hangs) until the new Primary takes over.
			cli := c.client(others[0])
			newPrimary, acked := "", 0
			for i := 0; newPrimary == "" || acked < 10 || time.Since(paused) < 2*time.Second; i++ {
				pctx, pcancel := context.WithTimeout(ctx, time.Second)
				_, err := cli.Put(pctx, fmt.Sprintf("during%d", i), "v")
				pcancel()
				if err == nil && newPrimary != "" {
					acked++
				}
				if p, _ := c.node(others[0]).roles.Primary(); p != nil && p.NodeId != old && c.node(p.NodeId).roles.Active() {
					newPrimary = p.NodeId
				}
				if time.Since(paused) > 20*time.Second {
					var why []string
					for _, id := range others {
						p, term := c.node(id).roles.Primary()
						why = append(why, fmt.Sprintf("%s: Primary %s at term %d, %v", id, p.GetNodeId(), term, c.node(id).notReady()))
					}
					t.Fatalf("after 20 s, %d writes acknowledged by a new Primary (%q) while %s is paused: %v", acked, newPrimary, old, why)
				}
			}
			for _, id := range others {
				c.net.Unstall(old, id)
			}
			resumed := time.Now()
			n := c.node(old)
			for {
				p, _ := n.roles.Primary()
				err := n.notReady()
				if err == nil && p != nil && p.NodeId == newPrimary {
					break
				}
				if time.Since(resumed) > 2*time.Second {
					t.Fatalf("2 s after it can talk again, the old Primary %s (Primary known: %v) is not ready: %v", old, p.GetNodeId(), err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("the old Primary %s follows the new Primary %s %v after it can talk again", old, newPrimary, time.Since(resumed))
			oc := c.client(old)
			for i := range 20 {
				k := fmt.Sprintf("after%d", i)
				put, err := oc.Put(ctx, k, "v")
				if err != nil {
					t.Fatalf("put %s through the old Primary: %v", k, err)
				}
				got, err := oc.Get(ctx, k, clientv3.WithSerializable())
				if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != put.Header.Revision {
					t.Fatalf("serializable get of %s on the old Primary after its put at %d: %v %v", k, put.Header.Revision, got, err)
				}
			}
			lin, err := oc.Get(ctx, "during", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || lin.Count < int64(acked) {
				t.Fatalf("linearizable count on the old Primary of the writes made while it was paused (%d acknowledged after the new Primary took over): %v %v", acked, lin, err)
			}
			if got, err := oc.Get(ctx, "before"); err != nil || len(got.Kvs) != 1 {
				t.Fatalf("the write acknowledged before the pause, read on the old Primary: %v %v", got, err)
			}
			// Whatever the old Primary wrote at its old term that the new
			// one lacks was never acknowledged: it serves exactly the new
			// Primary's history.
			want, err := c.client(newPrimary).Get(ctx, "", clientv3.WithPrefix(), clientv3.WithSerializable())
			if err != nil {
				t.Fatal(err)
			}
			got, err := oc.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithSerializable())
			if err != nil {
				t.Fatal(err)
			}
			if got.Header.Revision != want.Header.Revision || len(got.Kvs) != len(want.Kvs) {
				t.Fatalf("the old Primary serves %d keys at revision %d, the new Primary %d at %d", len(got.Kvs), got.Header.Revision, len(want.Kvs), want.Header.Revision)
			}
			for i, kv := range got.Kvs {
				if w := want.Kvs[i]; string(kv.Key) != string(w.Key) || kv.ModRevision != w.ModRevision || string(kv.Value) != string(w.Value) {
					t.Fatalf("the old Primary serves %s at %d, the new Primary %s at %d", kv.Key, kv.ModRevision, w.Key, w.ModRevision)
				}
			}
		})
	}
}
