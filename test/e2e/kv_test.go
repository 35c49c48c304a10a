//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// wantEvent is one event a watcher must deliver.
type wantEvent struct {
	rev     int64
	typ     mvccpb.Event_EventType
	key     string
	value   string
	prev    string // previous value; "" if the key did not exist
	hasPrev bool
}

func (e wantEvent) String() string {
	return fmt.Sprintf("%d %s %s=%q (prev %q %v)", e.rev, e.typ, e.key, e.value, e.prev, e.hasPrev)
}

// history records writes and the events they must produce, tracking each
// key's current value to know the expected prev_kv.
type history struct {
	cur    map[string]string
	events []wantEvent
}

func (h *history) put(rev int64, key, value string) {
	prev, ok := h.cur[key]
	h.events = append(h.events, wantEvent{rev: rev, typ: mvccpb.PUT, key: key, value: value, prev: prev, hasPrev: ok})
	h.cur[key] = value
}

func (h *history) del(rev int64, key string) {
	prev, ok := h.cur[key]
	if !ok {
		return
	}
	h.events = append(h.events, wantEvent{rev: rev, typ: mvccpb.DELETE, key: key, prev: prev, hasPrev: true})
	delete(h.cur, key)
}

// TestWatchStitching starts a watch at a past revision while writes go on,
// and requires exactly the recorded events: the history replay must join
// the live stream with no gap and no duplicate, events of one revision must
// arrive in one response, and prev_kv must be right throughout.
func TestWatchStitching(t *testing.T) {
	s := startServer(t)
	cli := newClient(t, s)
	ctx := t.Context()
	h := &history{cur: map[string]string{}}

	write := func(i int) {
		key := fmt.Sprintf("ws/k%d", i%7)
		switch {
		case i%11 == 10:
			// Two keys in one txn share one revision.
			k2 := fmt.Sprintf("ws/t%d", i%3)
			resp, err := cli.Txn(ctx).Then(clientv3.OpPut(key, strconv.Itoa(i)), clientv3.OpPut(k2, strconv.Itoa(i))).Commit()
			if err != nil {
				t.Error(err)
				return
			}
			h.put(resp.Header.Revision, key, strconv.Itoa(i))
			h.put(resp.Header.Revision, k2, strconv.Itoa(i))
		case i%5 == 4:
			resp, err := cli.Delete(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			if resp.Deleted > 0 {
				h.del(resp.Header.Revision, key)
			}
		default:
			resp, err := cli.Put(ctx, key, strconv.Itoa(i))
			if err != nil {
				t.Error(err)
				return
			}
			h.put(resp.Header.Revision, key, strconv.Itoa(i))
		}
		// Writes outside the prefix must not show up.
		if i%4 == 0 {
			if _, err := cli.Put(ctx, "other/"+key, "x"); err != nil {
				t.Error(err)
			}
		}
	}

	const past, live = 150, 300
	for i := range past {
		write(i)
	}
	if t.Failed() {
		t.FailNow()
	}
	startIdx := len(h.events) / 3
	startRev := h.events[startIdx].rev
	for startIdx > 0 && h.events[startIdx-1].rev == startRev {
		startIdx--
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(wctx, "ws/", clientv3.WithPrefix(), clientv3.WithRev(startRev), clientv3.WithPrevKV())

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := past; i < past+live; i++ {
			write(i)
		}
	}()

	type gotEvent struct {
		ev   *clientv3.Event
		resp int // index of the response that carried it
	}
	var got []gotEvent
	var lastRev int64 // set once the writer is done
	done := writerDone
	for n := 0; lastRev == 0 || len(got) == 0 || got[len(got)-1].ev.Kv.ModRevision < lastRev; n++ {
		select {
		case resp, ok := <-wch:
			if !ok {
				t.Fatalf("watch channel closed after %d events", len(got))
			}
			if err := resp.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			for _, ev := range resp.Events {
				got = append(got, gotEvent{ev: ev, resp: n})
			}
		case <-done:
			done = nil
			lastRev = h.events[len(h.events)-1].rev
		case <-time.After(20 * time.Second):
			t.Fatalf("no watch response for 20s after %d events", len(got))
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	want := h.events[startIdx:]
	for i := 0; i < len(got) || i < len(want); i++ {
		if i >= len(got) {
			t.Fatalf("watch ended after %d events; next wanted %v", len(got), want[i])
		}
		if i >= len(want) {
			t.Fatalf("watch delivered extra event %d: %v", i, got[i].ev)
		}
		g, w := got[i].ev, want[i]
		prev := ""
		if g.PrevKv != nil {
			prev = string(g.PrevKv.Value)
		}
		if g.Kv.ModRevision != w.rev || g.Type != w.typ || string(g.Kv.Key) != w.key || string(g.Kv.Value) != w.value ||
			(g.PrevKv != nil) != w.hasPrev || prev != w.prev {
			t.Fatalf("event %d: got rev %d %s %s=%q prev %v %q; want %v",
				i, g.Kv.ModRevision, g.Type, g.Kv.Key, g.Kv.Value, g.PrevKv != nil, prev, w)
		}
		if i > 0 && got[i-1].ev.Kv.ModRevision == g.Kv.ModRevision && got[i-1].resp != got[i].resp {
			t.Errorf("events of revision %d split across watch responses", g.Kv.ModRevision)
		}
	}

	// A progress request is answered on the same stream with the current
	// revision, after every event already sent.
	if err := cli.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-wch:
		if !resp.IsProgressNotify() || resp.Header.Revision < lastRev {
			t.Fatalf("after RequestProgress: %d events, progress %v, revision %d (want progress at >= %d)",
				len(resp.Events), resp.IsProgressNotify(), resp.Header.Revision, lastRev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RequestProgress not answered within 10s")
	}
}

// TestTxnManyCompares runs one txn with many compares of every target and
// several operators, including a range compare, and nested txns.
func TestTxnManyCompares(t *testing.T) {
	s := startServer(t)
	cli := newClient(t, s)
	ctx := opCtx(t)

	revA := mustPut(t, cli, "tx/a", "1")
	mustPut(t, cli, "tx/b", "2")
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	revL := mustPut(t, cli, "tx/l", "leased", clientv3.WithLease(lease.ID))

	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.Value("tx/a"), "=", "1"),
		clientv3.Compare(clientv3.Value("tx/a"), "!=", "x"),
		clientv3.Compare(clientv3.Value("tx/b"), ">", "1"),
		clientv3.Compare(clientv3.Value("tx/b"), "<", "3"),
		clientv3.Compare(clientv3.Version("tx/a"), "=", 1),
		clientv3.Compare(clientv3.Version("tx/c"), "=", 0),
		clientv3.Compare(clientv3.Version("tx/b"), ">", 0),
		clientv3.Compare(clientv3.CreateRevision("tx/a"), "=", revA),
		clientv3.Compare(clientv3.CreateRevision("tx/c"), "=", 0),
		clientv3.Compare(clientv3.CreateRevision("tx/b"), "!=", revA),
		clientv3.Compare(clientv3.ModRevision("tx/b"), ">", revA),
		clientv3.Compare(clientv3.ModRevision("tx/l"), "=", revL),
		clientv3.Compare(clientv3.ModRevision("tx/l"), "<", revL+1),
		clientv3.Compare(clientv3.LeaseValue("tx/l"), "=", lease.ID),
		clientv3.Compare(clientv3.LeaseValue("tx/a"), "=", clientv3.NoLease),
		// A range compare holds only if it holds for every key in range.
		clientv3.Compare(clientv3.Version("tx/"), ">", 0).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision("tx/"), "<", revL+1).WithPrefix(),
	}
	for i := range 40 {
		// Many more compares, as large clients (Kubernetes) send.
		cmps = append(cmps, clientv3.Compare(clientv3.Value("tx/a"), "<", fmt.Sprintf("1%03d", i)))
	}

	before := currentRev(t, cli)
	resp, err := cli.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut("tx/d", "4"),
		// A read sees the writes of earlier ops in the same txn.
		clientv3.OpGet("tx/", clientv3.WithPrefix()),
		clientv3.OpDelete("tx/b", clientv3.WithPrevKV()),
		// Compares of nested txns are evaluated against the state before
		// the txn (as etcd does): tx/b, deleted by the op above, still
		// compares equal.
		clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value("tx/b"), "=", "2")},
			[]clientv3.Op{
				clientv3.OpPut("tx/e", "5"),
				clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpGet("tx/e")}, nil),
			},
			[]clientv3.Op{clientv3.OpPut("tx/never", "x")},
		),
	).Else(clientv3.OpPut("tx/else", "x")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	rev := before + 1
	if !resp.Succeeded || resp.Header.Revision != rev || len(resp.Responses) != 4 {
		t.Fatalf("txn: succeeded %v, revision %d, %d responses; want true, %d, 4", resp.Succeeded, resp.Header.Revision, len(resp.Responses), rev)
	}
	rng := resp.Responses[1].GetResponseRange()
	var keys []string
	for _, kv := range rng.GetKvs() {
		keys = append(keys, string(kv.Key))
	}
	if fmt.Sprint(keys) != "[tx/a tx/b tx/d tx/l]" {
		t.Errorf("range inside txn: keys %v, want [tx/a tx/b tx/d tx/l]", keys)
	}
	del := resp.Responses[2].GetResponseDeleteRange()
	if del.GetDeleted() != 1 || len(del.GetPrevKvs()) != 1 || string(del.GetPrevKvs()[0].Value) != "2" {
		t.Errorf("delete inside txn: %+v", del)
	}
	nested := resp.Responses[3].GetResponseTxn()
	if !nested.GetSucceeded() || len(nested.GetResponses()) != 2 {
		t.Fatalf("nested txn: succeeded %v, %d responses (%v); want its then branch with 2: etcd evaluates the compares "+
			"of nested txns against the state before the txn, where tx/b (deleted by an earlier op) is still \"2\"",
			nested.GetSucceeded(), len(nested.GetResponses()), nested)
	}
	inner := nested.GetResponses()[1].GetResponseTxn()
	if !inner.GetSucceeded() || len(inner.GetResponses()) != 1 ||
		string(inner.GetResponses()[0].GetResponseRange().GetKvs()[0].Value) != "5" {
		t.Errorf("doubly nested txn: %+v", inner)
	}

	// Every write of the txn carries its single revision.
	all, err := cli.Get(ctx, "tx/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	for _, kv := range all.Kvs {
		state[string(kv.Key)] = fmt.Sprintf("%s@%d", kv.Value, kv.ModRevision)
	}
	wantState := fmt.Sprintf("map[tx/a:1@%d tx/d:4@%d tx/e:5@%d tx/l:leased@%d]", revA, rev, rev, revL)
	if fmt.Sprint(state) != wantState {
		t.Errorf("after txn: %v, want %s", state, wantState)
	}

	// One false compare among many selects the else branch.
	cmps = append(cmps[:len(cmps):len(cmps)], clientv3.Compare(clientv3.Version("tx/a"), ">", 1))
	resp, err = cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut("tx/then", "x")).Else(clientv3.OpPut("tx/else", "y")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded || resp.Header.Revision != rev+1 {
		t.Errorf("failing txn: succeeded %v, revision %d; want false, %d", resp.Succeeded, resp.Header.Revision, rev+1)
	}
	// Neither a failed txn without writes nor a read-only one moves the
	// revision.
	resp, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("tx/a"), "=", "nope")).Then(clientv3.OpPut("tx/x", "x")).Commit()
	if err != nil || resp.Succeeded || resp.Header.Revision != rev+1 {
		t.Errorf("failed empty-else txn: %v, %+v; want revision %d", err, resp, rev+1)
	}
	resp, err = cli.Txn(ctx).Then(clientv3.OpGet("tx/a"), clientv3.OpGet("tx/", clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
	if err != nil || resp.Header.Revision != rev+1 || resp.Responses[1].GetResponseRange().Count != 5 {
		t.Errorf("read-only txn: %v, %+v; want revision %d, count 5", err, resp, rev+1)
	}

	// etcd rejects two writes to one key in one txn with this exact error.
	_, err = cli.Txn(ctx).Then(clientv3.OpPut("tx/dup", "1"), clientv3.OpPut("tx/dup", "2")).Commit()
	if !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Errorf("duplicate key in txn: err %v, want %v", err, rpctypes.ErrDuplicateKey)
	}
}

// TestProgressNotify: an idle watch with progress_notify receives progress
// responses at the configured interval carrying the current revision.
func TestProgressNotify(t *testing.T) {
	flag := "--progress-notify-interval=1s"
	if target == procutil.KindEtcd {
		flag = "--watch-progress-notify-interval=1s"
	}
	s := procutil.Start(t, target, procutil.Options{Args: []string{flag}})
	cli := newClient(t, s)
	rev := mustPut(t, cli, "pn/other", "x")

	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wch := cli.Watch(wctx, "pn/watched", clientv3.WithProgressNotify())
	next := func() clientv3.WatchResponse {
		t.Helper()
		select {
		case resp := <-wch:
			if err := resp.Err(); err != nil {
				t.Fatal(err)
			}
			return resp
		case <-time.After(10 * time.Second):
			t.Fatal("no watch response within 10s with a 1s progress interval")
		}
		return clientv3.WatchResponse{}
	}
	resp := next()
	if !resp.IsProgressNotify() || resp.Header.Revision != rev {
		t.Fatalf("idle watch: progress %v at revision %d, want progress at %d", resp.IsProgressNotify(), resp.Header.Revision, rev)
	}
	// Writes elsewhere move the revision the notifications report.
	rev = mustPut(t, cli, "pn/other", "y")
	for {
		resp = next()
		if !resp.IsProgressNotify() {
			t.Fatalf("unexpected events %v", resp.Events)
		}
		if resp.Header.Revision == rev {
			break
		}
		if resp.Header.Revision > rev {
			t.Fatalf("progress at revision %d, beyond the store's %d", resp.Header.Revision, rev)
		}
	}
	wrev := mustPut(t, cli, "pn/watched", "z")
	resp = next()
	if len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != wrev {
		t.Fatalf("after a write to the watched key: %+v", resp)
	}
}
