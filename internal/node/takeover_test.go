package node

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/syncbuf"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
)

// A lone node that crashed restarts with another --http-addr: its old
// registration's peer address answers as nobody, so the node takes the
// registration over and logs it (it used to refuse to start, and on a lone
// node nothing could deregister it). A second process of the same node id
// while the first one answers still refuses to start.
func TestRestartWithChangedAddressTakesOverItsRegistration(t *testing.T) {
	storage := "file://" + t.TempDir()
	dataDir := t.TempDir()
	peerAddr := freePeerAddr(t)
	first := startNode(t, storage, func(c *config.Config) { c.DataDir, c.PeerAddr = dataDir, peerAddr })
	if _, err := client(t, first).Put(t.Context(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	first.shutdown(false) // a crash: the registration stays

	logs := &syncbuf.Buffer{}
	second := startNode(t, storage, func(c *config.Config) {
		c.DataDir, c.PeerAddr = dataDir, peerAddr
		c.HTTPAddr = freePeerAddr(t) // not the address registered
	}, logs)
	if !strings.Contains(logs.String(), "took over this node id's registration") {
		t.Fatalf("the restarted node did not log the takeover; its log:\n%s", logs)
	}
	resp, err := client(t, second).Get(t.Context(), "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after the takeover: get k = %v, %v", resp, err)
	}

	// The same node id elsewhere while this process answers: refused.
	cfg := config.Default()
	cfg.DataDir, cfg.Storage = t.TempDir(), storage
	cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = freePeerAddr(t), freePeerAddr(t), freePeerAddr(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
	n, err := StartWith(ctx, cfg, logger, Deps{Clock: clock.Real()})
	if err == nil {
		n.Close()
		t.Fatal("a second process of a node id whose registered process answers started")
	}
	if !errors.Is(err, discovery.ErrConflict) {
		t.Fatalf("second process: %v, want the conflicting registration error", err)
	}
}
