package elector

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// candidate is what the election knows of one node when it decides.
type candidate struct {
	id string
	// state is what the node answered (or, under quorum 0, its last
	// heartbeat); nil if it could not be contacted.
	state *netsyv1.Heartbeat
	// degraded is the Elector's own judgement (missed heartbeats).
	degraded bool
}

// plan is what a decision may take into account besides the candidates.
type plan struct {
	quorum     int
	registered int
	// exclude are nodes that must not be elected (a Primary that just
	// drained in a handoff).
	exclude map[string]bool
	// prefer is elected if it is eligible (netsyctl handoff --to), after a
	// drain that left every committed entry in object storage.
	prefer string
	// maxTerm is the highest primary term handed out (members.json).
	maxTerm uint64
	// prevRegistered says the previous Primary is one of the registered
	// nodes. It is handled by the handshake (rule 4a), not by the contact
	// rule: unless it answered, the nodes that must answer are counted
	// without it (seed, election step 2).
	prevRegistered bool
}

// Reasons an election fails this round; it is retried.
var (
	errContact    = errors.New("too few nodes answered for the quorum rule")
	errNotReplica = errors.New("a contacted node is not a Replica")
	errNoHealthy  = errors.New("no Healthy node to elect")
	errTwoActive  = errors.New("more than one node says it is the Active Primary")
	errAhead      = errors.New("a Degraded node holds a newer log than every Healthy node")
)

// newer orders two logs: the term that wrote the last entry first (a node
// holding a deposed Primary's stale entries never outranks one holding a
// newer Primary's acknowledged ones), then the index, then the revision
// (an index orders entries that share a revision).
func newer(a, b *netsyv1.Heartbeat) int {
	return cmp.Or(
		cmp.Compare(a.LatestTerm, b.LatestTerm),
		cmp.Compare(a.LatestIndex, b.LatestIndex),
		cmp.Compare(a.LatestRevision, b.LatestRevision),
	)
}

// contactNeed is how many nodes an election must hear from. registered
// counts every registered node; withoutPrev says the previous Primary is
// one of them and did not answer: its lease was waited out instead (rule
// 4a), so the need is counted over the other nodes.
//
// Quorum 0 needs no node (every acknowledged write is in object storage).
// A static quorum needs every node (a committed entry may sit on a
// minority of replicas): all of them, or all but the previous Primary. A
// majority quorum needs floor(N/2)+1 of the N registered nodes; without
// the previous Primary, N - floor(N/2) of the N-1 others: an entry
// acknowledged under majority quorum is on the Primary and on floor(N/2)
// replicas, so at most N-1-floor(N/2) of the other nodes lack it, and any
// N - floor(N/2) of them include one that holds it.
func contactNeed(quorum, registered int, withoutPrev bool) int {
	switch {
	case quorum == 0:
		return 0
	case quorum > 0 && withoutPrev:
		return registered - 1
	case quorum > 0:
		return registered
	case withoutPrev:
		return registered - registered/2
	default:
		return registered/2 + 1
	}
}

// decide applies the seed's election steps 3 to 7 to what was gathered.
// It returns the node to elect, or an already Active Primary to adopt
// (adopt true), or why no node can be elected now.
func decide(cands []candidate, p plan, contacted int, prevContacted bool) (winner string, adopt bool, err error) {
	need := contactNeed(p.quorum, p.registered, p.prevRegistered && !prevContacted)
	if prevContacted {
		// A previous Primary that answered (as a Replica: it restarted or
		// drained) is as good a witness as any other node.
		contacted++
	}
	if contacted < need {
		without := ""
		if p.prevRegistered && !prevContacted {
			without = ", the previous Primary not counted"
		}
		return "", false, fmt.Errorf("%w: %d of %d needed (quorum %d, %d registered%s)", errContact, contacted, need, p.quorum, p.registered, without)
	}
	maxTerm := p.maxTerm
	for _, c := range cands {
		if c.state != nil && c.state.PrimaryState != netsyv1.PrimaryState_REPLICA {
			maxTerm = max(maxTerm, c.state.PrimaryTerm)
		}
	}
	// stale: a node that holds (or takes up, or hands off) a term below
	// one handed out since. It was superseded while cut off; it is not
	// adopted and does not block the election (its lease, granted only by
	// an Elector that named it, ran out before this round: the handshake
	// and the take-over wait see to that), and it steps down once it
	// hears of the new Primary.
	stale := func(c candidate) bool {
		return c.state != nil && c.state.PrimaryState != netsyv1.PrimaryState_REPLICA && c.state.PrimaryTerm < maxTerm
	}
	var active []string
	for _, c := range cands {
		if c.state != nil && c.state.PrimaryState == netsyv1.PrimaryState_ACTIVE && !stale(c) {
			active = append(active, c.id)
		}
	}
	switch len(active) {
	case 0:
	case 1:
		return active[0], true, nil
	default:
		slices.Sort(active)
		return "", false, fmt.Errorf("%w: %s", errTwoActive, strings.Join(active, ", "))
	}
	for _, c := range cands {
		if c.state == nil || c.degraded || c.state.Health == netsyv1.HealthState_DEGRADED || stale(c) {
			// A Degraded node fell back to synchronous object-storage
			// writes when it degraded, so it holds nothing the bucket
			// lacks: its Primary State need not block the election.
			continue
		}
		if ps := c.state.PrimaryState; ps != netsyv1.PrimaryState_REPLICA {
			return "", false, fmt.Errorf("%w: %s is %s", errNotReplica, c.id, ps)
		}
	}
	var healthy []candidate
	for _, c := range cands {
		if c.state != nil && !c.degraded && c.state.Health == netsyv1.HealthState_HEALTHY && !p.exclude[c.id] &&
			c.state.PrimaryState == netsyv1.PrimaryState_REPLICA {
			healthy = append(healthy, c)
		}
	}
	if len(healthy) == 0 {
		return "", false, errNoHealthy
	}
	if p.prefer != "" {
		for _, c := range healthy {
			if c.id == p.prefer {
				return c.id, false, nil
			}
		}
	}
	// Newest log first, then the newest process, then the id so the
	// choice is deterministic.
	slices.SortFunc(healthy, func(a, b candidate) int {
		return cmp.Or(
			newer(b.state, a.state),
			cmp.Compare(b.state.StartTimeUnixNano, a.state.StartTimeUnixNano),
			cmp.Compare(a.id, b.id),
		)
	})
	best := healthy[0]
	if p.quorum != 0 && p.prefer == "" {
		// Replica receipts may have acknowledged entries only a Degraded
		// node still holds (it degraded after receipting them, before the
		// Primary fell back and uploaded them): electing a node without
		// them could lose them. Wait for it to recover (or be
		// deregistered) instead.
		for _, c := range cands {
			// A stale Primary's extra entries are not among them: its
			// lease ran out before the newer term was handed out (the
			// handshake and the take-over wait see to that), and after
			// that it could acknowledge only through object storage,
			// which the next Primary's Starting step catches up from.
			if c.state != nil && !p.exclude[c.id] && !stale(c) && newer(c.state, best.state) > 0 {
				return "", false, fmt.Errorf("%w: %s (term %d index %d) is ahead of %s (term %d index %d)", errAhead,
					c.id, c.state.LatestTerm, c.state.LatestIndex, best.id, best.state.LatestTerm, best.state.LatestIndex)
			}
		}
	}
	return best.id, false, nil
}
