package node

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
)

// startNode starts a node on loopback ports with the given storage URL.
func startNode(t *testing.T, storage string, edit func(*config.Config)) *Node {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Storage = storage
	if edit != nil {
		edit(&cfg)
	}
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testLog{t}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg, logger, clock.Real())
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

// Two nodes on one bucket: once the second has claimed the next wal seq,
// the first one's next write collides. From then on the first refuses
// writes, linearizable reads, watches and keep-alives, still answers
// serializable reads, and its health endpoints say why.
func TestFencedNodeStopsAnswering(t *testing.T) {
	storage := "file://" + filepath.Join(t.TempDir(), "bucket")
	a := startNode(t, storage, nil)
	ca := client(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ca.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	lease, err := ca.Grant(ctx, 60)
	if err != nil {
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

	b := startNode(t, storage, nil)
	if _, err := client(t, b).Put(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}

	_, err = ca.Put(ctx, "k", "v3")
	if code := status.Code(err); code != codes.Unavailable || !strings.Contains(err.Error(), "deposed") {
		t.Fatalf("write on the fenced node: %v, want Unavailable naming the deposition", err)
	}
	if _, err := ca.Get(ctx, "k"); status.Code(err) != codes.Unavailable {
		t.Fatalf("linearizable read on the fenced node: %v, want Unavailable", err)
	}
	got, err := ca.Get(ctx, "k", clientv3.WithSerializable())
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("serializable read on the fenced node: %v, %v", got, err)
	}
	// Keep-alive and watch streams end with Unavailable (client/v3 would
	// retry them on another endpoint), so they are checked on the wire.
	ka, err := pb.NewLeaseClient(ca.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: int64(lease.ID)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("keep-alive on the fenced node: %v, want Unavailable", err)
	}
	for _, ws := range []pb.Watch_WatchClient{old, openWatch(t, ctx, ca)} {
		for {
			wr, err := ws.Recv()
			if err != nil {
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("watch on the fenced node ended with %v, want Unavailable", err)
				}
				break
			}
			if len(wr.Events) > 0 {
				t.Fatalf("a watch on the fenced node delivered events after the deposition: %+v", wr)
			}
		}
	}

	code, body := httpGet(t, a, "/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "deposed") || strings.Contains(body, "<nil>") {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	code, body = httpGet(t, a, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "deposed") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if code, body := httpGet(t, b, "/readyz"); code != http.StatusOK {
		t.Fatalf("the new writer's /readyz: %d %q", code, body)
	}
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
