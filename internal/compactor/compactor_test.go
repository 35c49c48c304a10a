package compactor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/mvcc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseAsEtcd(t *testing.T) {
	for _, c := range []struct {
		mode, retention string
		want            Policy
		bad             bool
	}{
		{mode: "periodic", retention: "0", want: Policy{Mode: "periodic"}},
		{mode: "periodic", retention: "", want: Policy{Mode: "periodic"}},
		{mode: "periodic", retention: "10s", want: Policy{Mode: "periodic", Period: 10 * time.Second}},
		{mode: "periodic", retention: "1h30m", want: Policy{Mode: "periodic", Period: 90 * time.Minute}},
		{mode: "periodic", retention: "72", want: Policy{Mode: "periodic", Period: 72 * time.Hour}},
		{mode: "revision", retention: "1000", want: Policy{Mode: "revision", Revisions: 1000}},
		{mode: "revision", retention: "10s", bad: true},
		{mode: "periodic", retention: "-1", bad: true},
		{mode: "periodic", retention: "-5s", bad: true},
		{mode: "periodic", retention: "ten", bad: true},
		{mode: "hourly", retention: "1", bad: true},
	} {
		got, err := Parse(c.mode, c.retention)
		if c.bad {
			if err == nil {
				t.Errorf("Parse(%q, %q) = %+v, want an error", c.mode, c.retention, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Parse(%q, %q) = %+v, %v, want %+v", c.mode, c.retention, got, err, c.want)
		}
	}
}

// fakeTarget is an engine whose revision the test moves; it records every
// compaction and can fail them.
type fakeTarget struct {
	mu        sync.Mutex
	rev       int64
	floor     int64
	compacted []int64
	fail      error
}

func (f *fakeTarget) CurrentRevision() int64 { f.mu.Lock(); defer f.mu.Unlock(); return f.rev }
func (f *fakeTarget) CompactRevision() int64 { f.mu.Lock(); defer f.mu.Unlock(); return f.floor }
func (f *fakeTarget) Compact(_ context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	if r.Revision <= f.floor {
		return nil, mvcc.ErrCompacted
	}
	f.floor = r.Revision
	f.compacted = append(f.compacted, r.Revision)
	return &pb.CompactionResponse{}, nil
}

func (f *fakeTarget) set(rev int64) { f.mu.Lock(); f.rev = rev; f.mu.Unlock() }
func (f *fakeTarget) got() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.compacted...)
}

// runner drives a started Compactor one step at a time on a fake clock.
type runner struct {
	t     *testing.T
	clk   *clock.Fake
	tgt   *fakeTarget
	c     *Compactor
	step  time.Duration
	steps chan struct{}
}

func start(t *testing.T, p Policy) *runner {
	t.Helper()
	r := &runner{t: t, clk: clock.NewFake(time.Unix(1_700_000_000, 0)), tgt: &fakeTarget{rev: 1}, steps: make(chan struct{})}
	r.c = Start(context.Background(), Config{Policy: p, Target: r.tgt, Clock: r.clk, AfterStep: func() { r.steps <- struct{}{} }})
	t.Cleanup(r.c.Close)
	r.step = newSchedule(p, time.Time{}).step
	return r
}

// advance runs n steps, the revision moving by one write a second.
func (r *runner) advance(n int) {
	r.t.Helper()
	for range n {
		r.clk.Advance(r.step)
		<-r.steps
	}
}

// Periodic with a retention under an hour: the first compaction comes one
// period after the start, to the revision of one period ago; then one per
// period (etcd 3.6 compacts within ~14 s at periodic 10s).
func TestPeriodicCompactsOncePerPeriodToTheRevisionOfOnePeriodAgo(t *testing.T) {
	r := start(t, Policy{Mode: ModePeriodic, Period: 10 * time.Second})
	if r.step != time.Second {
		t.Fatalf("step %s, want a tenth of the period", r.step)
	}
	// One write per second: the revision is 1 + seconds since start.
	for sec := 1; sec <= 35; sec++ {
		r.advance(1)
		r.tgt.set(int64(1 + sec))
		got := r.tgt.got()
		switch {
		case sec < 10 && len(got) != 0:
			t.Fatalf("compacted %v at %ds, before one period", got, sec)
		case sec == 10 && (len(got) != 1 || got[0] != 1):
			// The revision sampled at the start (1), not the current (11).
			t.Fatalf("at 10s compacted %v, want [1]", got)
		}
	}
	// At 20s and 30s: the revisions sampled 11 s before (at 9 s, when it
	// was 9, then at 19 s), as etcd's window of period/step+1 samples.
	if got := r.tgt.got(); len(got) != 3 || got[1] != 9 || got[2] != 19 {
		t.Fatalf("compactions %v, want [1 9 19]", got)
	}
}

// Periodic with a retention of an hour or more compacts every hour (a
// tenth of an hour between samples), each time to the revision of one
// retention ago.
func TestPeriodicOverAnHourCompactsHourly(t *testing.T) {
	r := start(t, Policy{Mode: ModePeriodic, Period: 3 * time.Hour})
	if r.step != 6*time.Minute {
		t.Fatalf("step %s, want 6m", r.step)
	}
	perHour := 10
	for i := 1; i <= 5*perHour; i++ {
		r.advance(1)
		r.tgt.set(int64(1 + i)) // one write per step
	}
	// Due at 3h (rev sampled at 0: 1), 4h (sampled at 1h-6m... ), 5h.
	got := r.tgt.got()
	if len(got) != 3 || got[0] != 1 {
		t.Fatalf("compactions %v in 5h at 3h retention, want 3, the first to revision 1", got)
	}
	for _, rev := range got[1:] {
		if cur := int64(1 + 5*perHour); rev > cur-3*int64(perHour)+1 {
			t.Fatalf("compacted to %d: newer than one retention ago", rev)
		}
	}
}

// Revision mode compacts every 5 minutes to current minus the retention,
// skipping a revision it compacted already or one not positive.
func TestRevisionModeCompactsEveryFiveMinutesKeepingRetention(t *testing.T) {
	r := start(t, Policy{Mode: ModeRevision, Revisions: 100})
	if r.step != 5*time.Minute {
		t.Fatalf("step %s", r.step)
	}
	r.tgt.set(50)
	r.advance(1)
	r.tgt.set(1000)
	r.advance(1)
	r.advance(1) // no new writes: nothing to do
	r.tgt.set(1500)
	r.advance(1)
	if got := r.tgt.got(); len(got) != 2 || got[0] != 900 || got[1] != 1400 {
		t.Fatalf("compactions %v, want [900 1400]", got)
	}
}

// A failed compaction is tried again at the next step; Close stops the
// schedule.
func TestFailedCompactionRetriesAtTheNextStep(t *testing.T) {
	r := start(t, Policy{Mode: ModePeriodic, Period: 10 * time.Second})
	r.tgt.mu.Lock()
	r.tgt.fail = errors.New("etcdserver: not leader")
	r.tgt.mu.Unlock()
	r.tgt.set(5)
	r.advance(10)
	if got := r.tgt.got(); len(got) != 0 {
		t.Fatalf("compacted %v while failing", got)
	}
	r.tgt.mu.Lock()
	r.tgt.fail = nil
	r.tgt.mu.Unlock()
	r.advance(1)
	if got := r.tgt.got(); len(got) != 1 {
		t.Fatalf("compactions %v after the failure ended, want one at once", got)
	}
	r.c.Close()
	if n := r.clk.Pending(); n != 0 {
		t.Fatalf("%d timers armed after Close", n)
	}
}

// A disabled policy starts nothing.
func TestDisabledPolicyStartsNothing(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	c := Start(context.Background(), Config{Policy: Policy{Mode: ModePeriodic}, Target: &fakeTarget{}, Clock: clk})
	if clk.Pending() != 0 {
		t.Fatal("a disabled compactor armed a timer")
	}
	c.Close()
}
