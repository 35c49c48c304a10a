//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// TestDataDirDeletedUnderARunningNode: `rm -rf` of a single node's data
// directory, and of a replica's in a 3-node cluster. Within a few seconds
// the node's /healthz is 503 naming the lost directory, it logs an error
// line, and it acknowledges no more writes; the cluster writes on
// through its Primary.
func TestDataDirDeletedUnderARunningNode(t *testing.T) {
	skipUnlessNetsy(t)
	lost := func(t *testing.T, s *procutil.Server) {
		t.Helper()
		if err := os.RemoveAll(s.DataDir); err != nil {
			t.Fatal(err)
		}
		code, body := waitHealthz(s, http.StatusServiceUnavailable, 5*time.Second)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "data directory was deleted") {
			t.Fatalf("/healthz 5 s after rm -rf of the data directory: %d %q", code, body)
		}
		if !strings.Contains(s.LogTail(200), "DATA DIRECTORY LOST") {
			t.Errorf("no error line in the log:\n%s", s.LogTail(40))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		if _, err := newClient(t, s).Put(ctx, "after-rm", "v"); err == nil {
			t.Error("a write was acknowledged by a node without its data directory")
		}
	}
	t.Run("single node", func(t *testing.T) {
		// The bucket outside the data directory, as in production: the
		// node drains to it as it steps down.
		s := procutil.StartNetsy(t, procutil.Options{Args: []string{"--storage", "file://" + t.TempDir()}})
		mustPut(t, newClient(t, s), "before-rm", "v")
		lost(t, s)
	})
	t.Run("replica", func(t *testing.T) {
		c := startCluster(t, 3, nil)
		elector, primary := c.roles()
		replica := c.other(primary, elector)
		mustPut(t, c.client(replica), "before-rm", "v")
		lost(t, c.nodes[replica])
		mustPut(t, c.client(primary), "after-rm-primary", "v")
	})
}
