package roles

import (
	"context"
	"sync"

	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// snapshot is the role state as the loop last published it. It is never
// modified after it is published; read it with Roles.snap.
type snapshot struct {
	registered     bool
	memberID       uint64
	healthy        bool
	leaving        bool
	primaryRefused bool
	health         netsyv1.HealthState
	deposed        *Deposition
	events         []*netsyv1.Event // shared: never modified
	elector        *elector.Elector // running this lock term, or nil
}

// msg is one event for the owner loop: it changes the core (and the
// running Elector, which the loop owns beside it) and returns the effects.
type msg struct {
	f    func(c *core, el **elector.Elector) effects
	done chan struct{} // closed once applied and published; may be nil
}

// inbox queues messages for the loop. Posting never blocks, so a role's
// callback (the Primary's Changed, the Elector's OnEvent) may post from
// inside its own loop without waiting on this one.
type inbox struct {
	mu   sync.Mutex
	q    []msg
	wake chan struct{}
}

func (b *inbox) post(m msg) {
	b.mu.Lock()
	b.q = append(b.q, m)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []msg {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.q
	b.q = nil
	return q
}

// post hands the loop an event without waiting for it.
func (r *Roles) post(f func(c *core, el **elector.Elector) effects) {
	r.inbox.post(msg{f: f})
}

// do hands the loop an event and waits until it is applied and published
// (or the loop has stopped).
func (r *Roles) do(f func(c *core, el **elector.Elector) effects) {
	done := make(chan struct{})
	r.inbox.post(msg{f: f, done: done})
	select {
	case <-done:
	case <-r.loopDone:
	}
}

// loop is the owner loop: the only goroutine that changes the core.
func (r *Roles) loop(ctx context.Context) {
	defer close(r.loopDone)
	for {
		select {
		case <-r.inbox.wake:
		case <-ctx.Done():
			return
		}
		for _, m := range r.inbox.take() {
			eff := m.f(&r.core, &r.running)
			r.publish()
			r.apply(eff)
			if m.done != nil {
				close(m.done)
			}
		}
	}
}

// publish makes the core's state readable by other goroutines.
func (r *Roles) publish() {
	c := &r.core
	r.snapshot.Store(&snapshot{
		registered: c.registered, memberID: c.memberID, healthy: c.healthy, leaving: c.leaving,
		primaryRefused: c.primaryRefused, health: c.healthState(), deposed: c.deposed,
		events: c.events, elector: r.running,
	})
}

// apply carries out what the core asked for. None of it blocks.
func (r *Roles) apply(eff effects) {
	for _, n := range eff.notes {
		r.noteEvent(n)
	}
	if eff.suspect {
		r.lock.Suspect()
	}
	if eff.beat && r.hb != nil {
		r.hb.Now()
	}
	if eff.notify {
		r.notify()
	}
}

// noteEvent records one role change this node saw or made (on the loop).
func (r *Roles) noteEvent(n note) {
	_, term := r.prim.State()
	ev := &netsyv1.Event{
		TimeUnixNano: r.clk.Wall().UnixNano(), Kind: n.kind, NodeId: n.node, Detail: n.detail,
		ElectorTerm: r.view.ElectorTerm(), PrimaryTerm: term, Revision: r.eng.CurrentRevision(), Reporter: r.cfg.Node.NodeID,
	}
	r.core.record(ev)
	r.publish()
	r.eventsC.WithLabelValues(ev.Kind).Inc()
	r.log.Info("event", "kind", n.kind, "node", n.node, "elector_term", ev.ElectorTerm, "primary_term", term, "rev", ev.Revision, "detail", n.detail)
}

// event records a role change from any goroutine.
func (r *Roles) event(kind, node, detail string) {
	r.post(func(*core, **elector.Elector) effects {
		return effects{notes: []note{{kind, node, detail}}}
	})
}

// snap is the role state as last published.
func (r *Roles) snap() *snapshot { return r.snapshot.Load() }

// notify wakes whoever waits for the roles to change.
func (r *Roles) notify() {
	r.changedMu.Lock()
	close(r.changedCh)
	r.changedCh = make(chan struct{})
	r.changedMu.Unlock()
}
