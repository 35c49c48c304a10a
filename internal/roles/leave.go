package roles

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/peer"
)

// leaver is what leaving does, step by step (the Roles, or a test's
// recorder).
type leaver interface {
	failed() error
	primaryActive() bool
	// others reports whether another node could take the Primary role.
	others() bool
	handoff(ctx context.Context) error
	drain(ctx context.Context) error
	// degrade makes the node Degraded for good and tells the Elector.
	degrade(ctx context.Context)
	stopHeartbeats()
	deregister(ctx context.Context) error
	// pause waits a heartbeat interval before the deregistration is
	// tried again; it fails once ctx ends.
	pause(ctx context.Context) error
	deleteRegistration(ctx context.Context) error
	resign(ctx context.Context) error
}

// leave takes a node out of the cluster in the seed's order (Node
// Deregistration): a Primary hands its role to another node or, alone,
// drains to object storage; the node turns Degraded, in every heartbeat
// and receipt from then on, so no quorum counts on it; it deregisters
// with the Elector (its member id stays), which deletes nodes/{id}.json;
// last it resigns the Elector lock if it holds it, so another node takes
// over at once.
//
// The Elector lets a node go only once object storage holds every entry
// the node may have acknowledged (it refuses with NOT_DURABLE until
// then), so the node asks again every heartbeat interval while ctx lasts.
// It deletes its registration file itself only after an Elector let it go
// or answered that it does not know the node (the file is gone then, or
// the delete is a no-op): the file is what a later Elector builds its
// count from, and a node missing from it leaves the count with no check
// at all. So after a refusal that outlasts ctx, and after any other
// failure too (no Elector answers: the node cannot tell whether the
// bucket holds what it acknowledged), the file stays and the node stays
// registered and counted until the Elector deregisters it itself once
// the bucket caught up (automatic deregistration of a silent Degraded
// node), or an operator forces it out.
func leave(ctx context.Context, log hclog.Logger, l leaver) {
	if err := l.failed(); err != nil {
		// Nothing can be flushed or handed over from a failed log; the
		// Elector notices the silence.
		log.Warn("not leaving the cluster gracefully: the log failed", "error", err)
		return
	}
	if l.primaryActive() {
		handedOff := false
		if l.others() {
			if err := l.handoff(ctx); err != nil {
				log.Warn("handoff on shutdown failed; draining instead", "error", err)
			} else {
				handedOff = true
			}
		}
		if !handedOff {
			if err := l.drain(ctx); err != nil {
				log.Warn("drain on shutdown", "error", err)
			}
		}
	}
	l.degrade(ctx)
	// Heartbeats would register the node again.
	l.stopHeartbeats()
	if deregister(ctx, log, l) {
		if err := l.deleteRegistration(ctx); err != nil {
			log.Warn("delete the registration file", "error", err)
		}
	}
	if err := l.resign(ctx); err != nil {
		log.Warn("resign the Elector lock", "error", err)
	}
}

// deregister asks the Elector to let this node go until it does (true),
// retrying a durability refusal while ctx lasts; false leaves the node
// registered (see leave). An unregistered node asks too: the Elector may
// count it from its registration file all the same.
func deregister(ctx context.Context, log hclog.Logger, l leaver) bool {
	for {
		err := l.deregister(ctx)
		switch peer.ReasonOf(err) {
		case "":
			if err == nil {
				return true
			}
		case peer.ReasonUnknownNode:
			// Not in the Elector's map, and no file it could load (it
			// deletes one it cannot): nothing counts this node.
			return true
		case peer.ReasonNotDurable:
			if perr := l.pause(ctx); perr == nil {
				continue
			}
			log.Warn("left without being deregistered: object storage does not hold every entry this node may have acknowledged yet; "+
				"it stays registered and counted (nodes/ keeps its file) until the bucket catches up and the Elector deregisters it, "+
				"or an operator forces it out (netsyctl deregister --force)", "error", err)
			return false
		}
		log.Warn("left without being deregistered: the Elector did not let this node go; it stays registered and counted "+
			"(nodes/ keeps its file) until the Elector deregisters it once the bucket holds what it may have acknowledged, "+
			"or an operator forces it out (netsyctl deregister --force)", "error", err)
		return false
	}
}

// Leave takes this node out of the cluster gracefully (see leave), within
// ctx. The roles keep running for Close: the follower still streams
// receipts, all of them Degraded.
func (r *Roles) Leave(ctx context.Context) { leave(ctx, r.log, roleLeaver{r}) }

// roleLeaver is leave's steps on the real roles.
type roleLeaver struct{ r *Roles }

var _ leaver = roleLeaver{}

func (l roleLeaver) failed() error                   { return l.r.eng.Failed() }
func (l roleLeaver) primaryActive() bool             { return l.r.prim.Active() }
func (l roleLeaver) others() bool                    { return len(l.r.Members()) > 1 }
func (l roleLeaver) stopHeartbeats()                 { l.r.hb.Close() }
func (l roleLeaver) drain(ctx context.Context) error { return l.r.prim.Drain(ctx) }

func (l roleLeaver) handoff(ctx context.Context) error {
	// The handoff gets a bound of its own, not what is left of the
	// leave's: the Elector answers only once a successor is pushed, and
	// when none can be elected (the others stopped, still counted) it
	// would wait out the whole leave. The Elector has drained this node
	// by then; the leave goes on to drain (a no-op) and deregister.
	hctx, cancel := clock.WithTimeout(ctx, l.r.clk, handoffOnLeave(l.r.cfg.Node.HeartbeatInterval))
	defer cancel()
	_, err := l.r.Handoff(hctx, "")
	return err
}

// handoffOnLeave bounds a leaving Primary's handoff: a handoff to a live
// node takes well under a heartbeat interval (about 90 ms measured).
func handoffOnLeave(heartbeat time.Duration) time.Duration {
	return max(2*time.Second, 4*heartbeat)
}

func (l roleLeaver) degrade(ctx context.Context) {
	r := l.r
	r.do(func(c *core, _ **elector.Elector) effects { return c.leave() })
	// Tell the Elector now, not at the next beat: it must not count this
	// node once it is gone from its map.
	bctx, cancel := clock.WithTimeout(ctx, r.clk, r.cfg.Node.HeartbeatInterval)
	defer cancel()
	sentAt := r.clk.Now()
	if resp, err := r.sendHeartbeat(bctx, r.state()); err == nil {
		r.answered(resp, sentAt)
	}
}

func (l roleLeaver) deregister(ctx context.Context) error {
	el, err := l.r.electorAPI()
	if err != nil {
		return err
	}
	return el.Deregister(ctx, l.r.self.NodeId)
}

func (l roleLeaver) pause(ctx context.Context) error {
	return l.r.clk.Sleep(ctx, l.r.cfg.Node.HeartbeatInterval)
}

func (l roleLeaver) deleteRegistration(ctx context.Context) error {
	return discovery.Deregister(ctx, l.r.store, l.r.self.NodeId)
}

func (l roleLeaver) resign(ctx context.Context) error {
	// Resigning gets its own bound, not what is left of the leave's: a
	// deregistration retried until the leave's time ran out must not cost
	// the cluster a whole lock lease before another node takes over.
	rctx, cancel := clock.WithTimeout(context.WithoutCancel(ctx), l.r.clk, 2*time.Second)
	defer cancel()
	return l.r.lock.Resign(rctx)
}
