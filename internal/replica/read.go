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
				if werr := b.waitRoles(ctx, changed); werr != nil {
					return err
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

// waitApplied waits until this node has applied index, for at most wait.
func (b *Backend) waitApplied(ctx context.Context, index uint64, wait time.Duration) error {
	if b.l.CommittedIndex() >= index {
		return nil
	}
	// A bare timer, not a timeout context: a forwarded write's answer
	// usually comes just before this node applies its commit point, so
	// this runs once per write (BenchmarkWaitAppliedOneStep).
	t := b.cfg.Clock.NewTimer(wait)
	defer t.Stop()
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
