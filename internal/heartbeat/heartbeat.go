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
	// true after a success.
	Health func(healthy bool, err error)
}

// Sender is the heartbeat loop of one node.
type Sender struct {
	cfg    Config
	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	healthy bool
	judged  bool // healthy holds a judgement (none before the first beat)
	seq     uint64
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
	if cfg.Health == nil {
		cfg.Health = func(bool, error) {}
	}
	return &Sender{cfg: cfg, kick: make(chan struct{}, 1)}
}

// Start runs the loop until Close.
func (s *Sender) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ticker := s.cfg.Clock.NewTicker(s.cfg.Interval)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer ticker.Stop()
		for {
			s.beat(ctx)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C():
			case <-s.kick:
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
func (s *Sender) Healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthy
}

// beat sends one heartbeat, and its one immediate retry if it fails.
func (s *Sender) beat(ctx context.Context) {
	var err error
	for attempt := 0; attempt < 2 && ctx.Err() == nil; attempt++ {
		var resp *netsyv1.HeartbeatResponse
		var sentAt time.Time
		resp, sentAt, err = s.send(ctx)
		if err == nil {
			s.cfg.Answered(resp, sentAt)
			s.setHealth(true, nil)
			return
		}
		if errors.Is(err, ErrNoElector) {
			// Nobody to send to is the cluster's state (no Elector yet),
			// not a fault of this node's.
			return
		}
	}
	if ctx.Err() == nil {
		s.setHealth(false, err)
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

func (s *Sender) setHealth(ok bool, err error) {
	s.mu.Lock()
	changed := !s.judged || s.healthy != ok
	s.healthy, s.judged = ok, true
	s.mu.Unlock()
	if !changed {
		return
	}
	if ok {
		s.cfg.Logger.Info("heartbeats reach the Elector; this node is Healthy")
	} else {
		s.cfg.Logger.Warn("heartbeat and its retry failed; this node is Degraded until a heartbeat gets through", "error", err)
	}
	s.cfg.Health(ok, err)
}
