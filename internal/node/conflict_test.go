package node

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// A node alone under --quorum -1 acknowledges a write once it is fsync'd
// locally, before its chunk is uploaded. If another writer then puts a
// different entry at that index into the bucket (two processes shared it
// without the election), the node must not start: dropping its entry would
// lose an acknowledged write, keeping it would fork the bucket's history.
// The error names the local segment and the chunk.
func TestContradictedAcknowledgedWriteStopsALoneNode(t *testing.T) {
	bucketDir := filepath.Join(t.TempDir(), "bucket")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	bucket, err := objopen.Open(ctx, "file://"+bucketDir, objopen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	faults := faulty.New(bucket, clock.Real())
	dataDir := t.TempDir()
	peerAddr, clientAddr, httpAddr := freePeerAddr(t), freePeerAddr(t), freePeerAddr(t)
	cfg := func(c *config.Config) {
		c.DataDir = dataDir
		c.PeerAddr, c.ClientAddr, c.HTTPAddr = peerAddr, clientAddr, httpAddr
		c.Quorum = -1
	}

	n := startNodeWith(t, cfg, Deps{Store: faults})
	cli := newTestClient(t, n)
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	// Everything so far is in the bucket (uploads run in the background).
	last0, _, _ := n.eng.LastAppended()
	for n.objlog.Stats().Uploaded < last0 {
		if ctx.Err() != nil {
			t.Fatalf("entries up to %d never reached the bucket", last0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Uploads stop reaching the bucket; the node alone still acknowledges.
	fail := faults.Fail(faulty.PutIfAbsent, "wal/")
	if _, err := cli.Put(ctx, "k", "v2"); err != nil {
		t.Fatalf("a lone --quorum -1 node did not acknowledge on its fsync: %v", err)
	}
	last, rev, _ := n.eng.LastAppended()
	if last != last0+1 {
		t.Fatalf("the put appended up to index %d, want %d", last, last0+1)
	}
	n.shutdown(false)
	fail.Stop()

	// The other writer: its entry at the same index reaches the bucket.
	synced := make(chan uint64, 16)
	intruder, err := objwal.Open(ctx, objwal.Options{Store: bucket, WALDir: t.TempDir(), Mode: objwal.ModeSync,
		OnSync: func(i uint64, err error) {
			if err != nil {
				t.Errorf("intruder: %v", err)
				close(synced)
				return
			}
			synced <- i
		}})
	if err != nil {
		t.Fatal(err)
	}
	err = intruder.Append(&netsyv1.Entry{Index: last, Revision: rev,
		Ops: []*netsyv1.Op{{Key: []byte("intruder"), Value: []byte("was here")}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range synced {
		if i == last {
			break
		}
	}
	if err := intruder.Close(); err != nil {
		t.Fatal(err)
	}

	c := config.Default()
	cfg(&c)
	_, err = StartWith(ctx, c, hclog.New(&hclog.LoggerOptions{Output: io.Discard}), Deps{Store: bucket, WaitReady: true})
	if err == nil {
		t.Fatal("a lone --quorum -1 node whose acknowledged write the bucket contradicts started")
	}
	if !errors.Is(err, objwal.ErrHistoryConflict) {
		t.Errorf("error %v is not ErrHistoryConflict", err)
	}
	for _, want := range []string{filepath.Join(dataDir, "wal"), "wal/", "acknowledged"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
