package compactor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/mvcc"
)

// Modes of --auto-compaction-mode.
const (
	ModePeriodic = "periodic"
	ModeRevision = "revision"
)

// RevisionInterval is how often revision mode compacts, as etcd's.
const RevisionInterval = 5 * time.Minute

// Policy is a parsed --auto-compaction-mode/--auto-compaction-retention.
// The zero Policy compacts nothing.
type Policy struct {
	Mode string
	// Period is the retention of periodic mode.
	Period time.Duration
	// Revisions is the retention of revision mode.
	Revisions int64
}

// Enabled reports whether the policy compacts anything.
func (p Policy) Enabled() bool { return p.Period > 0 || p.Revisions > 0 }

func (p Policy) String() string {
	switch {
	case !p.Enabled():
		return "off"
	case p.Mode == ModeRevision:
		return fmt.Sprintf("revision, keeping %d revisions", p.Revisions)
	default:
		return fmt.Sprintf("periodic, keeping %s", p.Period)
	}
}

// Parse reads etcd's flags: retention is a duration (periodic mode only)
// or a bare number, hours in periodic mode and revisions in revision
// mode; "0" (or empty) disables auto-compaction.
func Parse(mode, retention string) (Policy, error) {
	if mode != ModePeriodic && mode != ModeRevision {
		return Policy{}, fmt.Errorf("--auto-compaction-mode: %q is not periodic or revision", mode)
	}
	p := Policy{Mode: mode}
	if retention == "" {
		return p, nil
	}
	if n, err := strconv.ParseInt(retention, 10, 64); err == nil {
		if n < 0 {
			return Policy{}, fmt.Errorf("--auto-compaction-retention: %d is negative", n)
		}
		if mode == ModeRevision {
			p.Revisions = n
		} else {
			if n > int64(1<<63-1)/int64(time.Hour) {
				return Policy{}, fmt.Errorf("--auto-compaction-retention: %d hours is too long", n)
			}
			p.Period = time.Duration(n) * time.Hour
		}
		return p, nil
	}
	d, err := time.ParseDuration(retention)
	if err != nil {
		return Policy{}, fmt.Errorf("--auto-compaction-retention: %q is neither a duration (10s, 1h) nor a number (hours in periodic mode, revisions in revision mode)", retention)
	}
	if mode == ModeRevision {
		return Policy{}, fmt.Errorf("--auto-compaction-retention: %q is a duration, but revision mode keeps a number of revisions", retention)
	}
	if d < 0 {
		return Policy{}, fmt.Errorf("--auto-compaction-retention: %s is negative", d)
	}
	if d > 0 && d < 10*time.Millisecond {
		return Policy{}, fmt.Errorf("--auto-compaction-retention: %s is shorter than 10ms", d)
	}
	p.Period = d
	return p, nil
}

// Target is what a Compactor compacts: the Active Primary's engine.
type Target interface {
	// CurrentRevision is the committed revision.
	CurrentRevision() int64
	// CompactRevision is the compaction floor.
	CompactRevision() int64
	Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error)
}

// Config configures a Compactor.
type Config struct {
	Policy Policy
	Target Target
	Clock  clock.Clock
	Logger hclog.Logger
	// AfterStep, if set, is called after every step (tests).
	AfterStep func()
}

// Compactor runs one schedule until Close.
type Compactor struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start starts the schedule of cfg.Policy against cfg.Target; a disabled
// policy starts nothing. The schedule stops when ctx ends or on Close.
func Start(ctx context.Context, cfg Config) *Compactor {
	c := &Compactor{}
	if !cfg.Policy.Enabled() || cfg.Target == nil {
		return c
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	ctx, c.cancel = context.WithCancel(ctx)
	s := newSchedule(cfg.Policy, cfg.Clock.Now())
	// Armed before Start returns, so a fake-clock test may advance at once.
	ticker := cfg.Clock.NewTicker(s.step)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer ticker.Stop()
		run(ctx, cfg, s, ticker)
	}()
	return c
}

// Stop stops the schedule without waiting: a compaction in flight is
// cancelled, and no other starts.
func (c *Compactor) Stop() {
	if c.cancel != nil {
		c.cancel()
	}
}

// Close stops the schedule and waits for its goroutine.
func (c *Compactor) Close() {
	c.Stop()
	c.wg.Wait()
}

func run(ctx context.Context, cfg Config, s *schedule, ticker clock.Ticker) {
	log := cfg.Logger.Named("compactor")
	log.Info("auto-compaction started", "policy", cfg.Policy.String())
	s.sample(cfg.Target.CurrentRevision())
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		now := cfg.Clock.Now()
		if rev, ok := s.due(now, cfg.Target.CurrentRevision()); ok {
			err := compact(ctx, cfg.Target, rev)
			switch {
			case err == nil:
				log.Info("auto-compaction done", "rev", rev, "policy", cfg.Policy.String())
				s.done(cfg.Clock.Now(), rev)
			case ctx.Err() != nil:
				return
			default:
				log.Warn("auto-compaction failed; trying again at the next step", "rev", rev, "retry_in", s.step, "error", err)
			}
		}
		if cfg.AfterStep != nil {
			cfg.AfterStep()
		}
	}
}

// compact compacts the target to rev; a floor already at or past rev is
// success, and logs nothing.
func compact(ctx context.Context, t Target, rev int64) error {
	if rev <= t.CompactRevision() {
		return nil
	}
	_, err := t.Compact(ctx, &pb.CompactionRequest{Revision: rev})
	if errors.Is(err, mvcc.ErrCompacted) {
		return nil
	}
	return err
}

// schedule is the clock-free core: it is told the time and the revision
// at every step and says when to compact, and to what.
type schedule struct {
	policy Policy
	// step is the ticker's period.
	step time.Duration
	// Periodic mode: revs are the revisions sampled at the last keep+1
	// steps, oldest first; wait is how long after lastDone the next
	// compaction is due (the period first, then min(period, 1h)).
	revs     []int64
	keep     int
	wait     time.Duration
	every    time.Duration
	lastDone time.Time
	// Revision mode: the last revision compacted to.
	prev int64
}

func newSchedule(p Policy, now time.Time) *schedule {
	s := &schedule{policy: p, lastDone: now}
	if p.Mode == ModeRevision {
		s.step = RevisionInterval
		return s
	}
	s.every = min(p.Period, time.Hour)
	s.step = s.every / 10
	s.keep = int(p.Period / s.step)
	s.wait = p.Period
	return s
}

// sample records the revision at a step (periodic mode).
func (s *schedule) sample(rev int64) {
	if s.policy.Mode == ModeRevision {
		return
	}
	s.revs = append(s.revs, rev)
	if len(s.revs) > s.keep+1 {
		s.revs = s.revs[1:]
	}
}

// due is called at every step with the time and the current revision; it
// returns the revision to compact to, if a compaction is due.
func (s *schedule) due(now time.Time, cur int64) (int64, bool) {
	if s.policy.Mode == ModeRevision {
		rev := cur - s.policy.Revisions
		if rev <= 0 || rev == s.prev {
			return 0, false
		}
		return rev, true
	}
	// The oldest sample is the revision of one period ago; it is taken
	// before this step's sample joins the window.
	rev := s.revs[0]
	dueNow := now.Sub(s.lastDone) >= s.wait
	s.sample(cur)
	if !dueNow {
		return 0, false
	}
	return rev, true
}

// done records a compaction to rev at now.
func (s *schedule) done(now time.Time, rev int64) {
	s.prev = rev
	s.lastDone = now
	s.wait = s.every
}
