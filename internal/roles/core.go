package roles

import (
	"fmt"
	"slices"
	"time"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// maxNodeEvents is how many of its own events a node keeps.
const maxNodeEvents = 100

// Deposition is the fence a Primary lost: another writer took the next wal
// seq in object storage, so this node's state may be behind the bucket's.
type Deposition struct {
	Err  error
	At   time.Time
	Term uint64 // the primary term it lost
}

// note is one event the core asks the loop to record.
type note struct{ kind, node, detail string }

// effects is what the loop carries out after the core took an event.
type effects struct {
	notes   []note
	suspect bool // suspect the Elector lock (find the Elector again)
	beat    bool // send a heartbeat at once
	notify  bool // wake whoever waits for the roles to change
}

// core is the role state no single role owns, and the rules over it. It
// has no clock, store or goroutine: times come in with the events.
type core struct {
	self string

	registered bool
	memberID   uint64
	// healthy is this node's own judgement (heartbeats get through).
	healthy bool
	// leaving: Leave started; the node is Degraded for good.
	leaving bool
	// primaryRefused: the follower's last stream attempt was refused.
	primaryRefused bool
	deposed        *Deposition
	events         []*netsyv1.Event
}

func newCore(self string) core {
	// Healthy until a heartbeat and its retry fail.
	return core{self: self, healthy: true}
}

// registeredAs: the Elector registered this node. It reports whether the
// member id is new to this process.
func (c *core) registeredAs(id uint64) bool {
	changed := c.memberID != id
	c.memberID, c.registered = id, true
	return changed
}

// notRegistered: the Elector does not know this node (a new Elector, or
// it was deregistered); it registers again at its next heartbeat.
func (c *core) notRegistered() { c.registered = false }

// health: the heartbeat sender's judgement changed. A leaving node stays
// Degraded whatever its heartbeats do.
func (c *core) health(ok bool, err error) effects {
	if c.leaving {
		return effects{}
	}
	c.healthy = ok
	if !ok {
		return effects{suspect: true, notify: true, notes: []note{{"self_degraded", c.self, fmt.Sprint(err)}}}
	}
	return effects{notify: true, notes: []note{{"self_healthy", c.self, ""}}}
}

// refused: the follower's stream attempt was refused (or opened again).
// A new refusal is worth a heartbeat now: the Elector probes the Primary.
func (c *core) refused(r bool) effects {
	changed := c.primaryRefused != r
	c.primaryRefused = r
	return effects{beat: changed && r}
}

// leave: the node starts leaving the cluster. From here every heartbeat
// and receipt it sends says Degraded, so nothing counts on it while it
// deregisters.
func (c *core) leave() effects {
	if c.leaving {
		return effects{}
	}
	c.leaving = true
	return effects{beat: true, notify: true, notes: []note{{"self_leaving", c.self, "Degraded until the process ends"}}}
}

// healthState is the health this node reports in heartbeats and receipts.
func (c *core) healthState() netsyv1.HealthState {
	switch {
	case c.leaving:
		return netsyv1.HealthState_DEGRADED
	case !c.registered:
		return netsyv1.HealthState_LOADING
	case !c.healthy:
		return netsyv1.HealthState_DEGRADED
	}
	return netsyv1.HealthState_HEALTHY
}

// fenced: this node, Primary at term, stepped down because another writer
// took over object storage.
func (c *core) fenced(err error, term uint64, at time.Time) {
	c.deposed = &Deposition{Err: err, At: at, Term: term}
}

// reconsider ends the deposition once it is over (see depositionOver).
func (c *core) reconsider(p *netsyv1.NodeInfo, term uint64, active bool, held uint64) {
	if depositionOver(c.deposed, c.self, p, term, active, held) {
		c.deposed = nil
	}
}

// depositionOver says whether deposition d is over: the Elector named a
// Primary at a later term than the one lost, and that Primary is another
// node (which this one follows; readiness checks that on its own) or this
// node, Active again at a later term (its Starting step caught up with
// the bucket).
func depositionOver(d *Deposition, self string, p *netsyv1.NodeInfo, term uint64, active bool, held uint64) bool {
	if d == nil {
		return true
	}
	return p != nil && term > d.Term && (p.NodeId != self || active && held > d.Term)
}

// record keeps ev in the node's bounded event log.
func (c *core) record(ev *netsyv1.Event) {
	// A new slice each time: snapshots share the old one.
	evs := make([]*netsyv1.Event, 0, len(c.events)+1)
	evs = append(append(evs, c.events...), ev)
	if n := len(evs); n > maxNodeEvents {
		evs = slices.Delete(evs, 0, n-maxNodeEvents)
	}
	c.events = evs
}

// renewsLease is the lease rule: a heartbeat answer renews the Primary's
// lease only when the view accepted its Cluster State and it names this
// node Primary at the term it holds. An Elector that names another Primary
// (or none) vouches for no lease of this node's, and a new Elector that
// takes over waits only for the lease of the Primary the old one named.
func renewsLease(self string, accepted bool, cs *netsyv1.ClusterState, held uint64) bool {
	return accepted && cs.GetPrimary().GetNodeId() == self && cs.GetPrimaryTerm() == held
}
