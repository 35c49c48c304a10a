package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Range serves serializable reads locally; linearizable ones after a read
// index (see the package doc).
func (b *Backend) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if !r.Serializable {
		if err := b.linearizable(ctx); err != nil {
			return nil, err
		}
	}
	return b.l.Range(ctx, r)
}

// linearizable returns once this node may answer a linearizable read from
// its own state.
func (b *Backend) linearizable(ctx context.Context) error {
	// Set at a refusal after none or a role change: the PrimaryWait
	// bound on asking again, and how long to wait before the next ask.
	var refused context.Context
	stopRefused := context.CancelFunc(func() {})
	defer func() { stopRefused() }()
	var retry time.Duration
	for {
		// Taken before the roles are read: turning Active after the
		// check below must wake the wait, not be waited past.
		changed := b.cfg.Roles.Changed()
		if b.cfg.Roles.Active() {
			err := b.cfg.Roles.ConfirmLinearizable(ctx)
			if err == nil || !errors.Is(err, engine.ErrNotPrimary) {
				return err
			}
		}
		if b.cfg.Conn == nil {
			return engine.ErrNotPrimary
		}
		ri, err := b.readIdx.get(ctx)
		if err != nil {
			if notEvaluated(err) && ctx.Err() == nil {
				if refused == nil {
					refused, stopRefused = clock.WithTimeout(ctx, b.cfg.Clock, b.cfg.PrimaryWait)
					retry = readRetryMin
				}
				moved, werr := b.waitRefusedRead(refused, changed, retry)
				if werr != nil {
					return err
				}
				if moved {
					// PrimaryWait bounds the wait for each change of
					// roles, as before a refusal was asked again.
					stopRefused()
					refused, stopRefused = nil, func() {}
				} else {
					retry = min(2*retry, readRetryMax)
				}
				continue
			}
			if ctx.Err() == nil && !notEvaluated(err) && unknownOutcome(err) {
				// The Primary went away under the read index, or its
				// answer was lost: etcd's retryable error (a client
				// retries a read on it), never the transport's text.
				return fmt.Errorf("%w (the read index failed: %v)", engine.ErrLeaderChanged, err)
			}
			return err
		}
		return b.waitApplied(ctx, ri.Index, b.cfg.ReadIndexWait)
	}
}

// The wait of a linearizable read between read indexes the Primary
// refused unevaluated: from readRetryMin, doubling to readRetryMax.
const (
	readRetryMin = 10 * time.Millisecond
	readRetryMax = 100 * time.Millisecond
)

// waitRefusedRead waits, after the Primary refused a read index without
// evaluating it, until the roles change (moved) or retry has passed: a Primary
// that is still Starting says so only by refusing, and turns Active with
// no change this node sees (the Cluster State named it already), so a
// read waiting for the roles alone sat until its deadline. Asking again
// is always safe: only a confirmed commit point answers a read.
func (b *Backend) waitRefusedRead(ctx context.Context, changed <-chan struct{}, retry time.Duration) (moved bool, err error) {
	t := b.timers.get(b.cfg.Clock, retry)
	defer b.timers.put(t)
	select {
	case <-changed:
		return true, nil
	case <-t.C():
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// waitApplied waits until this node has applied index, for at most wait.
func (b *Backend) waitApplied(ctx context.Context, index uint64, wait time.Duration) error {
	if b.l.CommittedIndex() >= index {
		return nil
	}
	// A reused timer, not a timeout context nor a new timer: a forwarded
	// write's answer usually comes just before this node applies its
	// commit point, so this runs once per write
	// (BenchmarkWaitAppliedOneStep).
	t := b.timers.get(b.cfg.Clock, wait)
	defer b.timers.put(t)
	for {
		ch := b.l.CommitNotify()
		if b.l.CommittedIndex() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-t.C():
			return b.notApplied(index)
		case <-ctx.Done():
			return b.notApplied(index)
		}
	}
}

// timerPool keeps stopped timers of one Backend's clock for reuse. It is
// per Backend, not process-wide: a timer belongs to the clock (and, in
// tests, the synctest bubble) that made it.
type timerPool struct {
	mu   sync.Mutex
	free []clock.Timer
}

// maxFreeTimers bounds the timers kept: as many as writes wait at once
// in a burst, at most.
const maxFreeTimers = 256

// get returns a timer of clk that fires once after d.
func (p *timerPool) get(clk clock.Clock, d time.Duration) clock.Timer {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		t := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		t.Reset(d)
		return t
	}
	p.mu.Unlock()
	return clk.NewTimer(d)
}

// put stops t and keeps it, with nothing left in its channel: a value
// from this use must not end the next one's wait at once.
func (p *timerPool) put(t clock.Timer) {
	t.Stop()
	select {
	case <-t.C():
	default:
	}
	p.mu.Lock()
	if len(p.free) < maxFreeTimers {
		p.free = append(p.free, t)
	}
	p.mu.Unlock()
}

func (b *Backend) notApplied(index uint64) error {
	return fmt.Errorf("%w: this replica has not applied the Primary's commit point %d (it is at %d)", engine.ErrTimeout, index, b.l.CommittedIndex())
}

// fetchReadIndex asks the Primary for its confirmed commit point.
func (b *Backend) fetchReadIndex(ctx context.Context) (*netsyv1.ReadIndexResponse, error) {
	conn, err := b.primaryConn(ctx, "")
	if err != nil {
		return nil, err
	}
	if conn == nil {
		// This node became the Primary meanwhile.
		return nil, engine.ErrNotPrimary
	}
	return netsyv1.NewNodeClient(conn).ReadIndex(ctx, &netsyv1.ReadIndexRequest{})
}

// batcher shares one call among concurrent callers: a caller gets the
// result of a call that started after it arrived.
type batcher[T any] struct {
	do      func(context.Context) (T, error)
	clk     clock.Clock
	mu      sync.Mutex
	waiting []chan result[T]
	running bool
}

type result[T any] struct {
	v   T
	err error
}

func (bt *batcher[T]) get(ctx context.Context) (T, error) {
	ch := make(chan result[T], 1)
	bt.mu.Lock()
	bt.waiting = append(bt.waiting, ch)
	if !bt.running {
		bt.running = true
		go bt.run(context.WithoutCancel(ctx))
	}
	bt.mu.Unlock()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// run serves batches until none waits; each call is bounded by its own
// timeout, so it always ends.
func (bt *batcher[T]) run(base context.Context) {
	for {
		bt.mu.Lock()
		batch := bt.waiting
		bt.waiting = nil
		if len(batch) == 0 {
			bt.running = false
			bt.mu.Unlock()
			return
		}
		bt.mu.Unlock()
		ctx, cancel := clock.WithTimeout(base, bt.clk, 5*time.Second)
		v, err := bt.do(ctx)
		cancel()
		for _, ch := range batch {
			ch <- result[T]{v, err}
		}
	}
}
