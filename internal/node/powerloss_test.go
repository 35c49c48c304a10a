package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/objstore"
	fsstore "github.com/netsy-io/netsy/internal/objstore/fs"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/testutil/lincheck"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/vfs/crashfs"
)

// errPowerLost is what the store answers once the node's power is cut.
var errPowerLost = errors.New("power lost")

// cutStore is the node's view of object storage across a power loss: once
// cut, no call reaches the bucket and no answer reaches the node (a call
// already in flight may still land in the bucket, as a PUT sent just
// before the power went does).
type cutStore struct {
	objstore.Store
	cut atomic.Bool
}

func (s *cutStore) do(call func() error) error {
	if s.cut.Load() {
		return errPowerLost
	}
	err := call()
	if s.cut.Load() {
		return errPowerLost
	}
	return err
}

func (s *cutStore) Get(ctx context.Context, key string) (b []byte, etag string, err error) {
	err = s.do(func() error { b, etag, err = s.Store.Get(ctx, key); return err })
	return b, etag, err
}

func (s *cutStore) GetReader(ctx context.Context, key string) (r io.ReadCloser, etag string, err error) {
	err = s.do(func() error { r, etag, err = s.Store.GetReader(ctx, key); return err })
	if err != nil && r != nil {
		r.Close()
		r = nil
	}
	return r, etag, err
}

func (s *cutStore) PutIfAbsent(ctx context.Context, key string, body []byte) (etag string, err error) {
	err = s.do(func() error { etag, err = s.Store.PutIfAbsent(ctx, key, body); return err })
	return etag, err
}

func (s *cutStore) PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (etag string, err error) {
	err = s.do(func() error { etag, err = s.Store.PutIfAbsentFrom(ctx, key, r, size); return err })
	return etag, err
}

func (s *cutStore) PutIfMatch(ctx context.Context, key string, body []byte, match string) (etag string, err error) {
	err = s.do(func() error { etag, err = s.Store.PutIfMatch(ctx, key, body, match); return err })
	return etag, err
}

func (s *cutStore) Delete(ctx context.Context, key string) error {
	return s.do(func() error { return s.Store.Delete(ctx, key) })
}

func (s *cutStore) List(ctx context.Context, prefix, startAfter string, limit int) (o []objstore.ObjectInfo, err error) {
	err = s.do(func() error { o, err = s.Store.List(ctx, prefix, startAfter, limit); return err })
	return o, err
}

func (s *cutStore) Close() error { return nil }

// ack is a write a client was told is durable.
type ack struct {
	key, value string
	rev        int64
}

// TestPowerLoss runs concurrent writers against a node, pulls the power at
// a random moment (the disk keeps only what was fsync'd, torn writes
// included; the node hears nothing more from object storage), restarts it
// on what the disk kept, and checks that every acknowledged write is
// there at its revision. It does so round after round in sync mode
// (--quorum 0) and with --quorum -1, on the file store and on MinIO; at
// the end a fresh node restores the bucket and serves the same state, and
// the whole history must be linearizable.
//
// The file store is where --storage puts it by default, in
// <data-dir>/objects on the same disk as the node's log, so the power
// loss hits both, and each incarnation reopens it on what the disk kept,
// as a restarted process does. MinIO is off the machine and keeps
// everything it acknowledged.
func TestPowerLoss(t *testing.T) {
	stores := map[string]func(t *testing.T) bucketOn{
		"file": func(t *testing.T) bucketOn {
			return func(t *testing.T, disk *crashfs.FS, dataDir string) objstore.Store {
				st, err := fsstore.OpenFS(disk, filepath.Join(dataDir, "objects"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
		},
		"minio": func(t *testing.T) bucketOn {
			srv := miniotest.Start(t)
			st, err := objopen.Open(t.Context(), "s3://"+srv.Bucket+"/powerloss", objopen.Options{
				S3Endpoint: srv.Endpoint, S3Region: srv.Region, S3PathStyle: true,
				S3AccessKeyID: srv.AccessKey, S3SecretAccessKey: srv.SecretKey,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return func(*testing.T, *crashfs.FS, string) objstore.Store { return st }
		},
	}
	for _, name := range []string{"file", "minio"} {
		for _, quorum := range []int{0, -1} {
			t.Run(fmt.Sprintf("%s/quorum%d", name, quorum), func(t *testing.T) {
				// Each case has its own disk, data directory, store and
				// addresses, and spends most of its time starting and
				// stopping its node: they run side by side.
				t.Parallel()
				powerLossRounds(t, stores[name](t), quorum, 5)
			})
		}
	}
}

// bucketOn opens the node's object store as the node would find it on
// disk with its data directory in dataDir.
type bucketOn func(t *testing.T, disk *crashfs.FS, dataDir string) objstore.Store

func powerLossRounds(t *testing.T, bucketOn bucketOn, quorum int, rounds int) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	disk := crashfs.New()
	dataDir := t.TempDir()
	hist := lincheck.NewHistory()
	var acks []ack
	var ackMu sync.Mutex
	// The node keeps its addresses across restarts, as a real one does:
	// its registration names them.
	peerAddr, clientAddr, httpAddr := freePeerAddr(t), freePeerAddr(t), freePeerAddr(t)
	cfg := func(c *config.Config) {
		c.DataDir = dataDir
		c.PeerAddr, c.ClientAddr, c.HTTPAddr = peerAddr, clientAddr, httpAddr
		c.Quorum = quorum
		c.SnapshotEveryRevisions = 200 // snapshots and their uploads happen under the cut too
	}

	for round := range rounds {
		store := &cutStore{Store: bucketOn(t, disk, dataDir)}
		n := startNodeWith(t, cfg, Deps{Store: store, FS: disk})
		if round > 0 {
			checkAcks(t, n, acks, fmt.Sprintf("round %d", round))
		}
		writeUntilCut(t, n, hist, round, rng, func(a ack) {
			ackMu.Lock()
			acks = append(acks, a)
			ackMu.Unlock()
		}, func() {
			disk.Cut()
			store.cut.Store(true)
		})
		n.shutdown(false)
		disk = disk.Crash(rng)
	}

	// A last clean incarnation, then a fresh node restores the bucket.
	bucket := bucketOn(t, disk, dataDir)
	last := startNodeWith(t, cfg, Deps{Store: bucket, FS: disk})
	checkAcks(t, last, acks, "after the last power loss")
	want := dump(t, last)
	last.Close()
	fresh := startNodeWith(t, func(c *config.Config) { c.Quorum = quorum }, Deps{Store: bucket, FS: crashfs.New()})
	if got := dump(t, fresh); got != want {
		t.Fatalf("a fresh node restored from the bucket serves\n%s\nthe last node served\n%s", got, want)
	}
	t.Logf("%d acknowledged writes over %d power losses", len(acks), rounds)
	lincheck.Check(t, hist.Ops())
}

func startNodeWith(t *testing.T, edit func(*config.Config), deps Deps) *Node {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClientAddr = freePeerAddr(t)
	cfg.HTTPAddr = freePeerAddr(t)
	cfg.PeerAddr = freePeerAddr(t)
	edit(&cfg)
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testLog{t}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deps.WaitReady = true
	n, err := StartWith(ctx, cfg, logger, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// writeUntilCut runs writers until cut is called at a random moment, and
// for a moment after it (their calls then fail: unknown outcomes).
func writeUntilCut(t *testing.T, n *Node, hist *lincheck.History, round int, rng *rand.Rand, onAck func(ack), cut func()) {
	const (
		writers = 4
		keys    = 5
	)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var wg sync.WaitGroup
	for w := range writers {
		cli := newTestClient(t, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
			last := map[string]string{}
			for i := 0; ctx.Err() == nil; i++ {
				in := lincheck.Input{Key: fmt.Sprintf("pl/%d", r.IntN(keys)), Value: fmt.Sprintf("r%d-w%d-%d", round, w, i)}
				switch x := r.IntN(10); {
				case x < 3:
					in.Op = lincheck.Get
				case x < 8:
					in.Op = lincheck.Put
				default:
					in.Op = lincheck.CAS
					in.Old = last[in.Key]
				}
				out, err := hist.Run(ctx, writers*round+w, cli, in, 2*time.Second)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						time.Sleep(10 * time.Millisecond)
					}
				case in.Op == lincheck.Get:
					last[in.Key] = out.Value
				case in.Op == lincheck.Put || out.OK:
					onAck(ack{in.Key, in.Value, out.Rev})
				}
			}
		}()
	}
	time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
	cut()
	time.Sleep(50 * time.Millisecond)
	stop()
	wg.Wait()
}

func newTestClient(t *testing.T, n *Node) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n.ClientAddr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// checkAcks reads every acknowledged write back at its revision.
func checkAcks(t *testing.T, n *Node, acks []ack, when string) {
	t.Helper()
	cli := newTestClient(t, n)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, a := range acks {
		resp, err := cli.Get(ctx, a.key, clientv3.WithRev(a.rev))
		if err != nil {
			t.Fatalf("%s: read %s at revision %d: %v", when, a.key, a.rev, err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != a.value || resp.Kvs[0].ModRevision != a.rev {
			t.Fatalf("%s: acknowledged %s=%q at revision %d; the node has %v", when, a.key, a.value, a.rev, resp.Kvs)
		}
	}
}

// dump is every key with its value and revisions, and the store revision.
func dump(t *testing.T, n *Node) string {
	t.Helper()
	cli := newTestClient(t, n)
	resp, err := cli.Get(t.Context(), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := fmt.Sprintf("revision %d\n", resp.Header.Revision)
	for _, kv := range resp.Kvs {
		out += fmt.Sprintf("%s=%s create %d mod %d version %d\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
	}
	return out
}
