package etcdapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/h2count"
)

// A client that writes one request at a time gets one response each and
// no flow-control probe: gRPC's bandwidth-delay estimation answered nearly
// every such request with a WINDOW_UPDATE and a PING, one more write here
// and a read and a write on the client, on the path of a sequential put.
func TestSequentialPutsSendNoFlowControlPings(t *testing.T) {
	fc := &h2count.Counter{}
	srv := New(Config{Backend: newFakeBackend()})
	e := &testEnv{t: t, addr: serveOn(t, srv, fc.Listener)}
	cli := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	val := strings.Repeat("v", 256)
	put := func(i int) {
		t.Helper()
		if _, err := cli.Put(ctx, fmt.Sprintf("k%06d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	// The connection's set-up (settings and their acks) first.
	for i := range 5 {
		put(i)
	}
	const n = 200
	writes, pings := fc.Writes.Load(), fc.Pings.Load()
	for i := range n {
		put(i)
	}
	writes, pings = fc.Writes.Load()-writes, fc.Pings.Load()-pings
	t.Logf("%d sequential puts: %d server writes, %d pings started by the server", n, writes, pings)
	if pings > 0 {
		t.Fatalf("%d sequential puts made the server start %d pings (%d writes); want none", n, pings, writes)
	}
}
