package etcdapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
)

// testTimeout bounds waits for something that must happen; tests never
// sleep, they only wait on events.
const testTimeout = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func (e *testEnv) put(k, v string) int64 {
	e.t.Helper()
	resp, err := e.b.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: []byte(v)})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Header.Revision
}

func recvWatch(t *testing.T, wch clientv3.WatchChan) clientv3.WatchResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	select {
	case resp, ok := <-wch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return resp
	case <-ctx.Done():
		t.Fatal("timed out waiting for a watch response")
	}
	panic("unreachable")
}

// rawWatch opens a Watch stream without client/v3, to see responses as
// sent.
func (e *testEnv) rawWatch(ctx context.Context) pb.Watch_WatchClient {
	e.t.Helper()
	ws, err := pb.NewWatchClient(e.conn()).Watch(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return ws
}

func mustSend(t *testing.T, ws pb.Watch_WatchClient, r *pb.WatchRequest) {
	t.Helper()
	if err := ws.Send(r); err != nil {
		t.Fatal(err)
	}
}

func mustRecv(t *testing.T, ws pb.Watch_WatchClient) *pb.WatchResponse {
	t.Helper()
	r, err := ws.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func createReq(cr *pb.WatchCreateRequest) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}
}

func cancelReq(id int64) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}
}

func progressReq() *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
}

// TestWatchReplayStitchedToLive replays history in small batches while
// writes continue, and checks every revision arrives exactly once, in
// order, with header revisions that never go backwards and cover the
// events they carry.
func TestWatchReplayStitchedToLive(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WatchBatchEvents = 7 })
	const before, during = 100, 300
	for i := range before {
		e.put(fmt.Sprintf("k%d", i), "v")
	}
	cli := e.client()
	ctx := testCtx(t)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range during {
			if _, err := e.b.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("w")}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer wg.Wait()

	wch := cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(1))
	var next, lastHeader int64 = 1, 0
	for next <= before+during {
		resp := recvWatch(t, wch)
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision < lastHeader {
			t.Fatalf("header revision went back from %d to %d", lastHeader, resp.Header.Revision)
		}
		lastHeader = resp.Header.Revision
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("got revision %d, want %d", ev.Kv.ModRevision, next)
			}
			if ev.Kv.ModRevision > resp.Header.Revision {
				t.Fatalf("event revision %d above header revision %d", ev.Kv.ModRevision, resp.Header.Revision)
			}
			next++
		}
	}
}

// TestWatchStartRevisions covers start_revision 0 (from now on) and a
// future start revision.
func TestWatchStartRevisions(t *testing.T) {
	e := newEnv(t, nil)
	e.put("a", "1")
	e.put("a", "2")
	cli := e.client()
	ctx := testCtx(t)

	now := cli.Watch(ctx, "a", clientv3.WithCreatedNotify())
	future := cli.Watch(ctx, "a", clientv3.WithRev(5), clientv3.WithCreatedNotify())
	if r := recvWatch(t, now); !r.Created || r.Header.Revision != 2 {
		t.Fatalf("created %+v", r)
	}
	if r := recvWatch(t, future); !r.Created {
		t.Fatalf("created %+v", r)
	}
	for i := 3; i <= 6; i++ {
		e.put("a", fmt.Sprint(i))
	}
	var revs []int64
	for len(revs) < 4 {
		for _, ev := range recvWatch(t, now).Events {
			revs = append(revs, ev.Kv.ModRevision)
		}
	}
	if fmt.Sprint(revs) != "[3 4 5 6]" {
		t.Fatalf("now watcher got %v", revs)
	}
	revs = revs[:0]
	for len(revs) < 2 {
		for _, ev := range recvWatch(t, future).Events {
			revs = append(revs, ev.Kv.ModRevision)
		}
	}
	if fmt.Sprint(revs) != "[5 6]" {
		t.Fatalf("future watcher got %v", revs)
	}
}

func TestWatchFiltersAndPrevKV(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)
	e.put("k", "old")

	noPut := cli.Watch(ctx, "k", clientv3.WithFilterPut())
	noDel := cli.Watch(ctx, "k", clientv3.WithFilterDelete())
	prev := cli.Watch(ctx, "k", clientv3.WithPrevKV())
	plain := cli.Watch(ctx, "k")
	other := cli.Watch(ctx, "j", clientv3.WithCreatedNotify())
	recvWatch(t, other) // all five are created once the last one is

	e.put("k", "new")
	if _, err := e.b.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	e.put("j", "x") // only "other" sees it; proves it saw nothing before

	ev := recvWatch(t, noPut).Events
	if len(ev) != 1 || ev[0].Type != mvccpb.DELETE || ev[0].PrevKv != nil {
		t.Fatalf("NOPUT watcher got %v", ev)
	}
	ev = recvWatch(t, noDel).Events
	if len(ev) != 1 || ev[0].Type != mvccpb.PUT || ev[0].PrevKv != nil {
		t.Fatalf("NODELETE watcher got %v", ev)
	}
	var prevEvs, plainEvs []*clientv3.Event
	for len(prevEvs) < 2 {
		prevEvs = append(prevEvs, recvWatch(t, prev).Events...)
	}
	for len(plainEvs) < 2 {
		plainEvs = append(plainEvs, recvWatch(t, plain).Events...)
	}
	if string(prevEvs[0].PrevKv.Value) != "old" || string(prevEvs[1].PrevKv.Value) != "new" {
		t.Fatalf("prev_kv watcher got %v", prevEvs)
	}
	for _, ev := range plainEvs {
		if ev.PrevKv != nil {
			t.Fatalf("prev_kv not requested but sent: %v", ev)
		}
	}
	if ev := recvWatch(t, other).Events; len(ev) != 1 || string(ev[0].Kv.Key) != "j" {
		t.Fatalf("other watcher got %v", ev)
	}
	// The Backend's shared events were not modified by stripping.
	evs, _, _ := e.b.Events(1, 10, 0)
	if evs[1].PrevKv == nil {
		t.Fatal("backend event lost its PrevKv")
	}
}

// TestWatchCreateCancel checks IDs, refusals and cancel answers on a raw
// stream, where every response is visible.
func TestWatchCreateCancel(t *testing.T) {
	e := newEnv(t, nil)
	ctx := testCtx(t)
	ws := e.rawWatch(ctx)

	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a")}))
	if r := mustRecv(t, ws); !r.Created || r.Canceled || r.WatchId != 0 || r.Header.ClusterId != testClusterID {
		t.Fatalf("auto id create: %+v", r)
	}
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a"), WatchId: 7}))
	if r := mustRecv(t, ws); !r.Created || r.Canceled || r.WatchId != 7 {
		t.Fatalf("client id create: %+v", r)
	}
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a"), WatchId: 7}))
	if r := mustRecv(t, ws); !r.Created || !r.Canceled || r.WatchId != -1 ||
		r.CancelReason != "mvcc: duplicate watch ID provided on the WatchStream" {
		t.Fatalf("duplicate id create: %+v", r)
	}
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}))
	if r := mustRecv(t, ws); !r.Created || !r.Canceled || r.WatchId != -1 || r.CancelReason != "mvcc: watcher range is empty" {
		t.Fatalf("empty range create: %+v", r)
	}
	mustSend(t, ws, cancelReq(7))
	if r := mustRecv(t, ws); !r.Canceled || r.WatchId != 7 || r.Created {
		t.Fatalf("cancel: %+v", r)
	}
	// Unknown IDs get no answer: the next response is the next create's.
	mustSend(t, ws, cancelReq(99))
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a")}))
	if r := mustRecv(t, ws); !r.Created || r.WatchId != 1 {
		t.Fatalf("create after unknown cancel: %+v", r)
	}
	// Canceled watchers get nothing more; watcher 0 and 1 get the put.
	e.put("a", "v")
	for _, want := range []int64{0, 1} {
		if r := mustRecv(t, ws); r.WatchId != want || len(r.Events) != 1 {
			t.Fatalf("event for %d: %+v", want, r)
		}
	}
}

// TestWatchClientCancel checks client/v3's cancel path end to end.
func TestWatchClientCancel(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	wctx, cancel := context.WithCancel(testCtx(t))
	wch := cli.Watch(wctx, "a", clientv3.WithCreatedNotify())
	recvWatch(t, wch)
	cancel()
	for range wch { // closes once the server confirmed the cancel
	}
}

func TestWatchCompactedStart(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 10 {
		e.put("a", fmt.Sprint(i))
	}
	cli := e.client()
	ctx := testCtx(t)
	if _, err := cli.Compact(ctx, 5); err != nil {
		t.Fatal(err)
	}
	resp := recvWatch(t, cli.Watch(ctx, "a", clientv3.WithRev(2)))
	if !resp.Canceled || resp.CompactRevision != 5 || !errors.Is(resp.Err(), rpctypes.ErrCompacted) {
		t.Fatalf("compacted watch: %+v err=%v", resp, resp.Err())
	}

	// On the wire: created first, then the compaction cancel.
	ws := e.rawWatch(ctx)
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 4}))
	if r := mustRecv(t, ws); !r.Created || r.Canceled {
		t.Fatalf("created: %+v", r)
	}
	if r := mustRecv(t, ws); !r.Canceled || r.CompactRevision != 5 || r.WatchId != 0 {
		t.Fatalf("compacted: %+v", r)
	}
	// A start at the compaction revision itself is still served.
	resp = recvWatch(t, cli.Watch(ctx, "a", clientv3.WithRev(5)))
	if resp.Canceled || len(resp.Events) != 6 || resp.Events[0].Kv.ModRevision != 5 {
		t.Fatalf("watch from compact revision: %+v", resp)
	}
}

// TestWatchCompactionOvertakesLaggingWatcher compacts history while a
// watcher is still replaying: it gets what it was sent, then the cancel.
func TestWatchCompactionOvertakesLaggingWatcher(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WatchBatchEvents = 5 })
	for i := range 20 {
		e.put("a", fmt.Sprint(i))
	}
	e.b.mu.Lock()
	e.b.eventsHook = func(from, _ int64) {
		if from == 6 {
			e.b.mu.Lock()
			e.b.compact = 12
			e.b.mu.Unlock()
		}
	}
	e.b.mu.Unlock()
	ws := e.rawWatch(testCtx(t))
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 1}))
	if r := mustRecv(t, ws); !r.Created {
		t.Fatalf("created: %+v", r)
	}
	r := mustRecv(t, ws)
	if len(r.Events) != 5 || r.Events[4].Kv.ModRevision != 5 {
		t.Fatalf("first batch: %+v", r)
	}
	if r := mustRecv(t, ws); !r.Canceled || r.CompactRevision != 12 {
		t.Fatalf("compacted: %+v", r)
	}
}

// TestWatchProgressNotify drives the progress ticker with a fake clock.
func TestWatchProgressNotify(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	ticked := make(chan struct{}, 1)
	e := newEnvHooks(t, func(c *Config) { c.Clock = fc }, &testHooks{afterTick: func() { ticked <- struct{}{} }})
	cli := e.client()
	ctx := testCtx(t)
	tick := func() {
		t.Helper()
		fc.Advance(DefaultProgressNotifyInterval)
		select {
		case <-ticked:
		case <-ctx.Done():
			t.Fatal("tick not handled")
		}
	}

	wch := cli.Watch(ctx, "a", clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	recvWatch(t, wch)
	if err := fc.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	e.put("b", "1") // not watched: the notification still reports it

	tick()
	r := recvWatch(t, wch)
	if !r.IsProgressNotify() || r.Header.Revision != 1 {
		t.Fatalf("progress: %+v", r)
	}

	e.put("a", "1")
	if r := recvWatch(t, wch); len(r.Events) != 1 {
		t.Fatalf("event: %+v", r)
	}
	tick() // elided: the watcher got an event in this interval
	tick()
	r = recvWatch(t, wch)
	if !r.IsProgressNotify() || r.Header.Revision != 2 {
		t.Fatalf("progress after event: %+v", r)
	}
	e.put("a", "2")
	if r := recvWatch(t, wch); len(r.Events) != 1 || r.Events[0].Kv.ModRevision != 3 {
		t.Fatalf("want only the event after one notification, got %+v", r)
	}
}

// TestWatchRequestProgressOrdering asks for progress while a watcher is
// replaying a long history in small batches and writes continue: the
// answer must come only after every event at or below its revision.
func TestWatchRequestProgressOrdering(t *testing.T) {
	// Hold the replay after its first batch until the server has received
	// the progress request, so it arrives while the watcher lags.
	progressRecvd := make(chan struct{})
	e := newEnvHooks(t, func(c *Config) { c.WatchBatchEvents = 5 }, &testHooks{watchRecv: func(r *pb.WatchRequest) {
		if r.GetProgressRequest() != nil {
			close(progressRecvd)
		}
	}})
	for i := range 200 {
		e.put("k", fmt.Sprint(i))
	}
	ctx := testCtx(t)
	ws := e.rawWatch(ctx)
	e.b.mu.Lock()
	e.b.eventsHook = func(from, _ int64) {
		if from == 6 {
			<-progressRecvd
		}
	}
	e.b.mu.Unlock()

	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 1}))
	mustSend(t, ws, progressReq())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			if _, err := e.b.Put(ctx, &pb.PutRequest{Key: []byte("k")}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer wg.Wait()

	var seen int64
	for {
		r := mustRecv(t, ws)
		if r.Created {
			continue
		}
		if r.WatchId == -1 {
			if r.Header.Revision < 200 || r.Header.Revision != seen {
				t.Fatalf("progress at %d after events up to %d", r.Header.Revision, seen)
			}
			return
		}
		for _, ev := range r.Events {
			if ev.Kv.ModRevision != seen+1 {
				t.Fatalf("revision %d after %d", ev.Kv.ModRevision, seen)
			}
			seen = ev.Kv.ModRevision
		}
	}
}

// TestWatchRequestProgressClient checks client/v3 receives the broadcast.
func TestWatchRequestProgressClient(t *testing.T) {
	e := newEnv(t, nil)
	e.put("x", "1")
	cli := e.client()
	ctx := testCtx(t)
	wch := cli.Watch(ctx, "a", clientv3.WithCreatedNotify())
	recvWatch(t, wch)
	if err := cli.RequestProgress(ctx); err != nil {
		t.Fatal(err)
	}
	if r := recvWatch(t, wch); !r.IsProgressNotify() || r.Header.Revision != 1 {
		t.Fatalf("progress: %+v", r)
	}
}

func TestWatchRequestProgressNoWatchers(t *testing.T) {
	e := newEnv(t, nil)
	ws := e.rawWatch(testCtx(t))
	mustSend(t, ws, progressReq())
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a")}))
	if r := mustRecv(t, ws); !r.Created {
		t.Fatalf("want the create answer first (etcd ignores progress on an empty stream), got %+v", r)
	}
}

// TestWatchFragment writes one revision larger than MaxRequestBytes: a
// fragment-enabled watcher gets it split, client/v3 joins it back, and a
// plain watcher gets it whole.
func TestWatchFragment(t *testing.T) {
	const maxBytes = 1024
	e := newEnv(t, func(c *Config) { c.MaxRequestBytes = maxBytes })
	cli := e.client()
	ctx := testCtx(t)
	joined := cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithFragment(), clientv3.WithCreatedNotify())
	recvWatch(t, joined)
	ws := e.rawWatch(ctx)
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l"), Fragment: true}))
	mustRecv(t, ws)
	whole := e.rawWatch(ctx)
	mustSend(t, whole, createReq(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("l")}))
	mustRecv(t, whole)

	var txn []*pb.RequestOp
	for i := range 10 {
		txn = append(txn, put(fmt.Sprintf("k%d", i), strings.Repeat("v", 300)))
	}
	if _, err := e.b.Txn(ctx, &pb.TxnRequest{Success: txn}); err != nil {
		t.Fatal(err)
	}

	if r := recvWatch(t, joined); len(r.Events) != 10 {
		t.Fatalf("client/v3 joined %d events", len(r.Events))
	}
	n, frags := 0, 0
	for n < 10 {
		r := mustRecv(t, ws)
		n += len(r.Events)
		frags++
		if r.Fragment != (n < 10) {
			t.Fatalf("fragment flag %v with %d of 10 events", r.Fragment, n)
		}
		if len(r.Events) > 1 && r.Size() >= maxBytes {
			t.Fatalf("fragment of %d bytes", r.Size())
		}
	}
	if frags < 4 {
		t.Fatalf("only %d fragments", frags)
	}
	if r := mustRecv(t, whole); len(r.Events) != 10 || r.Fragment {
		t.Fatalf("unfragmented watcher: %d events, fragment=%v", len(r.Events), r.Fragment)
	}
}

// TestWatchSharedReads checks that many caught-up watchers on one stream
// cost one Backend read per commit.
func TestWatchSharedReads(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)
	var chans []clientv3.WatchChan
	for i := range 50 {
		chans = append(chans, cli.Watch(ctx, fmt.Sprintf("k%02d", i), clientv3.WithCreatedNotify()))
	}
	for _, ch := range chans {
		recvWatch(t, ch)
	}
	e.b.mu.Lock()
	before := e.b.eventsCalls
	e.b.mu.Unlock()

	var txn []*pb.RequestOp
	for i := range 50 {
		txn = append(txn, put(fmt.Sprintf("k%02d", i), "v"))
	}
	if _, err := e.b.Txn(ctx, &pb.TxnRequest{Success: txn}); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		if r := recvWatch(t, ch); len(r.Events) != 1 || string(r.Events[0].Kv.Key) != fmt.Sprintf("k%02d", i) {
			t.Fatalf("watcher %d got %+v", i, r)
		}
	}
	e.b.mu.Lock()
	calls := e.b.eventsCalls - before
	e.b.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d Events calls for one commit, want 1", calls)
	}
}

// TestWatchEndsOnClose checks Close ends open streams with etcd's
// "server stopped", which clients treat as retryable.
func TestWatchEndsOnClose(t *testing.T) {
	e := newEnv(t, nil)
	ws := e.rawWatch(testCtx(t))
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a")}))
	mustRecv(t, ws)
	e.srv.Close()
	_, err := ws.Recv()
	if !sameStatus(err, rpctypes.ErrGRPCStopped) || status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v", err)
	}
}

// A caught-up, idle watch stream ends with the backend's WatchErr (a
// deposed node), mapped like any backend error.
func TestWatchEndsOnWatchErr(t *testing.T) {
	e := newEnv(t, nil)
	ws := e.rawWatch(testCtx(t))
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a")}))
	mustRecv(t, ws)
	e.b.stopWatches(fmt.Errorf("fenced: %w", engine.ErrDeposed))
	_, err := ws.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "deposed") {
		t.Fatalf("got %v, want Unavailable naming the deposition", err)
	}
	ws = e.rawWatch(testCtx(t))
	// The server may end the stream before the request is sent (Send
	// then reports io.EOF): what it ends it with is what Recv returns.
	_ = ws.Send(createReq(&pb.WatchCreateRequest{Key: []byte("a")}))
	if _, err := ws.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a new watch on a deposed backend: %v, want Unavailable", err)
	}
}

// TestWatchClientHalfClose keeps delivering after the client closes its
// sending side, as etcd does.
func TestWatchClientHalfClose(t *testing.T) {
	e := newEnv(t, nil)
	ws := e.rawWatch(testCtx(t))
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a")}))
	mustRecv(t, ws)
	if err := ws.CloseSend(); err != nil {
		t.Fatal(err)
	}
	e.put("a", "1")
	if r := mustRecv(t, ws); len(r.Events) != 1 {
		t.Fatalf("after half-close: %+v", r)
	}
}

func TestWatchMetrics(t *testing.T) {
	e := newEnv(t, nil)
	ws := e.rawWatch(testCtx(t))
	for range 3 {
		mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("a")}))
		mustRecv(t, ws)
	}
	mustSend(t, ws, cancelReq(1))
	mustRecv(t, ws)
	e.put("a", "1")
	mustRecv(t, ws)
	mustRecv(t, ws)
	// The stream counts a pass's events once its sends are done; a
	// progress request's answer comes after that pass.
	mustSend(t, ws, progressReq())
	mustRecv(t, ws)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.srv.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		m := f.GetMetric()[0]
		got[f.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	want := map[string]float64{"netsy_watch_streams": 1, "netsy_watchers": 2, "netsy_lease_keepalive_streams": 0, "netsy_watch_events_sent_total": 2,
		// etcd's names for the same gauges; no KV request went through
		// the server (e.put writes to the backend).
		"etcd_debugging_mvcc_watch_stream_total": 1, "etcd_debugging_mvcc_watcher_total": 2,
		"etcd_mvcc_range_total": 0, "etcd_mvcc_put_total": 0, "etcd_mvcc_delete_total": 0, "etcd_mvcc_txn_total": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("metrics %v, want %v", got, want)
	}
}

// TestWatchBusyStreamGetsRevisionsTogether pins the pacing of busy
// streams: once the responses sent need more of the server's response
// budget than the time that passed, revisions committed meanwhile wait for
// the hold and go out in one response per watcher, with nothing lost or
// repeated; a progress request asked during the hold is answered only
// after them; once the budget has caught up, a commit goes out at once.
func TestWatchBusyStreamGetsRevisionsTogether(t *testing.T) {
	const cost = time.Millisecond
	fc := clock.NewFake(time.Unix(1000, 0))
	e := newEnv(t, func(c *Config) { c.Clock = fc; c.WatchResponseCost = cost })
	ctx := testCtx(t)
	ws := e.rawWatch(ctx)
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("k")}))
	if r := mustRecv(t, ws); !r.Created {
		t.Fatalf("create: %+v", r)
	}
	revs := func(r *pb.WatchResponse) []int64 {
		var out []int64
		for _, ev := range r.Events {
			out = append(out, ev.Kv.ModRevision)
		}
		return out
	}
	want := func(r *pb.WatchResponse, revs0 ...int64) {
		t.Helper()
		if got := revs(r); fmt.Sprint(got) != fmt.Sprint(revs0) {
			t.Fatalf("events at %v, want %v (%+v)", got, revs0, r)
		}
	}

	// The first pass has no previous one to measure against; the second
	// sent one response in no time, which needs 1 ms of budget.
	e.put("k", "1")
	want(mustRecv(t, ws), 1)
	e.put("k", "2")
	want(mustRecv(t, ws), 2)

	e.put("k", "3")
	// The loop arms its hold timer (next to the progress ticker) instead
	// of sending revision 3.
	if err := fc.BlockUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	e.put("k", "4")
	mustSend(t, ws, progressReq())
	fc.Advance(cost)
	want(mustRecv(t, ws), 3, 4)
	if r := mustRecv(t, ws); r.WatchId != invalidWatchID || len(r.Events) != 0 || r.Header.Revision != 4 {
		t.Fatalf("progress after the held events: %+v", r)
	}

	// That pass paid 1 ms in and was charged 1 ms for its response: the
	// 1 ms debt holds the stream until the clock has moved past it, and
	// then a commit goes out at once.
	fc.Advance(2 * cost)
	e.put("k", "5")
	want(mustRecv(t, ws), 5)
}

// settle waits until the stream's loop has closed the account of the pass
// whose response was just received: a progress request is answered in a
// later step of the loop, so a fake clock moved afterwards does not count
// into that pass.
func settle(t *testing.T, ws pb.Watch_WatchClient) {
	t.Helper()
	mustSend(t, ws, progressReq())
	if r := mustRecv(t, ws); r.WatchId != invalidWatchID || len(r.Events) != 0 {
		t.Fatalf("want a progress response, got %+v", r)
	}
}

// TestWatchQuietStreamNotHeldForBunchedCommits checks a stream saves up
// budget while within it: a few commits that happen to land together
// after a quiet spell go out at once, each in its own response, so
// pacing adds no latency to a server that is not overloaded.
func TestWatchQuietStreamNotHeldForBunchedCommits(t *testing.T) {
	const cost = time.Millisecond
	fc := clock.NewFake(time.Unix(1000, 0))
	e := newEnv(t, func(c *Config) { c.Clock = fc; c.WatchResponseCost = cost })
	ctx := testCtx(t)
	ws := e.rawWatch(ctx)
	mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte("k")}))
	if r := mustRecv(t, ws); !r.Created {
		t.Fatalf("create: %+v", r)
	}
	for i := range 4 {
		if i == 1 {
			settle(t, ws)
			fc.Advance(time.Second) // a quiet spell: credit saved, up to its cap
		}
		rev := e.put("k", "v")
		r := mustRecv(t, ws)
		if len(r.Events) != 1 || r.Events[0].Kv.ModRevision != rev {
			t.Fatalf("commit %d at %d: got %+v", i, rev, r)
		}
	}
}

// TestWatchQuietStreamNotChargedForBusyNeighbours checks the budget
// account weighs the responses of other streams against the whole time
// they took: a stream that was quiet while another kept the server busy
// but within budget is not held after its own next event.
func TestWatchQuietStreamNotChargedForBusyNeighbours(t *testing.T) {
	const cost = time.Millisecond
	fc := clock.NewFake(time.Unix(1000, 0))
	e := newEnv(t, func(c *Config) { c.Clock = fc; c.WatchResponseCost = cost })
	ctx := testCtx(t)
	open := func(key string) pb.Watch_WatchClient {
		ws := e.rawWatch(ctx)
		mustSend(t, ws, createReq(&pb.WatchCreateRequest{Key: []byte(key)}))
		if r := mustRecv(t, ws); !r.Created {
			t.Fatalf("create: %+v", r)
		}
		return ws
	}
	quiet, busy := open("a"), open("b")
	putRecv := func(ws pb.Watch_WatchClient, key string) {
		t.Helper()
		rev := e.put(key, "v")
		if r := mustRecv(t, ws); len(r.Events) != 1 || r.Events[0].Kv.ModRevision != rev {
			t.Fatalf("%s at %d: got %+v", key, rev, r)
		}
	}
	putRecv(quiet, "a")
	settle(t, quiet)
	// One response per 2 ms: half the budget, for 40 ms.
	for range 20 {
		fc.Advance(2 * cost)
		putRecv(busy, "b")
		settle(t, busy)
	}
	putRecv(quiet, "a")
	putRecv(quiet, "a") // not held: nothing is owed
}
