package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/objstore"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// An unknown node is an error with a clear message, told apart by its
// reason, not its text.
func TestDeregisterUnknownNodeFails(t *testing.T) {
	c := startCluster(t)
	c.n1.deregErr = peer.Error(codes.NotFound, peer.ReasonUnknownNode, "some text that may change")
	_, errOut, code := run(t, "deregister", "--peer-endpoints", c.n2.addr, "n9")
	if code == 0 || !strings.Contains(errOut, "deregister n9: node n9 is not registered with the Elector (n1); netsyctl members lists the registered nodes") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// --force is sent to the Elector, and what a forced removal may have lost
// is printed (and in -o json).
func TestDeregisterForceSaysWhatMayBeLost(t *testing.T) {
	c := startCluster(t)
	c.n1.deregResp = &netsyv1.DeregisterNodeResponse{LastIndex: 1234, LastIndexKnown: true, DurableTip: 1190, DurableTipKnown: true, Forced: true}
	out, errOut, code := run(t, "deregister", "--peer-endpoints", c.n2.addr, "--force", "n2")
	want := "deregistered n2 (Elector n1 at " + c.n1.addr + ")\n" +
		"forced: node n2 last reported index 1234; object storage holds up to 1190; up to 44 acknowledged entries may be lost\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d: %q (want %q) %s", code, out, want, errOut)
	}
	if r := c.n1.deregReqs; len(r) != 1 || !r[0].Force || r[0].NodeId != "n2" {
		t.Fatalf("Elector got %v, want one forced request for n2", r)
	}
	out, _, code = run(t, "deregister", "--peer-endpoints", c.n2.addr, "--force", "-o", "json", "n2")
	d := decode[deregistered](t, out)
	if code != 0 || !d.Forced || !strings.Contains(d.Warning, "up to 44 acknowledged entries may be lost") {
		t.Fatalf("-o json: exit %d %+v", code, d)
	}
}

// A refusal by a running Elector is reported as it said it; the bucket is
// never touched behind its back even with --storage.
func TestDeregisterRefusedByElectorDoesNotFallBackToBucket(t *testing.T) {
	c := startCluster(t)
	dir := t.TempDir()
	s := openStore(t, "file://"+dir)
	if err := discovery.Register(context.Background(), s, discovery.Registration{NodeID: "n2", ClusterID: "c-1", PeerAddr: "10.0.0.2:2380"}); err != nil {
		t.Fatal(err)
	}
	c.n1.deregErr = peer.Error(codes.FailedPrecondition, peer.ReasonNotDurable, "node n2 is not answering and it last reported log index 50; object storage holds up to 10")
	_, errOut, code := run(t, "deregister", "--peer-endpoints", c.n2.addr, "--storage", "file://"+dir, "n2")
	if code == 0 || !strings.Contains(errOut, "object storage holds up to 10") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, _, err := s.Get(context.Background(), discovery.NodeKey("n2")); err != nil {
		t.Fatalf("the registration was touched although an Elector refused: %v", err)
	}
}

func openStore(t *testing.T, url string) objstore.Store {
	t.Helper()
	s, err := objopen.Open(context.Background(), url, objopen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// With the cluster stopped (nothing answers on the peer addresses),
// --storage lets netsyctl delete the registration itself: only with
// --force (it cannot know the node's last index), after saying so; an
// unknown id is refused.
func TestDeregisterStoppedClusterInBucket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "file://" + dir
	s := openStore(t, url)
	for _, id := range []string{"n1", "n2"} {
		if err := discovery.Register(ctx, s, discovery.Registration{NodeID: id, ClusterID: "c-1", PeerAddr: "10.0.0.9:2380"}); err != nil {
			t.Fatal(err)
		}
	}
	dead := freeAddr(t)
	base := []string{"deregister", "--peer-endpoints", dead, "--timeout", "5s", "--storage", url}

	out, errOut, code := run(t, append(base, "n2")...)
	if code == 0 || !strings.Contains(out, "no Elector answered") ||
		!strings.Contains(errOut, "object storage holds the log up to index 0") || !strings.Contains(errOut, "--force") {
		t.Fatalf("without --force: exit %d: %s%s", code, out, errOut)
	}
	if _, _, err := s.Get(ctx, discovery.NodeKey("n2")); err != nil {
		t.Fatalf("deleted without --force: %v", err)
	}

	_, errOut, code = run(t, append(base, "--force", "n9")...)
	if code == 0 || !strings.Contains(errOut, "node n9 is not registered in "+url) {
		t.Fatalf("unknown node: exit %d: %s", code, errOut)
	}

	out, errOut, code = run(t, append(base, "--force", "n2")...)
	if code != 0 || !strings.Contains(out, "deleting nodes/n2.json from "+url+" directly") ||
		!strings.Contains(out, "deregistered n2 (deleted nodes/n2.json from "+url) || !strings.Contains(out, "may be lost") {
		t.Fatalf("with --force: exit %d: %s%s", code, out, errOut)
	}
	if _, _, err := s.Get(ctx, discovery.NodeKey("n2")); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("nodes/n2.json after a forced deregistration: %v", err)
	}
	if _, _, err := s.Get(ctx, discovery.NodeKey("n1")); err != nil {
		t.Fatalf("n1's registration: %v", err)
	}
}
