package clustersim

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/roles"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// scenario is one named, scripted run: a small cluster on fixed clocks
// (different offsets, rates within 25% of each other) and fixed links, no
// random faults; the test injects its own and asserts what follows. Every
// invariant of the recorder is checked at the end as well.
type scenario struct {
	t *testing.T
	c *cluster
}

// runScenario builds n nodes (n1 boots first and takes the lock; the
// others follow 200 ms apart), runs body, then checks the recorder.
func runScenario(t *testing.T, n int, tweak func(*simConfig), body func(s *scenario)) {
	dir := t.TempDir()
	outer := t
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		if tweak != nil {
			tweak(&cfg)
		}
		c := newCluster(1, cfg, dir, true)
		rates := []int64{1000, 960, 1040, 1010, 980}
		for i := range n {
			c.addNode(fmt.Sprintf("n%d", i+1), time.Duration(i)*7*time.Hour-9*time.Hour, rates[i], time.Duration(5+i)*time.Millisecond)
		}
		c.setLatencies(func(a, b string) time.Duration { return 2 * time.Millisecond })
		for i, nd := range c.nodes {
			c.w.after(time.Duration(i)*200*time.Millisecond, nd.boot)
		}
		s := &scenario{t: t, c: c}
		defer func() {
			c.closeAll()
			if t.Failed() || outer.Failed() || *flagTrace {
				t.Log("trace:\n" + c.w.dump())
			}
		}()
		body(s)
		if err := c.rec.check(); err != nil {
			t.Errorf("invariants: %v", err)
		}
	})
}

func (s *scenario) settle() {
	s.t.Helper()
	if _, err := s.c.settle(30*time.Second, 100*time.Millisecond); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) runFor(d time.Duration) { s.c.w.run(s.c.w.Now()+d, nil) }

func TestSettleAndWriteThroughAReplica(t *testing.T) {
	runScenario(t, 3, nil, func(s *scenario) {
		s.settle()
		o, err := s.c.writeOnce(1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %v", o)
	})
}

// until runs in 50 ms steps until cond holds; it returns how long that
// took, failing the test after limit.
func (s *scenario) until(limit time.Duration, what string, cond func() bool) time.Duration {
	s.t.Helper()
	start := s.c.w.Now()
	for {
		if cond() {
			return s.c.w.Now() - start
		}
		if s.c.w.Now()-start > limit {
			s.t.Fatalf("not within %v: %s", limit, what)
		}
		s.runFor(50 * time.Millisecond)
	}
}

// roles returns the settled Elector (with its lock term) and Primary
// (with its primary term).
func (s *scenario) roles() (e *simNode, eterm uint64, p *simNode, pterm uint64) {
	s.t.Helper()
	e, p = s.c.electorNode(), s.c.primaryNode()
	if e == nil || p == nil || e == p {
		s.t.Fatalf("no separate Elector and Primary: %v, %v", e, p)
	}
	_, pterm = p.primState()
	return e, e.currentElector().Term(), p, pterm
}

// state is the Cluster State of the Elector acting now, or nil.
func (s *scenario) state() *netsyv1.ClusterState {
	n := s.c.electorNode()
	if n == nil {
		return nil
	}
	e := n.currentElector()
	if e == nil {
		return nil
	}
	cs, err := clusterStateNow(e)
	if err != nil {
		return nil
	}
	return cs
}

// primaryAbove reports whether a node other than old is Active with a
// lease at a term above term.
func (s *scenario) primaryAbove(old *simNode, term uint64) (*simNode, bool) {
	for _, n := range s.c.nodes {
		if st, t := n.primState(); n != old && st == netsyv1.PrimaryState_ACTIVE && t > term && n.leaseHeld() {
			return n, true
		}
	}
	return nil, false
}

func (s *scenario) promotions() int {
	s.c.rec.mu.Lock()
	defer s.c.rec.mu.Unlock()
	return len(s.c.rec.promotions)
}

func (s *scenario) membersTerm() uint64 {
	s.t.Helper()
	m, _, err := discovery.NewMembersFile(s.c.store, s.c.cfg.ClusterID).Load(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return m.PrimaryTerm
}

// others are the nodes that are neither of the given ones.
func (s *scenario) others(not ...*simNode) []*simNode {
	var out []*simNode
	for _, n := range s.c.nodes {
		if !slices.Contains(not, n) {
			out = append(out, n)
		}
	}
	return out
}

// The Elector's process dies: another node takes the lock at a higher
// term and adopts the Active Primary, which keeps its term (no election,
// no new term); the old Elector comes back as an ordinary node.
func TestScenarioElectorCrash(t *testing.T) {
	runScenario(t, 3, nil, func(s *scenario) {
		s.settle()
		e, eterm, p, pterm := s.roles()
		before, mterm := s.promotions(), s.membersTerm()
		e.crash()
		s.until(15*time.Second, "a new Elector naming the same Primary", func() bool {
			n := s.c.electorNode()
			cs := s.state()
			return n != nil && n != e && cs.GetPrimary().GetNodeId() == p.id
		})
		n := s.c.electorNode()
		if got := n.currentElector().Term(); got <= eterm {
			t.Fatalf("new Elector %s at lock term %d, not above %d", n.id, got, eterm)
		}
		if st, term := p.primState(); st != netsyv1.PrimaryState_ACTIVE || term != pterm {
			t.Fatalf("Primary %s is %s at term %d after the Elector crashed, want ACTIVE at %d", p.id, st, term, pterm)
		}
		if s.promotions() != before || s.membersTerm() != mterm {
			t.Fatalf("an Elector crash caused an election: promotions %d -> %d, members.json term %d -> %d",
				before, s.promotions(), mterm, s.membersTerm())
		}
		e.boot()
		s.settle()
	})
}

// The Primary's process dies: its peer address refuses connections, so
// the Elector elects a successor at a higher term without waiting out the
// handshake timeout (5 s here; a silent Primary would be replaced only
// after it); the old Primary comes back as a Replica.
func TestScenarioPrimaryCrash(t *testing.T) {
	runScenario(t, 3, func(cfg *simConfig) { cfg.HandshakeTimeout = 5 * time.Second }, func(s *scenario) {
		s.settle()
		_, _, p, pterm := s.roles()
		p.crash()
		took := s.until(10*time.Second, "a new Primary", func() bool {
			_, ok := s.primaryAbove(p, pterm)
			return ok
		})
		if took > 2*time.Second {
			t.Fatalf("a refused Primary was replaced after %v: it waited for the %v handshake timeout", took, s.c.cfg.HandshakeTimeout)
		}
		p.boot()
		s.settle()
		if st, term := p.primState(); st == netsyv1.PrimaryState_ACTIVE && term == pterm {
			t.Fatalf("the restarted %s is Active at its old term %d", p.id, pterm)
		}
	})
}

// A Primary that stalls (SIGSTOP) cannot be told from a slow one: the
// Elector replaces it only once its lease has run out, by its own clock;
// when it resumes it steps down and never holds a lease at its old term
// (the recorder checks that). The lease is two heartbeat intervals, as
// internal/roles sets it.
func TestScenarioPrimaryStallWaitsOutLease(t *testing.T) {
	runScenario(t, 3, func(cfg *simConfig) { cfg.HandshakeTimeout = time.Second }, func(s *scenario) {
		s.settle()
		_, _, p, pterm := s.roles()
		p.freeze()
		stalled := s.c.w.Now()
		s.until(10*time.Second, "a new Primary", func() bool {
			_, ok := s.primaryAbove(p, pterm)
			return ok
		})
		s.c.rec.mu.Lock()
		var leaseEnd, started time.Duration
		for _, l := range s.c.rec.leases[p.id] {
			leaseEnd = max(leaseEnd, l.end)
		}
		for _, pr := range s.c.rec.promotions {
			if pr.term > pterm && started == 0 {
				started = pr.start
			}
		}
		s.c.rec.mu.Unlock()
		if leaseEnd <= stalled {
			t.Fatalf("%s held no lease when it stalled at %v (its last ended %v)", p.id, stalled, leaseEnd)
		}
		if started < leaseEnd {
			t.Fatalf("a successor went Starting at %v, before the stalled %s's lease ended at %v", started, p.id, leaseEnd)
		}
		p.resume()
		s.runFor(3 * time.Second)
		if st, term := p.primState(); st == netsyv1.PrimaryState_ACTIVE {
			t.Fatalf("%s still Active at term %d after it resumed (was %d)", p.id, term, pterm)
		}
		s.settle()
	})
}

// The previous-Primary handshake: the Primary is cut from the Elector
// long enough to be judged Degraded (two heartbeat intervals of silence),
// but the link heals before the Elector has waited out its lease (the
// lease, two intervals, and a quarter more): no successor is elected and
// the Primary keeps its term. A Primary that restarted answers as a
// Replica: the election goes on at once, without waiting out the
// handshake.
func TestScenarioPreviousPrimaryHandshake(t *testing.T) {
	t.Run("active defers", func(t *testing.T) {
		runScenario(t, 3, func(cfg *simConfig) { cfg.HeartbeatInterval = time.Second }, func(s *scenario) {
			s.settle()
			e, _, p, pterm := s.roles()
			before, mterm := s.promotions(), s.membersTerm()
			cutAt := s.c.w.Now()
			s.c.cut(p.id, e.id, 1)
			s.runFor(2200 * time.Millisecond)
			s.c.cut(p.id, e.id, -1)
			s.runFor(5 * time.Second)
			degraded := false
			for _, ev := range clusterEvents(s, e) {
				if ev.Kind == "node_degraded" && ev.NodeId == p.id {
					degraded = true
				}
			}
			if !degraded {
				t.Fatalf("the Elector never judged %s Degraded: the cut (at %v) tested nothing", p.id, cutAt)
			}
			if s.promotions() != before || s.membersTerm() != mterm {
				t.Fatalf("the Elector elected while the Primary %s could still answer Active: promotions %d -> %d, members.json %d -> %d",
					p.id, before, s.promotions(), mterm, s.membersTerm())
			}
			if st, term := p.primState(); st != netsyv1.PrimaryState_ACTIVE || term != pterm || !p.leaseHeld() {
				t.Fatalf("%s is %s at term %d (lease %v), want Active at %d with a lease", p.id, st, term, p.leaseHeld(), pterm)
			}
		})
	})
	t.Run("restarted goes on", func(t *testing.T) {
		runScenario(t, 3, func(cfg *simConfig) { cfg.HandshakeTimeout = 5 * time.Second }, func(s *scenario) {
			s.settle()
			_, _, p, pterm := s.roles()
			// Down and up in one instant: its address never refuses.
			p.crash()
			p.boot()
			took := s.until(10*time.Second, "a Primary at a higher term", func() bool {
				for _, n := range s.c.nodes {
					if st, term := n.primState(); st == netsyv1.PrimaryState_ACTIVE && term > pterm && n.leaseHeld() {
						return true
					}
				}
				return false
			})
			if took >= s.c.cfg.HandshakeTimeout {
				t.Fatalf("an election after the Primary restarted took %v: it waited out the %v handshake", took, s.c.cfg.HandshakeTimeout)
			}
		})
	})
}

// clusterEvents is the Elector's event log.
func clusterEvents(s *scenario, n *simNode) []*netsyv1.Event {
	e := n.currentElector()
	if e == nil {
		return nil
	}
	cs, err := clusterStateNow(e)
	if err != nil {
		s.t.Fatal(err)
	}
	return cs.Events
}

// The contact rules: under majority quorum an election needs a majority
// of the registered nodes; under a static quorum every registered node
// (here the crashed Primary, until it restarts and answers as a Replica).
// Each blocks while too few nodes answer and goes on once enough do.
func TestScenarioContactRules(t *testing.T) {
	t.Run("majority", func(t *testing.T) {
		runScenario(t, 5, nil, func(s *scenario) {
			s.settle()
			e, _, p, pterm := s.roles()
			rest := s.others(e, p)
			a, b := rest[0], rest[1]
			s.c.cut(a.id, e.id, 1)
			s.c.cut(b.id, e.id, 1)
			p.crash()
			s.runFor(8 * time.Second)
			if n, ok := s.primaryAbove(p, pterm); ok {
				t.Fatalf("%s elected with 2 of 5 nodes reachable (majority quorum)", n.id)
			}
			if s.membersTerm() != pterm {
				t.Fatalf("members.json's primary term moved to %d with no majority", s.membersTerm())
			}
			s.c.cut(a.id, e.id, -1)
			s.until(8*time.Second, "a Primary once 3 of 5 answer", func() bool {
				_, ok := s.primaryAbove(p, pterm)
				return ok
			})
			s.c.cut(b.id, e.id, -1)
			p.boot()
			s.settle()
		})
	})
	t.Run("static", func(t *testing.T) {
		// Every registered node but the previous Primary (whose lease is
		// waited out instead) must answer.
		runScenario(t, 3, func(cfg *simConfig) { cfg.Quorum = 1 }, func(s *scenario) {
			s.settle()
			e, _, p, pterm := s.roles()
			r := s.others(e, p)[0]
			p.crash()
			r.crash()
			s.runFor(8 * time.Second)
			if n, ok := s.primaryAbove(p, pterm); ok {
				t.Fatalf("%s elected while the registered replica %s is down (static quorum)", n.id, r.id)
			}
			r.boot()
			s.until(8*time.Second, "a Primary once every node but the dead Primary answers", func() bool {
				for _, n := range s.c.nodes {
					if st, term := n.primState(); st == netsyv1.PrimaryState_ACTIVE && term > pterm && n.leaseHeld() {
						return true
					}
				}
				return false
			})
			p.boot()
			s.settle()
		})
	})
}

// A node Degraded for longer than the deregistration timeout is removed
// from the Elector's map and its nodes/ file deleted; it registers again
// when it comes back. With the timeout 0 it stays registered.
func TestScenarioDeregistrationTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{5 * time.Second, 0} {
		t.Run(fmt.Sprint(timeout), func(t *testing.T) {
			runScenario(t, 3, func(cfg *simConfig) { cfg.Deregistration = timeout }, func(s *scenario) {
				s.settle()
				e, _, p, _ := s.roles()
				r := s.others(e, p)[0]
				r.crash()
				s.runFor(10 * time.Second)
				cs := s.state()
				if cs == nil {
					t.Fatal("no Elector answers")
				}
				regs, _, err := discovery.List(context.Background(), s.c.store)
				if err != nil {
					t.Fatal(err)
				}
				want := 3
				if timeout > 0 {
					want = 2
				}
				if int(cs.RegisteredNodes) != want || len(regs) != want {
					t.Fatalf("timeout %v, %s down 10 s: the Elector has %d registered nodes and the bucket %d files, want %d",
						timeout, r.id, cs.RegisteredNodes, len(regs), want)
				}
				r.boot()
				s.settle()
			})
		})
	}
}

// An Elector stalls right after it pushed a Cluster State over a slow
// link; another node takes the lock at a higher term and pushes its own.
// The old Elector's push, arriving last, is rejected by the view.
func TestScenarioStaleElectorPushRejected(t *testing.T) {
	// Five nodes: the election needs three answers besides the slow one.
	runScenario(t, 5, nil, func(s *scenario) {
		s.settle()
		e, eterm, p, pterm := s.roles()
		x := s.others(e, p)[0]
		s.c.w.setLink(e.id, x.id, func(l *link) { l.slow = 10 * time.Second })
		p.crash() // an election, and so a push to every node
		s.until(10*time.Second, "a new Primary pushed by "+e.id, func() bool {
			cs := s.state()
			return s.c.electorNode() == e && cs.GetPrimary() != nil && cs.PrimaryTerm > pterm
		})
		e.freeze()
		s.runFor(12 * time.Second)
		s.c.rec.mu.Lock()
		rejected := slices.ContainsFunc(s.c.rec.rejections, func(r rejection) bool {
			return r.node == x.id && r.term == eterm && r.held > eterm
		})
		all := slices.Clone(s.c.rec.rejections)
		s.c.rec.mu.Unlock()
		if !rejected {
			t.Fatalf("%s never rejected a state of the stale Elector %s (term %d); rejections %+v", x.id, e.id, eterm, all)
		}
		if got := x.roles().ElectorTerm(); got <= eterm {
			t.Fatalf("%s's view holds Elector term %d, not above the stale %d", x.id, got, eterm)
		}
		s.c.w.setLink(e.id, x.id, func(l *link) { l.slow = 0 })
		e.resume()
		p.boot()
		s.settle()
	})
}

// A lone node's process dies while it is the Elector and the Primary, and
// comes straight back. The new Elector does not know who took up the
// highest term handed out, but the node answers that its data directory
// took it and that it is a Replica: its own dead process held that lease,
// so it is elected again without the lease wait from the
// Elector's start, and the recorder still finds no two Primaries with
// valid leases at once. Before the rule the new Primary came a full lease
// wait (937.5 ms) after the new Elector started; now some tens of
// milliseconds (the load, one round, the Starting step).
func TestScenarioRestartedLoneNodeSkipsItsOwnLeaseWait(t *testing.T) {
	runScenario(t, 1, nil, func(s *scenario) {
		s.settle()
		p := s.c.primaryNode()
		if p == nil || s.c.electorNode() != p {
			t.Fatalf("the lone node is not the Elector and the Primary: %v, %v", s.c.electorNode(), p)
		}
		_, pterm := p.primState()
		p.crash()
		p.boot()
		took := s.until(10*time.Second, "the restarted node Active above its old term", func() bool {
			st, term := p.primState()
			return st == netsyv1.PrimaryState_ACTIVE && term > pterm && p.leaseHeld()
		})
		s.c.rec.mu.Lock()
		last := s.c.rec.electors[len(s.c.rec.electors)-1]
		s.c.rec.mu.Unlock()
		lease := roles.LeaseWindow(s.c.cfg.HeartbeatInterval)
		wait := lease + lease/4 // the Elector's lease wait (elector package doc, rule 5)
		if last.node != p.id || s.c.w.Now()-last.start >= wait {
			t.Fatalf("the restarted node was Active %v after its boot and %v after its Elector (%s) started: it waited out its own dead process's lease (%v)",
				took, s.c.w.Now()-last.start, last.node, wait)
		}
		s.settle()
	})
}
