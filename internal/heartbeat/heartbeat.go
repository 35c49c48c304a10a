package heartbeat

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// DefaultInterval is the heartbeat cadence.
const DefaultInterval = 500 * time.Millisecond

// MissedBeats is how many consecutive heartbeats a receiver (the Elector,
// the Primary) may miss from a node before it marks that node Degraded.
const MissedBeats = 2

// DegradeWindow is how long a receiver goes without hearing from a node
// before it marks the node Degraded: MissedBeats intervals (1 s at the
// default interval).
func DegradeWindow(interval time.Duration) time.Duration {
	return MissedBeats * interval
}

// ErrNoElector is what a send reports while no Elector is known.
var ErrNoElector = errors.New("heartbeat: no Elector known")

// Config configures a Sender.
type Config struct {
	Interval time.Duration
	Clock    clock.Clock
	Logger   hclog.Logger
	// State returns this node's state to send; the sender fills Seq.
	State func() *netsyv1.Heartbeat
	// Send delivers one heartbeat to the current Elector, or fails
	// (ErrNoElector when none is known). It is bounded by ctx.
	Send func(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error)
	// Answered receives every answer with the time its heartbeat was
	// sent, by this node's clock.
	Answered func(resp *netsyv1.HeartbeatResponse, sentAt time.Time)
	// Health is told this node's own health after the first beat and
	// whenever it changes: false after a send and its retry both failed,
	// true after a success. Ignored when Judge is set (the Judge's own
	// Health is told).
	Health func(healthy bool, err error)
	// Judge is this node's one health decision, which the follower's
	// receipts report to as well; nil: the Sender makes one of its own
	// from Health.
	Judge *Judge
	// Fast, when set and true, doubles the cadence: a beat every half
	// interval. The Primary's lease is renewed by the Elector's answers,
	// and beating twice per interval while Active lets it lapse only
	// after three unanswered beats in a row (see roles.LeaseWindow).
	Fast func() bool
}

// Sender is the heartbeat loop of one node.
type Sender struct {
	cfg    Config
	judge  *Judge
	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex
	seq uint64
}

// New returns a Sender; Start runs it.
func New(cfg Config) *Sender {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Answered == nil {
		cfg.Answered = func(*netsyv1.HeartbeatResponse, time.Time) {}
	}
	judge := cfg.Judge
	if judge == nil {
		judge = NewJudge(cfg.Logger, cfg.Health)
	}
	return &Sender{cfg: cfg, judge: judge, kick: make(chan struct{}, 1)}
}

// Start runs the loop until Close.
func (s *Sender) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	// Every interval a beat; while Fast says so, every half interval
	// instead (the half ticker keeps the cadence then, and the interval
	// ticker's tick, due with one of its own, is left to it).
	ticker := s.cfg.Clock.NewTicker(s.cfg.Interval)
	half := s.cfg.Clock.NewTicker(s.cfg.Interval / 2)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer ticker.Stop()
		defer half.Stop()
		for {
			s.beat(ctx)
		wait:
			for {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C():
					if s.cfg.Fast == nil || !s.cfg.Fast() {
						break wait
					}
				case <-s.kick:
					break wait
				case <-half.C():
					if s.cfg.Fast != nil && s.cfg.Fast() {
						break wait
					}
				}
			}
		}
	}()
}

// Now asks for a heartbeat at once (a new Elector, a role change) instead
// of at the next tick.
func (s *Sender) Now() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Close stops the loop.
func (s *Sender) Close() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}

// Healthy reports this node's own judgement of its health.
func (s *Sender) Healthy() bool { return s.judge.Healthy() }

// beat sends one heartbeat, and its one immediate retry if it fails.
func (s *Sender) beat(ctx context.Context) {
	var err error
	for attempt := 0; attempt < 2 && ctx.Err() == nil; attempt++ {
		var resp *netsyv1.HeartbeatResponse
		var sentAt time.Time
		resp, sentAt, err = s.send(ctx)
		if err == nil {
			s.cfg.Answered(resp, sentAt)
			s.judge.Sent("heartbeat", nil)
			return
		}
		if errors.Is(err, ErrNoElector) {
			// Nobody to send to is the cluster's state (no Elector yet),
			// not a fault of this node's.
			return
		}
	}
	if ctx.Err() == nil {
		s.judge.Sent("heartbeat", err)
	}
}

func (s *Sender) send(ctx context.Context) (*netsyv1.HeartbeatResponse, time.Time, error) {
	hb := s.cfg.State()
	s.mu.Lock()
	s.seq++
	hb.Seq = s.seq
	s.mu.Unlock()
	sentAt := s.cfg.Clock.Now()
	// A send may take no longer than the cadence: a late answer is no use
	// to the lease, and the next beat is due.
	cctx, cancel := clock.WithTimeout(ctx, s.cfg.Clock, s.cfg.Interval)
	defer cancel()
	resp, err := s.cfg.Send(cctx, hb)
	return resp, sentAt, err
}

// Judge is this node's one decision about its own health, from how its
// sends go: Heartbeats to the Elector (the Sender) and Receipts, with the
// heartbeat they embed, to the Primary (the replica's Follower). Each
// reports a send with its one immediate retry: a failure of both makes
// the node Degraded, and any send that gets through afterwards, of
// either kind, makes it Healthy again, with no restart. A success of the
// other kind clears a failure on purpose: when the Primary dies, every
// replica's receipts fail while its heartbeats reach the Elector, and a
// replica that stayed Degraded until its next receipt could never be
// elected to give it a next Primary. It is safe for concurrent use.
type Judge struct {
	log    hclog.Logger
	health func(healthy bool, err error)

	// order holds reports one at a time, so health hears the changes in
	// the order they were judged.
	order   sync.Mutex
	mu      sync.Mutex
	healthy bool
	judged  bool // healthy holds a judgement (none before the first report)
}

// NewJudge returns a Judge that tells health (nil: nobody) its first
// judgement and every change.
func NewJudge(logger hclog.Logger, health func(healthy bool, err error)) *Judge {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if health == nil {
		health = func(bool, error) {}
	}
	return &Judge{log: logger, health: health}
}

// Sent reports one send and its immediate retry: what names it
// ("heartbeat", "receipt"); err is nil when it got through, else the
// retry's error (both failed).
func (j *Judge) Sent(what string, err error) {
	ok := err == nil
	j.order.Lock()
	defer j.order.Unlock()
	j.mu.Lock()
	changed := !j.judged || j.healthy != ok
	j.healthy, j.judged = ok, true
	j.mu.Unlock()
	if !changed {
		return
	}
	if ok {
		j.log.Info(what + "s get through; this node is Healthy")
	} else {
		j.log.Warn(what+" and its retry failed; this node is Degraded until a send gets through", "error", err)
	}
	j.health(ok, err)
}

// Healthy reports the judgement: false only after a send and its retry
// both failed and nothing got through since.
func (j *Judge) Healthy() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.healthy
}
