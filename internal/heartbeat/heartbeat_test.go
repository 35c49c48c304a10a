package heartbeat

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// elector is a scripted Send: it fails while down, records what it got.
type elector struct {
	mu    sync.Mutex
	down  bool
	got   []uint64 // seqs
	calls chan struct{}
}

func (e *elector) send(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	e.mu.Lock()
	down := e.down
	e.got = append(e.got, hb.Seq)
	e.mu.Unlock()
	defer func() { e.calls <- struct{}{} }()
	if down {
		return nil, errors.New("unreachable")
	}
	return &netsyv1.HeartbeatResponse{Seq: hb.Seq}, nil
}

func (e *elector) setDown(d bool) {
	e.mu.Lock()
	e.down = d
	e.mu.Unlock()
}

type healthLog struct {
	mu sync.Mutex
	ch chan bool
}

// A node marks itself Degraded only after a send and its immediate retry
// fail, and is Healthy again after the next send that gets through;
// answers carry the time their heartbeat was sent.
func TestDegradeAfterRetryAndRecover(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	el := &elector{calls: make(chan struct{}, 100)}
	health := make(chan bool, 10)
	answered := make(chan time.Time, 100)
	s := New(Config{
		Interval: 500 * time.Millisecond,
		Clock:    clk,
		State:    func() *netsyv1.Heartbeat { return &netsyv1.Heartbeat{NodeId: "n1"} },
		Send:     el.send,
		Answered: func(_ *netsyv1.HeartbeatResponse, at time.Time) { answered <- at },
		Health:   func(ok bool, _ error) { health <- ok },
	})
	s.Start()
	defer s.Close()

	<-el.calls
	if ok := <-health; !ok {
		t.Fatal("first successful send did not report Healthy")
	}
	if at := <-answered; !at.Equal(time.Unix(1000, 0)) {
		t.Fatalf("answer reported sent at %v, want the send time", at)
	}

	el.setDown(true)
	if err := clk.BlockUntil(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(500 * time.Millisecond)
	<-el.calls // the send
	<-el.calls // its immediate retry, with no tick in between
	if ok := <-health; ok {
		t.Fatal("two failed sends did not report Degraded")
	}
	el.mu.Lock()
	if n := len(el.got); n != 3 || el.got[1]+1 != el.got[2] {
		t.Fatalf("sends %v: want the retry right after the failed send", el.got)
	}
	el.mu.Unlock()
	if s.Healthy() {
		t.Fatal("Healthy() after two failures")
	}

	el.setDown(false)
	clk.Advance(500 * time.Millisecond)
	<-el.calls
	if ok := <-health; !ok {
		t.Fatal("a successful send did not bring the node back to Healthy")
	}
}

// One failure followed by a successful retry does not degrade the node.
func TestOneFailureIsRetried(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	var mu sync.Mutex
	fails := 1
	calls := make(chan struct{}, 10)
	health := make(chan bool, 10)
	s := New(Config{
		Clock: clk,
		State: func() *netsyv1.Heartbeat { return &netsyv1.Heartbeat{} },
		Send: func(context.Context, *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
			defer func() { calls <- struct{}{} }()
			mu.Lock()
			defer mu.Unlock()
			if fails > 0 {
				fails--
				return nil, errors.New("blip")
			}
			return &netsyv1.HeartbeatResponse{}, nil
		},
		Health: func(ok bool, _ error) { health <- ok },
	})
	s.Start()
	defer s.Close()
	<-calls
	<-calls
	if ok := <-health; !ok {
		t.Fatal("a failure cured by the retry degraded the node")
	}
}

// A send that hangs is cut off after one interval on the injected clock.
func TestSendBoundedByInterval(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	health := make(chan bool, 10)
	started := make(chan struct{}, 10)
	s := New(Config{
		Clock: clk,
		State: func() *netsyv1.Heartbeat { return &netsyv1.Heartbeat{} },
		Send: func(ctx context.Context, _ *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		},
		Health: func(ok bool, _ error) { health <- ok },
	})
	s.Start()
	defer s.Close()
	for range 2 {
		<-started
		// The send's timer and the ticker are armed.
		if err := clk.BlockUntil(t.Context(), 2); err != nil {
			t.Fatal(err)
		}
		clk.Advance(DefaultInterval)
	}
	if ok := <-health; ok {
		t.Fatal("hanging sends did not degrade the node")
	}
}

// Without an Interval a node heartbeats every 500 ms (the seed's cadence),
// on the injected clock.
func TestDefaultIntervalIs500ms(t *testing.T) {
	if DefaultInterval != 500*time.Millisecond {
		t.Fatalf("DefaultInterval is %v, want 500ms", DefaultInterval)
	}
	clk := clock.NewFake(time.Unix(1000, 0))
	el := &elector{calls: make(chan struct{}, 100)}
	s := New(Config{Clock: clk, State: func() *netsyv1.Heartbeat { return &netsyv1.Heartbeat{} }, Send: el.send})
	s.Start()
	defer s.Close()
	<-el.calls // the first beat, at once
	for range 3 {
		if err := clk.BlockUntil(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(499 * time.Millisecond)
		select {
		case <-el.calls:
			t.Fatal("a heartbeat before 500 ms passed")
		default:
		}
		clk.Advance(time.Millisecond)
		<-el.calls
	}
}

// A receiver marks a node Degraded after 2 missed heartbeats: 1 s at the
// default interval.
func TestDegradedAfterTwoMissedBeats(t *testing.T) {
	if MissedBeats != 2 {
		t.Fatalf("MissedBeats is %d, want 2", MissedBeats)
	}
	if got := DegradeWindow(DefaultInterval); got != time.Second {
		t.Fatalf("DegradeWindow(DefaultInterval) is %v, want 1s", got)
	}
	if got := DegradeWindow(50 * time.Millisecond); got != 100*time.Millisecond {
		t.Fatalf("DegradeWindow(50ms) is %v, want 100ms", got)
	}
}

// Receipts and heartbeats go through one health decision: a receipt that
// failed with its retry degrades the node as a heartbeat does, and the
// next send that gets through, a heartbeat here, makes it Healthy again.
func TestReceiptFailureDegradesLikeAHeartbeat(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	el := &elector{calls: make(chan struct{}, 100)}
	health := make(chan bool, 10)
	judge := NewJudge(nil, func(ok bool, _ error) { health <- ok })
	s := New(Config{
		Clock: clk, Judge: judge,
		State: func() *netsyv1.Heartbeat { return &netsyv1.Heartbeat{} },
		Send:  el.send,
	})
	s.Start()
	defer s.Close()
	<-el.calls
	if ok := <-health; !ok {
		t.Fatal("the first heartbeat did not report Healthy")
	}
	judge.Sent("receipt", errors.New("receipt and retry failed"))
	if ok := <-health; ok || s.Healthy() || judge.Healthy() {
		t.Fatal("a failed receipt and retry did not make the node Degraded")
	}
	if err := clk.BlockUntil(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultInterval)
	<-el.calls
	if ok := <-health; !ok || !s.Healthy() {
		t.Fatal("a heartbeat that got through did not make the node Healthy again")
	}
	// And the other way round: a heartbeat failure is cured by a receipt.
	el.setDown(true)
	clk.Advance(DefaultInterval)
	<-el.calls
	<-el.calls
	if ok := <-health; ok {
		t.Fatal("a failed heartbeat and retry did not make the node Degraded")
	}
	judge.Sent("receipt", nil)
	if ok := <-health; !ok || !s.Healthy() {
		t.Fatal("a receipt that got through did not make the node Healthy again")
	}
	if len(health) > 0 {
		t.Fatalf("%d more reports than changes", len(health))
	}
}

// While Fast says so (the Active Primary, whose lease the answers renew)
// the sender beats every half interval; otherwise every interval.
func TestFastBeatsTwicePerInterval(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	el := &elector{calls: make(chan struct{}, 100)}
	var mu sync.Mutex
	fast := false
	// Fast is asked on every tick of the half-interval ticker and of the
	// interval one: the test waits for each ask, and each beat, after
	// every step, so no tick is dropped for arriving while the last one
	// was unread.
	asked := make(chan struct{}, 100)
	s := New(Config{
		Interval: 500 * time.Millisecond,
		Clock:    clk,
		State:    func() *netsyv1.Heartbeat { return &netsyv1.Heartbeat{NodeId: "n1"} },
		Send:     el.send,
		Fast: func() bool {
			defer func() { asked <- struct{}{} }()
			mu.Lock()
			defer mu.Unlock()
			return fast
		},
	})
	s.Start()
	defer s.Close()
	<-el.calls // the first beat, at once
	sent := func() int {
		el.mu.Lock()
		defer el.mu.Unlock()
		return len(el.got)
	}
	// step moves half an interval and waits for asks asks and beats beats.
	step := func(asks, beats int) {
		clk.Advance(250 * time.Millisecond)
		for range asks {
			<-asked
		}
		for range beats {
			<-el.calls
		}
	}
	// Slow: two intervals, four half-interval steps, two beats.
	for range 2 {
		step(1, 0)
		step(2, 1)
	}
	if n := sent(); n != 3 {
		t.Fatalf("%d beats after two intervals, want 3 (one at start, one per interval)", n)
	}
	mu.Lock()
	fast = true
	mu.Unlock()
	for range 2 {
		step(1, 1)
		step(2, 1)
	}
	if n := sent(); n != 7 {
		t.Fatalf("%d beats after two fast intervals, want 7 (one per half interval)", n)
	}
}
