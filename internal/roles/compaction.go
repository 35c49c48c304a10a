package roles

import (
	"context"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/compactor"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// autoCompaction runs the auto-compaction schedule (package compactor)
// while this node is the Active Primary, and only then: a node that stops
// being Active stops compacting, and every new Active term starts a
// schedule of its own. It is told of Primary state changes from the
// Primary's Changed callback, which must not block, so a schedule that
// stops is waited for on a goroutine of its own, which Close waits for.
type autoCompaction struct {
	policy compactor.Policy
	target compactor.Target
	clk    clock.Clock
	log    hclog.Logger
	// afterStep is handed to every schedule (tests).
	afterStep func()

	mu      sync.Mutex
	running *compactor.Compactor
	closed  bool
	wg      sync.WaitGroup
}

// newAutoCompaction returns nil when the policy is off or the engine
// cannot compact (a test's engine).
func newAutoCompaction(policy compactor.Policy, eng Engine, clk clock.Clock, log hclog.Logger) *autoCompaction {
	t, ok := eng.(compactor.Target)
	if !policy.Enabled() || !ok {
		return nil
	}
	return &autoCompaction{policy: policy, target: t, clk: clk, log: log}
}

// primaryState is told every state the Primary role enters.
func (a *autoCompaction) primaryState(s netsyv1.PrimaryState) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s == netsyv1.PrimaryState_ACTIVE {
		if a.running == nil && !a.closed {
			a.running = compactor.Start(context.Background(), compactor.Config{Policy: a.policy, Target: a.target, Clock: a.clk, Logger: a.log, AfterStep: a.afterStep})
		}
		return
	}
	a.stopLocked()
}

func (a *autoCompaction) stopLocked() {
	c := a.running
	if c == nil {
		return
	}
	a.running = nil
	c.Stop()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		c.Close()
	}()
}

// close stops the schedule for good and waits for it.
func (a *autoCompaction) close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.closed = true
	a.stopLocked()
	a.mu.Unlock()
	a.wg.Wait()
}
