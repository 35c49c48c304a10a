//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// crashWriter commits a sequence of txns 1, 2, 3, ...; txn n atomically sets
// the writer's counter key to n and creates two keys of its own, guarded by
// the counter still being n-1, so a retry after an unknown outcome can never
// apply twice.
type crashWriter struct {
	id int

	mu sync.Mutex
	// revs maps each txn known to be committed (acknowledged, or observed
	// by a read after an unknown outcome) to its revision.
	revs map[int64]int64
}

func (w *crashWriter) prefix() string     { return fmt.Sprintf("crash/w%d/", w.id) }
func (w *crashWriter) counterKey() string { return w.prefix() + "ctr" }
func (w *crashWriter) seqKey(n int64, part string) string {
	return fmt.Sprintf("%ss/%08d/%s", w.prefix(), n, part)
}
func (w *crashWriter) seqValue(n int64, part string) string {
	return fmt.Sprintf("w%d-%d-%s", w.id, n, part)
}

func (w *crashWriter) record(n, rev int64) {
	w.mu.Lock()
	w.revs[n] = rev
	w.mu.Unlock()
}

func (w *crashWriter) committed() map[int64]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int64]int64, len(w.revs))
	for n, r := range w.revs {
		out[n] = r
	}
	return out
}

func (w *crashWriter) run(ctx context.Context, cli *clientv3.Client) error {
	for n := int64(1); ctx.Err() == nil; {
		guard := clientv3.Compare(clientv3.Value(w.counterKey()), "=", strconv.FormatInt(n-1, 10))
		if n == 1 {
			guard = clientv3.Compare(clientv3.CreateRevision(w.counterKey()), "=", 0)
		}
		opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cli.Txn(opCtx).If(guard).Then(
			clientv3.OpPut(w.counterKey(), strconv.FormatInt(n, 10)),
			clientv3.OpPut(w.seqKey(n, "a"), w.seqValue(n, "a")),
			clientv3.OpPut(w.seqKey(n, "b"), w.seqValue(n, "b")),
		).Commit()
		cancel()
		if err == nil && resp.Succeeded {
			w.record(n, resp.Header.Revision)
			n++
			continue
		}
		// Unknown outcome (error) or a guard that failed: only a read tells
		// whether txn n is in.
		if err != nil {
			time.Sleep(20 * time.Millisecond)
		}
		ctr, rev, err := w.readCounter(ctx, cli)
		if err != nil {
			if ctx.Err() != nil {
				return nil // the test is over
			}
			return fmt.Errorf("writer %d: %w", w.id, err)
		}
		switch ctr {
		case n:
			w.record(n, rev)
			n++
		case n - 1:
			// Not applied; try again.
		default:
			return fmt.Errorf("writer %d: counter is %d while committing txn %d", w.id, ctr, n)
		}
	}
	return nil
}

// readCounter retries until the server answers or ctx ends. An attempt
// made while the server is down hangs until its timeout even once the
// server is back, so attempts are short (a one-key read on loopback): a
// 2 s timeout left every writer idle for about 0.7 s after each restart.
func (w *crashWriter) readCounter(ctx context.Context, cli *clientv3.Client) (int64, int64, error) {
	for {
		opCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		resp, err := cli.Get(opCtx, w.counterKey())
		cancel()
		if err == nil {
			if len(resp.Kvs) == 0 {
				return 0, 0, nil
			}
			n, perr := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
			if perr != nil {
				return 0, 0, perr
			}
			return n, resp.Kvs[0].ModRevision, nil
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *crashWriter) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.revs)
}

// TestCrashRecovery SIGKILLs the server at random moments while several
// clients commit multi-key txns, restarts it on the same data directory
// each time, and checks after every restart that every committed txn is
// present with the revision it was committed at, and that no txn is
// partially visible.
func TestCrashRecovery(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	kills := 25
	if v, err := strconv.Atoi(os.Getenv("NETSY_E2E_CRASH_KILLS")); err == nil && v > 0 {
		kills = v
	}
	const writers = 3

	s := startServer(t)
	verifier := newClient(t, s)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()

	ws := make([]*crashWriter, writers)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = &crashWriter{id: i, revs: map[int64]int64{}}
		cli := newClient(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ws[i].run(ctx, cli); err != nil {
				errs <- err
			}
		}()
	}
	stopWriters := func() {
		stop()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}

	totalAcked := func() int {
		n := 0
		for _, w := range ws {
			n += w.total()
		}
		return n
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	start := time.Now()
	for i := 1; i <= kills; i++ {
		// Writers must get commits through the restarted server, so every
		// kill lands in the middle of a stream of writes.
		before := totalAcked()
		deadline := time.Now().Add(20 * time.Second)
		for totalAcked() == before {
			if time.Now().After(deadline) {
				stopWriters()
				t.Fatalf("kill %d: no txn committed within 20s of the restart", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(1200)) * time.Millisecond)

		if err := s.Kill(); err != nil {
			stopWriters()
			t.Fatal(err)
		}
		if err := s.Restart(); err != nil {
			stopWriters()
			t.Fatalf("kill %d: %v", i, err)
		}
		if err := verifyCrashState(ctx, verifier, ws); err != nil {
			stopWriters()
			t.Fatalf("after kill %d of %d: %v", i, kills, err)
		}
	}
	stopWriters()
	if err := verifyCrashState(t.Context(), verifier, ws); err != nil {
		t.Fatalf("final state: %v", err)
	}
	t.Logf("%d kills in %v; %d txns committed", kills, time.Since(start).Round(time.Millisecond), totalAcked())
}

// verifyCrashState reads the whole key space at one revision and checks it
// against what the writers know to be committed.
func verifyCrashState(ctx context.Context, cli *clientv3.Client, ws []*crashWriter) error {
	// Known commits are taken before the read, so every one of them must
	// be visible in it.
	known := make([]map[int64]int64, len(ws))
	for i, w := range ws {
		known[i] = w.committed()
	}
	kvs, rev, err := readAllAt(ctx, cli, "crash/")
	if err != nil {
		return err
	}

	type seq struct{ a, b *mvccpb.KeyValue }
	var problems []string
	fail := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	byRev := map[int64]string{}
	for i, w := range ws {
		var ctr *mvccpb.KeyValue
		seqs := map[int64]*seq{}
		var maxSeq int64
		for _, kv := range kvs {
			k := string(kv.Key)
			if !strings.HasPrefix(k, w.prefix()) {
				continue
			}
			if k == w.counterKey() {
				ctr = kv
				continue
			}
			num, part, ok := strings.Cut(strings.TrimPrefix(k, w.prefix()+"s/"), "/")
			n, err := strconv.ParseInt(num, 10, 64)
			if !ok || err != nil || n <= 0 {
				fail("unexpected key %q", k)
				continue
			}
			if seqs[n] == nil {
				seqs[n] = &seq{}
			}
			switch part {
			case "a":
				seqs[n].a = kv
			case "b":
				seqs[n].b = kv
			default:
				fail("unexpected key %q", k)
			}
			maxSeq = max(maxSeq, n)
		}

		var ctrVal int64
		if ctr != nil {
			ctrVal, _ = strconv.ParseInt(string(ctr.Value), 10, 64)
		}
		// Txns are committed one after another, so the counter names the
		// newest and every older one must be complete.
		if ctrVal != maxSeq {
			fail("writer %d: counter %d but newest txn keys are of txn %d", w.id, ctrVal, maxSeq)
		}
		var prevRev int64
		for n := int64(1); n <= maxSeq; n++ {
			sq := seqs[n]
			switch {
			case sq == nil:
				fail("writer %d: txn %d missing (newest %d)", w.id, n, maxSeq)
				continue
			case sq.a == nil || sq.b == nil:
				fail("writer %d: txn %d partially visible (a %v, b %v)", w.id, n, sq.a != nil, sq.b != nil)
				continue
			}
			if string(sq.a.Value) != w.seqValue(n, "a") || string(sq.b.Value) != w.seqValue(n, "b") {
				fail("writer %d: txn %d values %q, %q", w.id, n, sq.a.Value, sq.b.Value)
			}
			r := sq.a.ModRevision
			if sq.b.ModRevision != r || sq.a.CreateRevision != r || sq.a.Version != 1 || sq.b.Version != 1 {
				fail("writer %d: txn %d keys at revisions a=%d/%d b=%d/%d, want one revision", w.id, n,
					sq.a.CreateRevision, sq.a.ModRevision, sq.b.CreateRevision, sq.b.ModRevision)
			}
			if r <= prevRev {
				fail("writer %d: txn %d at revision %d, not after txn %d at %d", w.id, n, r, n-1, prevRev)
			}
			prevRev = r
			if other, dup := byRev[r]; dup {
				fail("revision %d holds txn %d of writer %d and %s", r, n, w.id, other)
			}
			byRev[r] = fmt.Sprintf("txn %d of writer %d", n, w.id)
			if n == maxSeq && (ctr == nil || ctr.ModRevision != r || ctr.Version != n) {
				fail("writer %d: counter %+v, want version %d at revision %d", w.id, ctr, n, r)
			}
		}
		for n, r := range known[i] {
			if r > rev {
				fail("writer %d: txn %d committed at revision %d, beyond the read revision %d", w.id, n, r, rev)
			}
			if n > maxSeq {
				fail("writer %d: committed txn %d (revision %d) lost; newest present is %d", w.id, n, r, maxSeq)
				continue
			}
			if sq := seqs[n]; sq != nil && sq.a != nil && sq.a.ModRevision != r {
				fail("writer %d: txn %d committed at revision %d, now at %d", w.id, n, r, sq.a.ModRevision)
			}
		}
	}
	if len(problems) > 0 {
		return errors.New("state at revision " + strconv.FormatInt(rev, 10) + ":\n" + strings.Join(problems, "\n"))
	}
	return nil
}

// readAllAt reads every key under prefix at a single revision, in pages.
func readAllAt(ctx context.Context, cli *clientv3.Client, prefix string) ([]*mvccpb.KeyValue, int64, error) {
	const page = 5000
	end := clientv3.GetPrefixRangeEnd(prefix)
	var (
		all []*mvccpb.KeyValue
		rev int64
		key = prefix
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		var resp *clientv3.GetResponse
		// The server has only just restarted; ride out a brief refusal.
		deadline := time.Now().Add(20 * time.Second)
		for {
			opCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			resp, err = cli.Get(opCtx, key, opts...)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return nil, 0, fmt.Errorf("read %s from %q: %w", prefix, key, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		all = append(all, resp.Kvs...)
		if !resp.More {
			return all, rev, nil
		}
		if len(resp.Kvs) == 0 {
			return nil, 0, fmt.Errorf("range from %q: more without keys", key)
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// TestCrashVerifierDetectsDamage proves verifyCrashState is not vacuous: it
// must report a lost key, a lost txn and a rewritten revision.
func TestCrashVerifierDetectsDamage(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	s := startServer(t)
	cli := newClient(t, s)
	w := &crashWriter{id: 0, revs: map[int64]int64{}}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.run(ctx, cli) }()
	for w.total() < 5 {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ws := []*crashWriter{w}
	if err := verifyCrashState(t.Context(), cli, ws); err != nil {
		t.Fatalf("intact state rejected: %v", err)
	}

	damage := []struct {
		name string
		do   func()
		want string
	}{
		{"partial txn", func() { _, _ = cli.Delete(t.Context(), w.seqKey(2, "b")) }, "partially visible"},
		{"rewritten revision", func() { mustPut(t, cli, w.seqKey(3, "a"), w.seqValue(3, "a")) }, "want one revision"},
		// As if the server had acknowledged a txn that is not there.
		{"lost txn", func() { w.record(1000, currentRev(t, cli)) }, "committed txn 1000"},
	}
	for _, d := range damage {
		d.do()
		err := verifyCrashState(t.Context(), cli, ws)
		if err == nil || !strings.Contains(err.Error(), d.want) {
			t.Errorf("%s: verifier said %v, want a report containing %q", d.name, err, d.want)
		}
	}
}

// TestLeaseSurvivesCrash: leases and their keys outlive a SIGKILL; after
// the restart a long lease still holds its keys and a short one still
// expires and deletes its keys (etcd renews remaining TTLs on restart, so
// expiry comes at most one TTL after the restart).
func TestLeaseSurvivesCrash(t *testing.T) {
	s := startServer(t)
	cli := newClient(t, s)
	ctx := opCtx(t)
	long, err := cli.Grant(ctx, 120)
	if err != nil {
		t.Fatal(err)
	}
	short, err := cli.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, cli, "ls/long", "x", clientv3.WithLease(long.ID))
	mustPut(t, cli, "ls/short", "y", clientv3.WithLease(short.ID))

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	ttl, err := cli.TimeToLive(ctx, long.ID, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL <= 0 || ttl.GrantedTTL != 120 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "ls/long" {
		t.Fatalf("long lease after crash: ttl %d granted %d keys %q", ttl.TTL, ttl.GrantedTTL, ttl.Keys)
	}
	if _, err := cli.KeepAliveOnce(ctx, long.ID); err != nil {
		t.Fatalf("keep-alive after crash: %v", err)
	}
	for {
		resp, err := cli.Get(ctx, "ls/short")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if time.Since(restarted) > 3*time.Second+8*time.Second {
			t.Fatalf("key of a 3s lease still present %v after restart", time.Since(restarted))
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := cli.Get(ctx, "ls/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "ls/long" {
		t.Fatalf("after short lease expired: %v %v", resp, err)
	}
	if _, err := cli.Revoke(ctx, long.ID); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, "ls/", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after revoke: %v %v", resp, err)
	}
}
