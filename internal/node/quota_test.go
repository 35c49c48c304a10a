package node

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/engine"
)

// A node restarted with a quota below what its store holds refuses to
// start, saying what the store holds and what the quota is.
func TestStartRefusesQuotaSmallerThanTheData(t *testing.T) {
	storage := "file://" + t.TempDir()
	var cfg config.Config
	n := startNode(t, storage, func(c *config.Config) { cfg = *c })
	cli := client(t, n)
	for i := 0; i < 50; i++ {
		if _, err := cli.Put(context.Background(), "k", strings.Repeat("v", 1000)); err != nil {
			t.Fatal(err)
		}
	}
	n.Close()

	cfg.QuotaBackendBytes = 4096
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(testLog{t})})
	again, err := StartWith(ctx, cfg, logger, Deps{Clock: clock.Real(), WaitReady: true})
	if err == nil {
		again.Close()
		t.Fatal("a node whose data is past its quota started")
	}
	if !errors.Is(err, engine.ErrQuotaTooSmall) || !strings.Contains(err.Error(), "--quota-backend-bytes") || !strings.Contains(err.Error(), "quota of 4096 bytes") {
		t.Fatalf("start: %v, want the quota named in ErrQuotaTooSmall", err)
	}
	t.Log(err)
}
