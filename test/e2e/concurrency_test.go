//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// candidate is one election participant with its own connection, as a
// separate process would have, so closing it looks like that process dying.
type candidate struct {
	name string
	cli  *clientv3.Client
	sess *concurrency.Session
	e    *concurrency.Election
	won  chan error
}

const electionTTL = 2 // seconds; short so a crashed leader is replaced quickly

func newCandidate(t *testing.T, cli *clientv3.Client, prefix, name string) *candidate {
	t.Helper()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(electionTTL))
	if err != nil {
		t.Fatalf("session for %s: %v", name, err)
	}
	return &candidate{name: name, cli: cli, sess: sess, e: concurrency.NewElection(sess, prefix), won: make(chan error, 1)}
}

// campaign starts campaigning in the background; c.won reports the result.
func (c *candidate) campaign(ctx context.Context) {
	go func() { c.won <- c.e.Campaign(ctx, c.name) }()
}

func (c *candidate) requireWaiting(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case err := <-c.won:
		t.Fatalf("%s became leader (err %v) while another candidate leads", c.name, err)
	case <-time.After(d):
	}
}

func (c *candidate) requireElected(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case err := <-c.won:
		if err != nil {
			t.Fatalf("%s campaign: %v", c.name, err)
		}
	case <-time.After(within):
		t.Fatalf("%s not elected within %v", c.name, within)
	}
	return time.Since(start)
}

func TestElection(t *testing.T) {
	s := startServer(t)
	const prefix = "/election/e2e"
	ctx := t.Context()

	// The observer records every leader it is told about.
	obsCli := newClient(t, s)
	obsSess, err := concurrency.NewSession(obsCli)
	if err != nil {
		t.Fatal(err)
	}
	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	var (
		obsMu   sync.Mutex
		leaders []string
	)
	observed := make(chan struct{}, 16)
	go func() {
		for resp := range concurrency.NewElection(obsSess, prefix).Observe(obsCtx) {
			if len(resp.Kvs) == 0 {
				continue
			}
			obsMu.Lock()
			v := string(resp.Kvs[0].Value)
			if len(leaders) == 0 || leaders[len(leaders)-1] != v {
				leaders = append(leaders, v)
			}
			obsMu.Unlock()
			select {
			case observed <- struct{}{}:
			default: // the reader only needs to know something changed
			}
		}
	}()

	a := newCandidate(t, newClient(t, s), prefix, "a")
	a.campaign(ctx)
	a.requireElected(t, 10*time.Second)

	b := newCandidate(t, newClient(t, s), prefix, "b")
	b.campaign(ctx)
	b.requireWaiting(t, 500*time.Millisecond)
	c := newCandidate(t, newClient(t, s), prefix, "c")
	c.campaign(ctx)
	c.requireWaiting(t, 200*time.Millisecond)

	if resp, err := a.e.Leader(ctx); err != nil || string(resp.Kvs[0].Value) != "a" {
		t.Fatalf("Leader() = %v, %v; want a", resp, err)
	}

	// A resignation hands over at once, to the candidate that queued first.
	if err := a.e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if d := b.requireElected(t, time.Second); d > time.Second {
		t.Fatalf("b elected %v after a resigned", d)
	}
	c.requireWaiting(t, 200*time.Millisecond)

	// b "crashes": its connection goes away without a resignation, so its
	// key stays until the session lease expires.
	crashed := time.Now()
	if err := b.cli.Close(); err != nil {
		t.Fatal(err)
	}
	c.requireElected(t, electionTTL*time.Second+5*time.Second)
	took := time.Since(crashed)
	t.Logf("c elected %v after b's connection closed (lease TTL %ds)", took, electionTTL)
	// The lease was renewed at most a third of its TTL ago when b died.
	if took < electionTTL*time.Second/3 {
		t.Errorf("c elected %v after b crashed: sooner than b's lease could expire", took)
	}
	if resp, err := c.e.Leader(ctx); err != nil || string(resp.Kvs[0].Value) != "c" {
		t.Fatalf("Leader() = %v, %v; want c", resp, err)
	}

	// The observer saw every leader, in order.
	deadline := time.After(5 * time.Second)
	for {
		obsMu.Lock()
		got := fmt.Sprint(leaders)
		obsMu.Unlock()
		if got == "[a b c]" {
			break
		}
		select {
		case <-observed:
		case <-deadline:
			t.Fatalf("observed leaders %s, want [a b c]", got)
		}
	}
	if err := c.e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMutex(t *testing.T) {
	s := startServer(t)
	const (
		workers = 5
		rounds  = 8
		counter = "/mutex/counter"
	)
	ctx := t.Context()
	setup := newClient(t, s)
	mustPut(t, setup, counter, "0")

	var (
		holders atomic.Int32
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	for w := range workers {
		cli := newClient(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- mutexWorker(ctx, cli, w, rounds, counter, &holders)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	resp, err := setup.Get(opCtx(t), counter)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Kvs[0].Value); got != strconv.Itoa(workers*rounds) {
		t.Fatalf("counter = %s after %d locked increments: mutual exclusion failed", got, workers*rounds)
	}
}

// mutexWorker increments counter under the lock with a plain read and
// write, so any overlap of two holders loses an update, and also checks
// overlap directly with an in-process holder count.
func mutexWorker(ctx context.Context, cli *clientv3.Client, id, rounds int, counter string, holders *atomic.Int32) error {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		return err
	}
	defer sess.Close()
	m := concurrency.NewMutex(sess, "/mutex/lock")
	for i := range rounds {
		if err := m.Lock(ctx); err != nil {
			return fmt.Errorf("worker %d lock: %w", id, err)
		}
		if n := holders.Add(1); n != 1 {
			return fmt.Errorf("worker %d: %d holders of the lock", id, n)
		}
		resp, err := cli.Get(ctx, counter)
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(resp.Kvs[0].Value))
		// Widen the window in which a second holder would interleave.
		time.Sleep(time.Duration(id+i)%3*time.Millisecond + time.Millisecond)
		// The recipe's ownership check: write only while still the owner.
		tr, err := cli.Txn(ctx).If(m.IsOwner()).Then(clientv3.OpPut(counter, strconv.Itoa(n+1))).Commit()
		if err != nil {
			return err
		}
		if !tr.Succeeded {
			return fmt.Errorf("worker %d: lost ownership while holding the lock", id)
		}
		holders.Add(-1)
		if err := m.Unlock(ctx); err != nil {
			return fmt.Errorf("worker %d unlock: %w", id, err)
		}
	}
	return nil
}
