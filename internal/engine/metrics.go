package engine

import (
	"context"
	"errors"
)

// The numbers below back etcd's metric names (etcd_server_proposals_*,
// etcd_debugging_mvcc_keys_total); internal/node exports them. Each is a
// load of an atomic or a counter bumped only on a failure, so the write
// path pays nothing for them.

// KnownCommitted is the newest log index this node knows is committed: the
// Primary's own commit index, or on a follower the newest one the Primary
// sent it, which may run ahead of what is applied here (CommittedIndex).
func (e *Engine) KnownCommitted() uint64 {
	return max(e.committedIdx.Load(), e.primaryCommit.Load())
}

// Pending is the number of entries in the local log that are not applied
// yet: on the Primary, appended but not yet durable (so not committed); on
// a follower, received but not yet both committed and durable here.
func (e *Engine) Pending() uint64 {
	appended, applied := e.appendedIdx.Load(), e.committedIdx.Load()
	if appended <= applied {
		return 0
	}
	return appended - applied
}

// WritesFailed counts writes (anything that logs an entry) that the write
// loop was handed and that then failed for a reason other than the
// request itself: timed out, cancelled by the client while waiting,
// refused because the writer was stepping down or stopping, or lost to a
// storage failure or a deposition. A write refused for its content (a
// missing key or lease, a compacted revision) is an answer, not a
// failure, as etcd does not count those as failed proposals either.
func (e *Engine) WritesFailed() uint64 { return e.writesFailed.Load() }

// Keys is the number of keys live in the store: a write counts from when
// the loop evaluated it, a moment before it is durable and visible.
func (e *Engine) Keys() int64 { return e.store.Stats().Keys }

// writeFailure tells a write that failed from one that was answered with
// an error about its content.
func writeFailure(err error) bool {
	for _, f := range []error{ErrTimeout, ErrStopped, ErrUnavailable, ErrDeposed, ErrNotPrimary, ErrLeaderChanged,
		context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, f) {
			return true
		}
	}
	return false
}
