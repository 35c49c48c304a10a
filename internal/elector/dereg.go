package elector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

const (
	// defaultTipInterval is the least time between two reads of the
	// durable tip while a node waits on it: a read lists wal/, so it is
	// not made every tick.
	defaultTipInterval = 3 * time.Second
	// tipTimeout bounds one read of the durable tip.
	tipTimeout = 10 * time.Second
)

// errNoTip is the tip error of an Elector configured without DurableTip.
var errNoTip = errors.New("this Elector has no way to read the bucket's durable tip")

// Reasons a node past the deregistration timeout is still counted; the
// Elector logs and emits an event when a node's reason changes, not on
// every tick.
const (
	waitIndexUnknown = "index_unknown"
	// waitNoPrimaryReport: no Active Primary other than the node has
	// reported since it went silent, so nothing bounds what it receipted.
	waitNoPrimaryReport = "no_primary_report"
	// waitNoSuccessor: the node was the Primary, and no successor has
	// reported yet, so nothing bounds what it acknowledged.
	waitNoSuccessor = "no_successor"
	waitTipUnknown  = "tip_unknown"
	waitAboveTip    = "above_tip"
	waitTipPending  = "tip_pending" // the first read is under way
)

// needsTip reports whether a node waiting for this reason waits on the
// bucket's durable tip (the others wait on something no tip can prove).
func needsTip(kind string) bool {
	switch kind {
	case waitIndexUnknown, waitNoPrimaryReport, waitNoSuccessor:
		return false
	}
	return true
}

// tipState is the Elector's knowledge of the bucket's durable tip. It is
// owned by the loop goroutine; reads run on an owned goroutine and report
// back through the loop.
type tipState struct {
	known bool
	// index is the highest tip read so far: the bucket's tip never goes
	// down, so an older answer is still a lower bound.
	index uint64
	// err is the last read's error (nil once a read succeeds).
	err     error
	reading bool
	readAt  time.Time
	// waits holds every node Degraded past the deregistration timeout that
	// is still counted, and why.
	waits map[string]deregWait
}

type deregWait struct {
	kind string
	why  string
}

// deregMark is the bound on what a silent node may hold beyond its last
// report (package doc, rule 3): the log index an Active Primary other than
// the node reported in the first heartbeat this Elector received from it
// after the node was marked Degraded.
type deregMark struct {
	known bool
	index uint64
	// from is the Primary that reported it.
	from string
	// uncounted: the Primary's last report did not count the node's
	// receipts toward its quorum; the mark is taken from the next report
	// that does not either (one report's committed index and its
	// replication status are read a moment apart).
	uncounted bool
}

// markDegraded records that the node became Degraded at now. A new
// Degraded spell starts a new mark: the node may have caught up (and
// receipted more) while it was Healthy.
func (r *nodeRec) markDegraded(now time.Time) {
	r.health, r.degradedAt, r.mark = netsyv1.HealthState_DEGRADED, now, deregMark{}
}

// notePrimaryReport takes hb, a heartbeat of the recorded Primary, as the
// mark of every Degraded node that has none yet, if it comes from an
// Active Primary at the current term. Whatever a silent node acknowledged
// or receipted was appended by the Primary it followed, or by itself as
// Primary, before it went silent; this Primary either is that one or was
// elected with the node counted, so holds all of it; and its report,
// received after the node was marked Degraded, is newer than the silence.
// The mark is taken only from the second report in a row in which the
// Primary does not count the node's receipts toward its quorum (a node cut
// from this Elector may still follow the Primary and receipt; while its
// receipts count, the Primary may acknowledge entries past any mark with
// them); a report that counts it again voids the mark. Once taken, a mark
// is frozen: the Primary's later growth does not move it, or a busy
// cluster would never let a dead node go.
func (e *Elector) notePrimaryReport(hb *netsyv1.Heartbeat) {
	if hb.PrimaryState != netsyv1.PrimaryState_ACTIVE || hb.PrimaryId != hb.NodeId || hb.PrimaryTerm != e.primaryTerm {
		return
	}
	for id, r := range e.nodes {
		if id == hb.NodeId || r.health != netsyv1.HealthState_DEGRADED {
			continue
		}
		if countedBy(hb, id) {
			// The Primary still counts its receipts (it may be cut from
			// this Elector but following the Primary): it may yet
			// acknowledge entries with them, so no mark holds.
			r.mark = deregMark{}
			continue
		}
		if r.mark.known {
			continue
		}
		if saysPrimary(r.last) && r.last.PrimaryTerm >= hb.PrimaryTerm {
			// It said it was the Primary at this term or later: a report
			// of another at this term is no successor's.
			continue
		}
		if !r.mark.uncounted {
			r.mark.uncounted = true
			continue
		}
		r.mark = deregMark{known: true, index: lastIndexOf(hb), from: hb.NodeId}
	}
}

// countedBy reports whether the Primary's heartbeat hb says it counts
// node id's receipts toward its quorum.
func countedBy(hb *netsyv1.Heartbeat, id string) bool {
	for _, rs := range hb.GetReplication().GetReplicas() {
		if rs.GetNodeId() == id {
			return rs.GetCounted()
		}
	}
	return false
}

// saysPrimary reports whether hb says its node holds (or takes up, or
// hands off) a primary term.
func saysPrimary(hb *netsyv1.Heartbeat) bool {
	switch hb.GetPrimaryState() {
	case netsyv1.PrimaryState_STARTING, netsyv1.PrimaryState_ACTIVE, netsyv1.PrimaryState_DRAINING:
		return true
	}
	return false
}

// lastIndexOf is the highest log index a node reported: what it holds
// fsync'd, and so may have acknowledged (receipted), or what it knew
// committed, whichever is higher.
func lastIndexOf(hb *netsyv1.Heartbeat) uint64 {
	if hb == nil {
		return 0
	}
	return max(hb.LatestIndex, hb.CommittedIndex)
}

// deregTarget is the index object storage must hold before a silent node
// may leave the count: the higher of its last report and its mark.
func deregTarget(last *netsyv1.Heartbeat, mark deregMark) uint64 {
	return max(lastIndexOf(last), mark.index)
}

// deregVerdict decides whether a node that stopped answering may leave the
// count: only once object storage holds every entry it may have
// acknowledged or receipted, up to deregTarget. A node no Primary has
// reported after (wasPrimary: it is or said it was the Primary, so only a
// successor's report counts), or an unknown tip, proves nothing, so the
// answer is no; why says what is missing, kind names it. A node this
// Elector never heard from (down when it took over) is bounded by its
// mark alone: otherwise it would stay counted for good, and under a
// static quorum no election could ever succeed again.
func deregVerdict(last *netsyv1.Heartbeat, wasPrimary bool, mark deregMark, tipKnown bool, tip uint64, tipErr error) (ok bool, kind, why string) {
	idx := lastIndexOf(last)
	switch {
	case last == nil && !mark.known && wasPrimary:
		return false, waitNoSuccessor, "it was the Primary, this Elector has not heard from it, and it may have acknowledged entries; " +
			"it stays counted until a successor is Active and reports its log index"
	case last == nil && !mark.known:
		return false, waitIndexUnknown, "its last log index is unknown (this Elector has not heard from it), " +
			"and no Active Primary has reported since it was marked Degraded"
	case !mark.known && wasPrimary:
		return false, waitNoSuccessor, fmt.Sprintf("it was the Primary and may have acknowledged entries after its last report (log index %d); "+
			"it stays counted until a successor is Active and reports its log index", idx)
	case !mark.known:
		return false, waitNoPrimaryReport, fmt.Sprintf("it may have receipted entries after its last report (log index %d), "+
			"and no Active Primary has reported since it went silent", idx)
	}
	facts := fmt.Sprintf("it last reported log index %d and the Primary %s reported %d after it went silent", idx, mark.from, mark.index)
	if last == nil {
		// Never heard from: the mark alone bounds it. What it may have
		// receipted was appended by the Primary it followed before it
		// went silent, and the marking Primary is that one or was elected
		// with it counted.
		facts = fmt.Sprintf("this Elector has not heard from it and the Primary %s reported %d after it was marked Degraded", mark.from, mark.index)
	}
	switch {
	case !tipKnown:
		if tipErr == nil {
			tipErr = errors.New("not read yet")
		}
		return false, waitTipUnknown, fmt.Sprintf("%s, and the bucket's durable tip is unknown (%v)", facts, tipErr)
	case deregTarget(last, mark) > tip:
		return false, waitAboveTip, fmt.Sprintf("%s; object storage holds up to %d", facts, tip)
	}
	return true, "", ""
}

// wasPrimary reports whether node id is the recorded Primary or last said
// it was one: what it acknowledged is bounded only by a successor's report.
func (e *Elector) wasPrimary(id string, r *nodeRec) bool {
	return e.primary != nil && e.primary.NodeId == id || saysPrimary(r.last)
}

// mayAutoDeregister applies the deregistration rule to a node Degraded
// past the timeout, recording and reporting (once per reason) why it must
// wait.
func (e *Elector) mayAutoDeregister(id string, r *nodeRec) bool {
	if e.cfg.Quorum == 0 {
		// Under quorum 0 no node acknowledges an entry before object
		// storage holds it: whatever it reported or receipted is safe by
		// definition.
		delete(e.tip.waits, id)
		return true
	}
	ok, kind, why := deregVerdict(r.last, e.wasPrimary(id, r), r.mark, e.tip.known, e.tip.index, e.tip.err)
	if ok {
		delete(e.tip.waits, id)
		return true
	}
	if needsTip(kind) && e.tip.known && e.tip.err != nil {
		why += fmt.Sprintf(" (reading it again failed: %v)", e.tip.err)
	}
	if e.tip.waits == nil {
		e.tip.waits = make(map[string]deregWait)
	}
	pending := kind == waitTipUnknown && e.tip.err == nil // not read yet: say why once it is
	if pending {
		kind = waitTipPending
	}
	prev, had := e.tip.waits[id]
	e.tip.waits[id] = deregWait{kind: kind, why: why}
	if !pending && (!had || prev.kind != kind) {
		e.log.Warn("not deregistering a node Degraded past the deregistration timeout: object storage may lack entries it acknowledged; "+
			"the cluster waits for it (or force it out with netsyctl deregister --force)", "node", id, "reason", why)
		e.emit("deregistration_waiting", id, why)
	}
	return false
}

// refreshTip forgets waits of nodes that are no longer past the timeout
// and, while some node waits on the tip, reads it again at most every
// DurableTipInterval, off the loop.
func (e *Elector) refreshTip(ctx context.Context, now time.Time) {
	need := false
	for id, w := range e.tip.waits {
		r := e.nodes[id]
		if r == nil || r.health != netsyv1.HealthState_DEGRADED || now.Sub(r.degradedAt) <= e.cfg.DeregistrationTimeout {
			delete(e.tip.waits, id)
			continue
		}
		if needsTip(w.kind) {
			need = true
		}
	}
	interval := e.cfg.DurableTipInterval
	if interval <= 0 {
		interval = defaultTipInterval
	}
	if !need || e.tip.reading || !e.tip.readAt.IsZero() && now.Sub(e.tip.readAt) < interval {
		return
	}
	e.tip.reading, e.tip.readAt = true, now
	e.goOwned(func() {
		tip, err := e.readTip(ctx)
		_ = e.do(ctx, false, func() error {
			e.tip.reading = false
			e.tip.err = err
			if err == nil {
				e.tip.known, e.tip.index = true, max(e.tip.index, tip)
			} else if ctx.Err() == nil {
				e.log.Debug("read the bucket's durable tip", "error", err)
			}
			return nil
		})
	})
}

// readTip reads the bucket's durable tip, bounded in time.
func (e *Elector) readTip(ctx context.Context) (uint64, error) {
	if e.cfg.DurableTip == nil {
		return 0, errNoTip
	}
	cctx, cancel := clock.WithTimeout(ctx, e.cfg.Clock, tipTimeout)
	defer cancel()
	tip, err := e.cfg.DurableTip(cctx)
	if err != nil {
		return 0, fmt.Errorf("read the bucket's durable tip: %w", err)
	}
	return tip, nil
}

// LossSummary says what a forced deregistration of nodeID, answered with
// r, may have lost, in the words netsyctl prints.
func LossSummary(nodeID string, r *netsyv1.DeregisterNodeResponse) string {
	switch {
	case !r.LastIndexKnown:
		return fmt.Sprintf("node %s's last log index is unknown; any entries it acknowledged that object storage lacks may be lost", nodeID)
	case !r.DurableTipKnown:
		return fmt.Sprintf("node %s last reported index %d; object storage's durable tip is unknown; acknowledged entries up to %d may be lost",
			nodeID, r.LastIndex, r.LastIndex)
	case r.LastIndex > r.DurableTip:
		return fmt.Sprintf("node %s last reported index %d; object storage holds up to %d; up to %d acknowledged entries may be lost",
			nodeID, r.LastIndex, r.DurableTip, r.LastIndex-r.DurableTip)
	}
	return fmt.Sprintf("node %s last reported index %d; object storage holds up to %d; nothing it reported is lost", nodeID, r.LastIndex, r.DurableTip)
}

// deregisterUnloaded handles a node id that is not in the map. A
// registration file the Elector did not load (it does not decode, or names
// another cluster id) counts for nothing, so deleting it is the repair the
// operator asked for; no file at all is NotFound with ReasonUnknownNode.
func (e *Elector) deregisterUnloaded(ctx context.Context, nodeID string) (*netsyv1.DeregisterNodeResponse, error) {
	key := discovery.NodeKey(nodeID)
	if _, _, err := e.cfg.Store.Get(ctx, key); err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, &peer.CodedError{C: codes.NotFound, R: peer.ReasonUnknownNode, Msg: fmt.Sprintf("node %q is not registered", nodeID)}
		}
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if err := discovery.Deregister(ctx, e.cfg.Store, nodeID); err != nil {
		return nil, err
	}
	e.log.Warn("deleted a registration file the Elector had not loaded (it does not decode, or belongs to another cluster id)", "node", nodeID, "key", key)
	return &netsyv1.DeregisterNodeResponse{}, nil
}

// Deregister removes a node from the map and deletes its nodes/ file; its
// member id stays in members.json. It is DeregisterNode without force.
func (e *Elector) Deregister(ctx context.Context, nodeID string) error {
	_, err := e.DeregisterNode(ctx, nodeID, false)
	return err
}

// DeregisterNode removes a node from the map and deletes its nodes/ file;
// its member id stays in members.json.
//
// An unknown node is a NotFound error (ReasonUnknownNode). The Primary
// (the current one, or the previous one a round is replacing) may go only
// once it answers as itself that it no longer acts as one: its heartbeats
// may still reach this Elector and renew its lease while this Elector
// cannot reach it (a one-way cut), so being heard from proves nothing.
// Otherwise the call fails with FailedPrecondition and ReasonNotDurable;
// with force it is removed but stays the previous Primary for the next
// election, whose handshake and lease wait (rule 5) still apply.
//
// A live node (this node, one heard from within the degradation window,
// or one whose peer address answers as that node) leaves once the
// bucket's durable tip reaches the log index it reported last (when it
// leaves, in the heartbeat that says it is Degraded, after which its
// Primary writes synchronously): a replica it receipted for may have
// acknowledged entries the bucket lacks, and with it gone the rest of the
// count may not hold them. A node that does not answer leaves the count
// only under the rule of automatic deregistration (package doc, rule 3a:
// its last reported index and the index the Primary reported after it
// went silent at or below the bucket's durable tip; the answer's
// last_index is the higher of the two). Either fails with
// FailedPrecondition and ReasonNotDurable until then, unless force is
// set, in which case the node is removed and the answer says what may be
// lost.
func (e *Elector) DeregisterNode(ctx context.Context, nodeID string, force bool) (*netsyv1.DeregisterNodeResponse, error) {
	if err := discovery.ValidateNodeID(nodeID); err != nil {
		return nil, &peer.CodedError{C: codes.InvalidArgument, R: peer.ReasonUnknownNode, Msg: err.Error()}
	}
	var (
		info       *netsyv1.NodeInfo
		last       *netsyv1.Heartbeat
		mark       deregMark
		isPrimary  bool
		wasPrimary bool
		live       bool
		unknown    bool
	)
	if err := e.do(ctx, true, func() error {
		r := e.nodes[nodeID]
		if unknown = r == nil; unknown {
			return nil
		}
		info, last, mark = r.info, r.last, r.mark
		if r.health != netsyv1.HealthState_DEGRADED {
			// Not marked Degraded yet: no report bounds its silence.
			mark = deregMark{}
		}
		// The recorded Primary (current, or previous while a round
		// replaces it), or a node that last said it holds the highest
		// term handed out.
		isPrimary = e.primary != nil && e.primary.NodeId == nodeID ||
			saysPrimary(r.last) && r.last.PrimaryTerm >= e.maxTerm
		wasPrimary = e.wasPrimary(nodeID, r)
		live = nodeID == e.cfg.Self.NodeId ||
			!r.lastAt.IsZero() && e.cfg.Clock.Now().Sub(r.lastAt) <= 2*e.cfg.HeartbeatInterval
		return nil
	}); err != nil {
		return nil, err
	}
	if unknown {
		return e.deregisterUnloaded(ctx, nodeID)
	}
	var answer *netsyv1.Heartbeat
	if isPrimary || !live || last == nil {
		cctx, cancel := clock.WithTimeout(ctx, e.cfg.Clock, e.cfg.HeartbeatInterval)
		st, err := e.cfg.Peers.GetNodeState(cctx, info)
		cancel()
		if err == nil && st.GetState().GetNodeId() == nodeID {
			live, answer = true, st.GetState()
			if isPrimary && saysPrimary(answer) {
				// The Primary may go only once it is no longer acting
				// as one (it drained, or its process restarted).
				return nil, fmt.Errorf("node %s is the Primary: hand the role off first (netsyctl handoff)", nodeID)
			}
		}
	}
	if isPrimary && answer == nil {
		// Its heartbeats may still renew its lease (this Elector hears
		// it but cannot reach it): only its own answer that it is no
		// longer Primary counts.
		live = false
		if !force {
			return nil, &peer.CodedError{C: codes.FailedPrecondition, R: peer.ReasonNotDurable, Msg: fmt.Sprintf(
				"node %s is the Primary and does not answer: it may still hold its lease and acknowledge writes; "+
					"hand the role off (netsyctl handoff), wait for it to answer, or force it out (netsyctl deregister --force %s): "+
					"a successor is then elected only once its lease has run out", nodeID, nodeID)}
		}
	}
	resp := &netsyv1.DeregisterNodeResponse{}
	resp.LastIndex, resp.LastIndexKnown = lastIndexOf(last), last != nil
	detail := ""
	switch {
	case e.cfg.Quorum == 0:
		// Under quorum 0 the bucket holds every acknowledged entry.
	case live:
		// Leaving gracefully: what it receipted is bounded by its own
		// latest report, and must be in the bucket before the count
		// drops (a write held by it and the Primary alone would
		// otherwise be lost with the Primary).
		resp.LastIndex = max(lastIndexOf(last), lastIndexOf(answer))
		resp.LastIndexKnown = last != nil || answer != nil
		tip, tipErr := e.readTip(ctx)
		resp.DurableTip, resp.DurableTipKnown = tip, tipErr == nil
		why := ""
		switch {
		case !resp.LastIndexKnown:
			why = "its log index is unknown (it has not reported to this Elector)"
		case tipErr != nil:
			why = fmt.Sprintf("it reported log index %d and the bucket's durable tip is unknown (%v)", resp.LastIndex, tipErr)
		case resp.LastIndex > tip:
			why = fmt.Sprintf("it reported log index %d and object storage holds up to %d", resp.LastIndex, tip)
		}
		if why != "" {
			if !force {
				return nil, &peer.CodedError{C: codes.FailedPrecondition, R: peer.ReasonNotDurable, Msg: fmt.Sprintf(
					"node %s is leaving but %s: removing it now could lose acknowledged writes it receipted; "+
						"retry once object storage has caught up (a Degraded node's Primary writes synchronously), "+
						"or force it out (netsyctl deregister --force %s)", nodeID, why, nodeID)}
			}
			resp.Forced = true
			detail = "forced: " + LossSummary(nodeID, resp)
		}
	default:
		// What it may have acknowledged is bounded by its mark, not its
		// last report (package doc, rule 3a): the answer reports the
		// target, and with no mark yet the index is unknown.
		resp.LastIndex, resp.LastIndexKnown = deregTarget(last, mark), mark.known
		var tip uint64
		var tipErr error = errors.New("not read: nothing bounds what it may have acknowledged")
		if resp.LastIndexKnown {
			tip, tipErr = e.readTip(ctx)
			resp.DurableTip, resp.DurableTipKnown = tip, tipErr == nil
		}
		if ok, kind, why := deregVerdict(last, wasPrimary, mark, tipErr == nil, tip, tipErr); !ok {
			if !force {
				hint := "for object storage to catch up"
				if !needsTip(kind) {
					hint = "for an Active Primary to report its log index"
				}
				return nil, &peer.CodedError{C: codes.FailedPrecondition, R: peer.ReasonNotDurable, Msg: fmt.Sprintf(
					"node %s is not answering and %s: removing it could lose acknowledged writes; "+
						"wait for it to come back (or %s), or force it out (netsyctl deregister --force %s)",
					nodeID, why, hint, nodeID)}
			}
			resp.Forced = true
			detail = "forced: " + LossSummary(nodeID, resp)
		}
	}
	err := e.do(ctx, true, func() error {
		if _, ok := e.nodes[nodeID]; !ok {
			return nil
		}
		// A deregistered Primary stays e.primary, the previous Primary
		// of the next round (it is no longer named: primaryGone): the
		// handshake asks it, and if it does not answer the round waits
		// out its lease from the last answer that named it (rule 5).
		// Forgetting it would leave only the take-over wait, long past,
		// while it may still hold its lease.
		delete(e.nodes, nodeID)
		delete(e.tip.waits, nodeID)
		e.version++
		e.emit("node_deregistered", nodeID, detail)
		if resp.Forced {
			e.log.Warn("node forced out of the cluster: acknowledged entries may be lost", "node", nodeID, "detail", detail)
		} else {
			e.log.Info("node deregistered", "node", nodeID)
		}
		e.pushAll(ctx)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := discovery.Deregister(ctx, e.cfg.Store, nodeID); err != nil {
		return nil, err
	}
	return resp, nil
}
