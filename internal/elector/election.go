package elector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// electSnapshot is what an election round starts from, copied in the loop.
type electSnapshot struct {
	prev     *netsyv1.NodeInfo
	prevTerm uint64
	// answeredPrev is when an answer last named prev Primary (or this
	// Elector took over): its lease is out a lease wait after it. No
	// answer names it while the round runs, so it holds for the round.
	answeredPrev time.Time
	// heardPrev is when the Elector last heard from prev; prevDraining
	// says it was last seen Draining (or drained in a handoff), the one
	// case the handshake timeout is for.
	heardPrev    time.Time
	prevDraining bool
	nodes        []*netsyv1.NodeInfo
	last         map[string]*netsyv1.Heartbeat
	degraded     map[string]bool
	registered   int
	handoff      *handoffReq
	// maxTerm is the highest primary term handed out; started is when
	// this Elector took over.
	maxTerm uint64
	started time.Time
}

// electResult is what a round found.
type electResult struct {
	err      error
	winner   *netsyv1.NodeInfo
	term     uint64
	adopt    bool
	deferred bool // the previous Primary answered that it is still Primary
	drained  bool // a handoff's Drain completed
	// waitUntil is set when the round found that the previous Primary may
	// still hold its lease: the next round starts at that instant.
	waitUntil time.Time
	took      time.Duration
}

var errWaitPrevious = errors.New("the previous Primary may still hold its lease")

func (e *Elector) startElection(ctx context.Context, done chan<- electResult) {
	e.electing = true
	s := electSnapshot{
		answeredPrev: e.answeredPrimary,
		heardPrev:    e.heardPrimary,
		last:         make(map[string]*netsyv1.Heartbeat, len(e.nodes)),
		degraded:     make(map[string]bool, len(e.nodes)),
		registered:   len(e.nodes),
		handoff:      e.handoff,
		maxTerm:      e.maxTerm,
		started:      e.started,
	}
	if e.primary != nil {
		s.prev, s.prevTerm = e.primary, e.primaryTerm
		if r := e.nodes[e.primary.NodeId]; r != nil && r.last.GetPrimaryState() == netsyv1.PrimaryState_DRAINING {
			s.prevDraining = true
		}
		s.prevDraining = s.prevDraining || e.handoff != nil
	}
	for id, r := range e.nodes {
		s.nodes = append(s.nodes, r.info)
		s.last[id] = r.last
		s.degraded[id] = r.health == netsyv1.HealthState_DEGRADED
	}
	e.goOwned(func() {
		start := e.cfg.Clock.Now()
		r := e.elect(ctx, s)
		r.took = e.cfg.Clock.Since(start)
		done <- r
	})
}

// elect runs one round of the election (see the package doc, rule 4).
func (e *Elector) elect(ctx context.Context, s electSnapshot) electResult {
	var prevState *netsyv1.Heartbeat
	exclude := map[string]bool{}
	prefer := ""
	if h := s.handoff; h != nil {
		if !h.drained {
			cctx, cancel := clock.WithTimeout(ctx, e.cfg.Clock, 30*time.Second)
			err := e.cfg.Peers.Drain(cctx, h.from)
			cancel()
			if err != nil {
				return electResult{err: fmt.Errorf("drain %s: %w", h.from.NodeId, err)}
			}
			return electResult{drained: true}
		}
		exclude[h.from.NodeId] = true
		prefer = h.to
	}
	if p := s.prev; p != nil {
		cctx, cancel := clock.WithTimeout(ctx, e.cfg.Clock, e.cfg.HeartbeatInterval)
		st, err := e.cfg.Peers.GetNodeState(cctx, p)
		cancel()
		switch {
		case err == nil:
			switch ps := st.GetState().GetPrimaryState(); ps {
			case netsyv1.PrimaryState_ACTIVE, netsyv1.PrimaryState_STARTING, netsyv1.PrimaryState_DRAINING:
				if st.GetState().GetPrimaryTerm() < s.maxTerm {
					// Superseded while cut off: stale (see decide).
					prevState = st.GetState()
					break
				}
				if s.handoff == nil {
					return electResult{deferred: true, err: fmt.Errorf("the previous Primary %s says it is %s", p.NodeId, ps)}
				}
				return electResult{err: fmt.Errorf("the previous Primary %s is still %s after draining", p.NodeId, ps)}
			default:
				prevState = st.GetState()
			}
		default:
			// Unreachable, however the call failed: a refused
			// connection is no proof that the process is gone (a REJECT
			// rule or a restarted listener refuses too). Its lease runs
			// out a lease wait after the last answer that named it.
			due := s.answeredPrev.Add(e.cfg.leaseWait())
			if s.prevDraining {
				// It may still be finishing its flush: give it the
				// handshake timeout since it was last heard from.
				due = later(due, s.heardPrev.Add(max(e.cfg.HandshakeTimeout, e.cfg.leaseWait())))
			}
			if now := e.cfg.Clock.Now(); now.Before(due) {
				return electResult{waitUntil: due, err: fmt.Errorf("%w: it did not answer (%v); its lease may hold for %s more", errWaitPrevious, err, due.Sub(now))}
			}
		}
	}
	if s.maxTerm > 0 && (s.prev == nil || s.prevTerm < s.maxTerm) {
		// Whoever took up the highest term handed out is unknown to this
		// Elector; a previous Elector may have renewed its lease until
		// shortly before this one took over. Unless that Primary answers
		// now that it gave the term up (rule 5).
		due := s.started.Add(e.cfg.leaseWait())
		if now := e.cfg.Clock.Now(); now.Before(due) {
			holder := e.gaveUpTerm(ctx, s)
			if holder == "" {
				return electResult{waitUntil: due, err: fmt.Errorf("%w: the Primary of term %d is not known to this Elector, whose wait ends in %s",
					errWaitPrevious, s.maxTerm, due.Sub(now))}
			}
			e.log.Info("the Primary of the highest term handed out answers that it is a Replica; its lease is not waited out",
				"node", holder, "primary_term", s.maxTerm, "wait_skipped", due.Sub(now))
		}
	}

	var cands []candidate
	contacted := 0
	if e.cfg.Quorum == 0 {
		for _, n := range s.nodes {
			if s.prev != nil && n.NodeId == s.prev.NodeId {
				continue
			}
			cands = append(cands, candidate{id: n.NodeId, state: s.last[n.NodeId], degraded: s.degraded[n.NodeId]})
		}
	} else {
		var ask []*netsyv1.NodeInfo
		for _, n := range s.nodes {
			if s.prev == nil || n.NodeId != s.prev.NodeId {
				ask = append(ask, n)
			}
		}
		for _, a := range e.askStates(ctx, ask, 2*e.cfg.HeartbeatInterval) {
			if a.hb != nil {
				contacted++
			}
			cands = append(cands, candidate{id: a.id, state: a.hb, degraded: s.degraded[a.id]})
		}
	}
	prevRegistered := false
	if s.prev != nil {
		_, prevRegistered = s.last[s.prev.NodeId]
	}
	if prevState != nil && !prevRegistered {
		// Deregistered while it did not answer (forced out), yet still
		// the previous Primary: its answer let the round go on, but it
		// is no candidate and no witness any more.
		prevState = nil
	}
	if prevState != nil {
		cands = append(cands, candidate{id: s.prev.NodeId, state: prevState})
	}
	winnerID, adopt, err := decide(cands, plan{quorum: e.cfg.Quorum, registered: s.registered, exclude: exclude, prefer: prefer, maxTerm: s.maxTerm,
		prevRegistered: prevRegistered}, contacted, prevState != nil)
	if err != nil {
		return electResult{err: err}
	}
	var winner *netsyv1.NodeInfo
	for _, n := range s.nodes {
		if n.NodeId == winnerID {
			winner = n
		}
	}
	if adopt {
		term := uint64(0)
		for _, c := range cands {
			if c.id == winnerID && c.state != nil {
				term = c.state.PrimaryTerm
			}
		}
		return electResult{winner: winner, term: term, adopt: true}
	}
	term, err := e.members.NextPrimaryTerm(ctx)
	if err != nil {
		return electResult{err: fmt.Errorf("raise the primary term in members.json: %w", err)}
	}
	return electResult{winner: winner, term: term}
}

// gaveUpTerm asks the nodes that may have taken up s.maxTerm (their last
// report says so, or this Elector has none) for their state now, and
// returns the one that answers, as itself, that its data directory records
// it took up s.maxTerm and that it is a Replica: the Primary of that term
// stepped down, or its process is gone and this is a later one (which
// never takes up a term again), so no lease of that term holds any more
// (rule 5). An answer is needed now: a remembered report proves nothing
// about what the node did since. "" if none answers so.
func (e *Elector) gaveUpTerm(ctx context.Context, s electSnapshot) string {
	var ask []*netsyv1.NodeInfo
	for _, n := range s.nodes {
		if last := s.last[n.NodeId]; last == nil || last.GetTookPrimaryTerm() == s.maxTerm {
			ask = append(ask, n)
		}
	}
	// Terms are handed out to one node each: at most one can answer so.
	for _, a := range e.askStates(ctx, ask, e.cfg.HeartbeatInterval) {
		if a.hb.GetNodeId() == a.id && a.hb.GetTookPrimaryTerm() == s.maxTerm &&
			a.hb.GetPrimaryState() == netsyv1.PrimaryState_REPLICA {
			return a.id
		}
	}
	return ""
}

// nodeAnswer is one node's answer to askStates: hb is nil when it did not
// answer in time.
type nodeAnswer struct {
	id string
	hb *netsyv1.Heartbeat
}

// askStates asks every node in nodes for its state at once, each call
// bounded by timeout, and returns their answers in the order of nodes.
func (e *Elector) askStates(ctx context.Context, nodes []*netsyv1.NodeInfo, timeout time.Duration) []nodeAnswer {
	answers := make([]nodeAnswer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		answers[i].id = n.NodeId
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := clock.WithTimeout(ctx, e.cfg.Clock, timeout)
			defer cancel()
			if st, err := e.cfg.Peers.GetNodeState(cctx, n); err == nil {
				answers[i].hb = st.GetState()
			}
		}()
	}
	wg.Wait()
	return answers
}

// electFinished applies a round's result in the loop.
func (e *Elector) electFinished(ctx context.Context, r electResult) {
	now := e.cfg.Clock.Now()
	e.waitingLease = false
	switch {
	case r.drained:
		if e.handoff != nil {
			e.handoff.drained = true
			e.emit("primary_drained", e.handoff.from.NodeId, "handoff")
			e.version++
		}
		e.nextTry = time.Time{}
	case !r.waitUntil.IsZero():
		// Not a failed round: the successor may not be elected before
		// the previous Primary's lease has run out. The state stays as
		// it is (it still names the previous Primary) and the next round
		// starts at that instant.
		e.log.Info("election waits for the previous Primary's lease", "reason", r.err, "until", r.waitUntil)
		e.nextTry = r.waitUntil
		e.waitingLease = true
	case r.deferred:
		// It answered: it is alive and says it is still the Primary.
		// Nothing changes and nothing is pushed.
		e.heardPrimary = now
		e.log.Info("election deferred", "reason", r.err)
		e.nextTry = now.Add(e.cfg.RetryInterval)
	case r.err != nil:
		if e.handoff != nil && !e.handoff.drained {
			e.log.Warn("handoff failed", "error", r.err)
			e.failHandoff(r.err)
		} else {
			e.log.Info("no Primary elected this round; retrying", "error", r.err, "retry_in", e.cfg.RetryInterval)
		}
		e.nextTry = now.Add(e.cfg.RetryInterval)
	default:
		if _, ok := e.nodes[r.winner.NodeId]; !ok {
			e.nextTry = now
			return // deregistered meanwhile
		}
		how := "elected"
		if r.adopt {
			how = "adopted"
		}
		rec := e.nodes[r.winner.NodeId]
		if rec.health != netsyv1.HealthState_HEALTHY {
			// The round just heard from it, Healthy: a heartbeat older
			// than that must not undo the election.
			rec.health, rec.lastAt = netsyv1.HealthState_HEALTHY, now
		}
		e.setPrimary(rec.info, r.term, how)
		e.maxTerm = max(e.maxTerm, r.term)
		e.nextTry = now.Add(e.cfg.RetryInterval)
		e.log.Info("election finished", "primary", r.winner.NodeId, "primary_term", r.term, "took", r.took)
		if e.handoff != nil {
			h := e.handoff
			e.handoff = nil
			h.done <- nil
		}
		e.pushAll(ctx)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// gaveUpReport says a heartbeat may end a lease wait early: it comes from
// the previous Primary and says it is a Replica (it restarted, or stepped
// down). The round it starts asks it again (rule 4a); this only saves
// waiting for the instant its lease would have run out. (A new Elector
// waiting for an unknown term holder needs no such trigger: that node's
// first heartbeat after its restart makes it Healthy, which starts a
// round while no Primary is named.)
func (e *Elector) gaveUpReport(hb *netsyv1.Heartbeat) bool {
	return hb.GetPrimaryState() == netsyv1.PrimaryState_REPLICA && e.primary != nil && hb.GetNodeId() == e.primary.NodeId
}
