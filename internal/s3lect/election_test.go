package s3lect

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster runs real Elections on one fake clock and one in-memory store;
// each node reaches the store through its own fault injector.
type cluster struct {
	t     *testing.T
	clk   *clock.Fake
	inner *mem.Store
	els   []*Election
}

func newCluster(t *testing.T) *cluster {
	clk := clock.NewFake(epoch)
	return &cluster{t: t, clk: clk, inner: mem.New(clk)}
}

type testNode struct {
	*Election
	store *faulty.Store
}

func (c *cluster) add(id string, edit func(*Config)) testNode {
	c.t.Helper()
	store := faulty.New(c.inner, c.clk)
	cfg := Config{
		Store:    store,
		NodeID:   id,
		PeerAddr: id + ":2380",
		Clock:    c.clk,
		Logger:   hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Error, Output: testWriter{c.t}}),
	}
	if edit != nil {
		edit(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(e.Close)
	e.Start()
	c.els = append(c.els, e)
	c.settle()
	return testNode{e, store}
}

// settle waits until every election has done all that is due now and has
// no store call in flight.
func (c *cluster) settle() {
	c.t.Helper()
	for _, e := range c.els {
		if err := e.idle(c.t.Context()); err != nil && err != ErrClosed {
			c.t.Fatal(err)
		}
	}
}

// advance moves the clock by d in steps, letting everyone act after each.
func (c *cluster) advance(d, step time.Duration, each func()) {
	c.t.Helper()
	for d > 0 {
		s := min(step, d)
		c.settle()
		c.clk.Advance(s)
		c.settle()
		d -= s
		if each != nil {
			each()
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func leadership(t *testing.T, e *Election) (Leadership, bool) {
	t.Helper()
	select {
	case l, ok := <-e.Leadership():
		return l, ok
	default:
		return Leadership{}, false
	}
}

func (c *cluster) body() lockBody {
	c.t.Helper()
	data, _, err := c.inner.Get(context.Background(), Key)
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := parseLock(data)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// The driver end to end: acquire, a second node that hears from the
// holder reads the bucket only at start, resign cancels the Ctx before the
// released marker is written, and a suspicious node takes over at once.
func TestElectionSteadyStateResignAndHandover(t *testing.T) {
	c := newCluster(t)
	n1 := c.add("n1", nil)
	l1, ok := leadership(t, n1.Election)
	if !ok || l1.Term != 1 || l1.Ctx.Err() != nil {
		t.Fatalf("n1 leadership = %+v, %v; want term 1, live", l1, ok)
	}
	n2 := c.add("n2", nil)
	if h, ok := n2.Current(); !ok || h.NodeID != "n1" || h.PeerAddr != "n1:2380" || h.Term != 1 {
		t.Fatalf("n2 sees %+v, %v", h, ok)
	}
	sub, unsub := n2.Subscribe()
	defer unsub()
	if h := <-sub; h.NodeID != "n1" {
		t.Fatalf("first subscription value %+v", h)
	}

	// Tier 2: n2 hears from n1 every half second.
	tier2 := func() {
		if h, ok := n1.Current(); ok {
			n2.Observed(h)
		}
	}
	c.advance(3*DefaultLease, 500*time.Millisecond, tier2)
	c.settle()
	if got := n1.store.Calls(faulty.Get); got != 1 {
		t.Errorf("holder read the bucket %d times, want 1 (at start)", got)
	}
	if got := n2.store.Calls(faulty.Get); got != 1 {
		t.Errorf("n2 read the bucket %d times while hearing from the holder, want 1 (at start)", got)
	}
	if got := n1.store.Calls(faulty.PutIfMatch); got != 9 {
		t.Errorf("holder renewed %d times in three leases, want 9", got)
	}
	if n2.store.Calls(faulty.Writes) != 0 {
		t.Error("n2 wrote the lock while it was live")
	}
	if h, _ := n2.Current(); h.Counter != c.body().Counter {
		t.Errorf("n2 knows counter %d, the lock has %d", h.Counter, c.body().Counter)
	}
	select {
	case h := <-sub:
		t.Fatalf("subscription woke for a renewal: %+v", h)
	default:
	}

	// Hold the released marker in flight to see what happened before it.
	slow := n1.store.Delay(faulty.PutIfMatch, "", time.Second)
	resigned := make(chan error, 1)
	go func() { resigned <- n1.Resign(t.Context()) }()
	if err := c.clk.BlockUntil(t.Context(), 3); err != nil { // both loops and the delayed call
		t.Fatal(err)
	}
	if l1.Ctx.Err() == nil {
		t.Fatal("the leadership is still live while the released marker is being written")
	}
	if c.body().Released {
		t.Fatal("marker written before the leadership ended")
	}
	c.clk.Advance(time.Second)
	if err := <-resigned; err != nil {
		t.Fatalf("Resign = %v", err)
	}
	slow.Stop()
	if b := c.body(); !b.Released || b.HolderID != "n1" || b.Term != 1 {
		t.Fatalf("lock after resign = %+v", b)
	}
	n2.Suspect()
	c.settle()
	l2, ok := leadership(t, n2.Election)
	if !ok || l2.Term != 2 {
		t.Fatalf("n2 leadership after Suspect = %+v, %v; want term 2 at once", l2, ok)
	}
	if h := <-sub; h.NodeID != "n2" || h.Term != 2 || h.Released {
		t.Fatalf("subscription shows %+v, want n2 term 2", h)
	}
	// The resigner is not leading and does not try to take the lock back.
	c.advance(2*DefaultLease, time.Second, nil)
	if _, ok := leadership(t, n1.Election); ok {
		t.Fatal("n1 acquired again")
	}
	if l2.Ctx.Err() != nil {
		t.Fatal("n2 lost its leadership in a quiet cluster")
	}
}

// A holder whose renewals fail loses its Ctx at its own validity deadline,
// counted from sending its last successful renewal, and the other node
// takes over only a lease after it first saw that renewal.
func TestElectionRenewFailureCancelsBeforeTakeover(t *testing.T) {
	c := newCluster(t)
	n1 := c.add("n1", nil)
	l1, _ := leadership(t, n1.Election)
	n2 := c.add("n2", nil)
	c.advance(11*time.Second, time.Second, nil) // renewals sent at 5 s and 10 s
	if b := c.body(); b.Counter != 3 {
		t.Fatalf("lock %+v, want two renewals", b)
	}
	n1.store.Fail(faulty.PutIfMatch, "")
	before := n1.store.Calls(faulty.PutIfMatch)
	lastRenewSent := epoch.Add(10 * time.Second)
	var lost, taken time.Time
	c.advance(30*time.Second, 100*time.Millisecond, func() {
		if lost.IsZero() && l1.Ctx.Err() != nil {
			lost = c.clk.Now()
		}
		if taken.IsZero() {
			if l, ok := leadership(t, n2.Election); ok {
				taken = c.clk.Now()
				if l.Term != 2 {
					t.Errorf("takeover term %d, want 2", l.Term)
				}
			}
		}
	})
	if want := lastRenewSent.Add(time.Duration(float64(DefaultLease) * HolderFraction)); !lost.Equal(want) {
		t.Errorf("holder lost at %v, want its validity deadline %v", lost.Sub(epoch), want.Sub(epoch))
	}
	// n2 polls every second, so it first saw the 10 s renewal at 10 s or 11 s.
	if taken.Before(lastRenewSent.Add(DefaultLease)) || taken.After(lastRenewSent.Add(DefaultLease+2*time.Second)) {
		t.Errorf("n2 took over at %v, want a lease after it first saw the last renewal (25-27 s)", taken.Sub(epoch))
	}
	if !lost.Before(taken) {
		t.Errorf("holder lost at %v, not before the takeover at %v", lost.Sub(epoch), taken.Sub(epoch))
	}
	if tries := n1.store.Calls(faulty.PutIfMatch) - before; tries < 3 {
		t.Errorf("holder tried to renew %d times during the outage, want retries", tries)
	}
}

// A renewal that hangs does not keep the holder acting: the Ctx is
// cancelled at the deadline while the call is still out, and the call is
// abandoned.
func TestElectionHungRenewStillLosesOnTime(t *testing.T) {
	c := newCluster(t)
	n1 := c.add("n1", nil)
	l1, _ := leadership(t, n1.Election)
	hang := n1.store.Delay(faulty.PutIfMatch, "", time.Hour)
	defer hang.Stop()
	c.settle()           // the loop's renewal timer is armed
	c.clk.Advance(renew) // the renewal goes out and hangs
	// The loop's timer (the validity deadline) and the hanging call's.
	if err := c.clk.BlockUntil(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	c.clk.Advance(time.Duration(float64(lease)*HolderFraction) - renew - time.Millisecond)
	if l1.Ctx.Err() != nil {
		t.Fatal("lost before the validity deadline")
	}
	c.clk.Advance(time.Millisecond)
	select {
	case <-l1.Ctx.Done():
	case <-t.Context().Done():
		t.Fatal("still leading at the validity deadline while the renewal hangs")
	}
	c.settle() // the hanging call is abandoned, so the loop goes idle
	if got := n1.store.Calls(faulty.PutIfMatch); got != 1 {
		t.Fatalf("%d renew calls, want the one that hung", got)
	}
}

// Close cancels the holder's Ctx without resigning and closes the channels.
func TestElectionCloseDoesNotResign(t *testing.T) {
	c := newCluster(t)
	n1 := c.add("n1", nil)
	l1, _ := leadership(t, n1.Election)
	sub, _ := n1.Subscribe()
	<-sub
	n1.Close()
	if l1.Ctx.Err() == nil {
		t.Fatal("Close left the leadership live")
	}
	if c.body().Released {
		t.Fatal("Close wrote the released marker")
	}
	if _, ok := <-n1.Leadership(); ok {
		t.Fatal("Leadership channel still open")
	}
	if _, ok := <-sub; ok {
		t.Fatal("subscription still open")
	}
	if err := n1.Resign(t.Context()); err != ErrClosed {
		t.Fatalf("Resign after Close = %v", err)
	}
	n1.Close() // twice is fine
}

// An observer never writes, even to an empty bucket, and polls every Poll.
func TestElectionObserverNeverWrites(t *testing.T) {
	c := newCluster(t)
	obs := c.add("ctl", func(cfg *Config) { cfg.Observer = true })
	c.advance(2*DefaultLease, 250*time.Millisecond, nil)
	if obs.store.Calls(faulty.Writes) != 0 {
		t.Fatal("an observer wrote the lock")
	}
	if got := obs.store.Calls(faulty.Get); got != 31 {
		t.Fatalf("observer read %d times in 30 s, want 31 (start + every second)", got)
	}
	if _, ok := obs.Current(); ok {
		t.Fatal("observer reports a holder for an empty bucket")
	}
}

func newMemStore() *mem.Store { return mem.New(clock.NewFake(epoch)) }

func TestConfigValidate(t *testing.T) {
	base := func() Config { return Config{Store: newMemStore(), NodeID: "n1"} }
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"defaults ok":  {func(*Config) {}, ""},
		"no store":     {func(c *Config) { c.Store = nil }, "Store"},
		"no node":      {func(c *Config) { c.NodeID = "" }, "NodeID"},
		"renew > half": {func(c *Config) { c.Lease, c.Renew = 10*time.Second, 6*time.Second }, "Renew"},
		"neg renew":    {func(c *Config) { c.Renew = -time.Second }, "Renew"},
		"neg lease":    {func(c *Config) { c.Lease = -time.Second }, "Lease"},
		"neg poll":     {func(c *Config) { c.Poll = -time.Second }, "Poll"},
	} {
		cfg := base()
		tc.edit(&cfg)
		_, err := New(cfg)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: New = %v, want error naming %q", name, err, tc.want)
		}
	}
}
