package node

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// startNode starts a node on loopback ports with the given storage URL.
func startNode(t *testing.T, storage string, edit func(*config.Config), logs ...io.Writer) *Node {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr = freePeerAddr(t)
	cfg.HTTPAddr = freePeerAddr(t)
	cfg.PeerAddr = freePeerAddr(t)
	cfg.Storage = storage
	if edit != nil {
		edit(&cfg)
	}
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(append(logs, testLog{t})...)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := StartWith(ctx, cfg, logger, Deps{Clock: clock.Real(), WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func client(t *testing.T, n *Node) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n.ClientAddr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func httpGet(t *testing.T, n *Node, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A second writer that bypassed the election claims the bucket under a
// Primary (an intruder with its own log and no Elector, the case the fence
// exists for). The Primary's next write collides: it is not acknowledged,
// the Primary logs the deposition at error level and steps down. Until it
// has caught up with the bucket again (held here by failing its reads of
// the wal) it serves no linearizable read, its watches deliver nothing
// the bucket does not hold, serializable reads still answer, and /healthz,
// /readyz and etcd's /health name the deposition. Once the bucket answers,
// it is elected again and first catches up, so the intruder's entry is
// part of its history: the bucket wins, and the history stays linear.
func TestFencedPrimaryStepsDownAndTheBucketWins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bucket, err := objopen.Open(ctx, "file://"+filepath.Join(t.TempDir(), "bucket"), objopen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	faults := faulty.New(bucket, clock.Real())
	var logs syncLog
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = freePeerAddr(t), freePeerAddr(t), freePeerAddr(t)
	cfg.Quorum = 0
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(&logs, testLog{t})})
	a, err := StartWith(ctx, cfg, logger, Deps{Clock: clock.Real(), Store: faults, WaitReady: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ca := client(t, a)
	if _, err := ca.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	// A watch open before the deposition, caught up.
	old := openWatch(t, ctx, ca)
	for n := 0; n < 1; {
		wr, err := old.Recv()
		if err != nil {
			t.Fatal(err)
		}
		n += len(wr.Events)
	}
	events := make(chan *mvccpb.Event, 16)
	go func() {
		for {
			wr, err := old.Recv()
			if err != nil {
				close(events)
				return
			}
			for _, ev := range wr.Events {
				events <- ev
			}
		}
	}()

	// The intruder: a writer of its own on the same bucket.
	synced := make(chan uint64, 16)
	intruder, err := objwal.Open(ctx, objwal.Options{
		Store: bucket, WALDir: t.TempDir(), Mode: objwal.ModeSync,
		OnSync: func(i uint64, err error) {
			if err == nil {
				synced <- i
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	last, rev, _ := a.eng.LastAppended()
	err = intruder.Append(&netsyv1.Entry{Index: last + 1, Revision: rev + 1,
		Ops: []*netsyv1.Op{{Key: []byte("intruder"), Value: []byte("was here")}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range synced {
		if i == last+1 {
			break
		}
	}
	if err := intruder.Close(); err != nil {
		t.Fatal(err)
	}

	// From here the node cannot list the bucket's wal: its Starting step
	// cannot catch up, so it stays deposed.
	hold := faults.Fail(faulty.List, "wal/")
	if _, err := ca.Put(ctx, "k", "v2"); err == nil {
		t.Fatal("a write on the fenced Primary was acknowledged")
	}
	if !regexp.MustCompile(`\[ERROR\] [a-z]+: DEPOSED`).MatchString(logs.String()) {
		t.Fatalf("no DEPOSED error line in the log:\n%s", logs.String())
	}
	for _, path := range []string{"/healthz", "/readyz", "/health"} {
		code, body := httpGet(t, a, path)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "deposed") || !strings.Contains(body, "another writer took over object storage") {
			t.Errorf("%s on the deposed node: %d %q, want 503 naming the deposition", path, code, body)
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	if got, err := ca.Get(rctx, "intruder"); err == nil {
		t.Errorf("a linearizable read on the deposed node answered: %v (revision %d)", got.Kvs, got.Header.Revision)
	}
	rcancel()
	got, err := ca.Get(ctx, "k", clientv3.WithSerializable())
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("serializable read on the deposed node: %v, %v", got, err)
	}
	select {
	case ev := <-events:
		t.Fatalf("a watch on the deposed node delivered %s=%s before it caught up with the bucket", ev.Kv.Key, ev.Kv.Value)
	default:
	}

	// The bucket answers again: elected again (a new term), the node
	// catches up with the bucket first.
	hold.Stop()
	if err := a.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, a, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz after the node took over again: %d %q", code, body)
	}
	if _, err := ca.Put(ctx, "k", "v3"); err != nil {
		t.Fatalf("write after the node took over again: %v", err)
	}
	got, err = ca.Get(ctx, "intruder")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "was here" {
		t.Fatalf("the intruder's entry, in the bucket, is not in the node's history: %v %v", got, err)
	}
	kv, err := ca.Get(ctx, "k")
	if err != nil || string(kv.Kvs[0].Value) != "v3" || kv.Kvs[0].Version != 2 {
		t.Fatalf("k after the takeover: %v %v (the refused v2 must not be there)", kv, err)
	}
	// The watch carries the bucket's history: the intruder's entry never
	// touched k, and v2 was never committed; v3 follows v1.
	select {
	case ev := <-events:
		if string(ev.Kv.Value) != "v3" {
			t.Fatalf("the watch delivered %s=%s after v1, want v3", ev.Kv.Key, ev.Kv.Value)
		}
	case <-ctx.Done():
		t.Fatal("the watch delivered nothing after the node took over again")
	}
}

// syncLog is a log buffer the logger and the test share.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// openWatch opens a raw watch stream on key "k" from revision 1.
func openWatch(t *testing.T, ctx context.Context, cli *clientv3.Client) pb.Watch_WatchClient {
	t.Helper()
	ws, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// freePeerAddr is a free loopback address in the test port range (never
// an ephemeral port another connection may take): addresses a node
// advertises cannot be port 0.
func freePeerAddr(t *testing.T) string {
	t.Helper()
	return procutil.FreeAddr(t)
}
