package clustersim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	flagSeeds = flag.Int("clustersim.seeds", 0, "seeds for the chaos simulation (0: 500, or 100 under -race or -short)")
	flagSeed  = flag.Uint64("clustersim.seed", 0, "run only this chaos seed (0: all), with a trace on failure")
	flagTrace = flag.Bool("clustersim.trace", false, "print the trace of every seed run")
)

func seedCount() int {
	switch {
	case *flagSeeds > 0:
		return *flagSeeds
	case raceEnabled || testing.Short():
		return 100
	}
	return 500
}

// chaosOpts varies the simulation for the tests that show it can fail.
type chaosOpts struct {
	// chaos is how long faults are injected; then every fault heals.
	chaos time.Duration
	// settleLimit bounds the time to one Elector and one Primary after
	// the faults heal.
	settleLimit time.Duration
}

// chaosResult is what one seed did.
type chaosResult struct {
	c        *cluster
	err      error
	settled  time.Duration
	steps    int
	electors int
	promoted int
	stale    int
	// stalePromotions: nodes that went Starting at a term below one
	// taken up before (a push that waited out a stall).
	stalePromotions int
	desc            string
}

// uniform draws from [lo, hi).
func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// buildChaos makes the seed's cluster: 3 to 5 nodes, a quorum rule, clocks
// with offsets and rates (every rate in [b, 1.25b] for a base b in
// [0.8, 1.0]: no clock more than 25% faster than another), and link and
// bucket latencies.
func buildChaos(seed uint64, trace bool) (*cluster, *rand.Rand) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed5eed))
	cfg := defaultConfig()
	cfg.Quorum = []int{-1, -1, 0, 1}[rng.IntN(4)]
	cfg.LockLease = []time.Duration{3 * time.Second, 5 * time.Second}[rng.IntN(2)]
	cfg.LockRenew = cfg.LockLease / 3
	cfg.HandshakeTimeout = []time.Duration{time.Second, 3 * time.Second}[rng.IntN(2)]
	cfg.Deregistration = []time.Duration{0, 20 * time.Second}[rng.IntN(2)]
	cfg.StartingDelay = []time.Duration{50 * time.Millisecond, 2 * time.Second}[rng.IntN(2)]
	c := newCluster(seed, cfg, trace)
	n := 3 + rng.IntN(3)
	base := 800 + rng.Int64N(201)
	for i := range n {
		rate := base + rng.Int64N(base/4+1)
		offset := time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour
		c.addNode(fmt.Sprintf("n%d", i+1), offset, rate, uniform(rng, 2*time.Millisecond, 60*time.Millisecond))
	}
	lat := map[[2]string]time.Duration{}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			lat[[2]string{a.id, b.id}] = uniform(rng, 200*time.Microsecond, 20*time.Millisecond)
		}
	}
	c.setLatencies(func(a, b string) time.Duration { return lat[[2]string{a, b}] })
	for _, nd := range c.nodes {
		c.w.after(uniform(rng, 0, 3*time.Second), nd.boot)
	}
	return c, rng
}

// chaosSchedule injects one random fault every 0.5 to 6 s until end; each
// fault undoes itself after a while, unless healAll came first.
type chaosSchedule struct {
	c   *cluster
	rng *rand.Rand
	end time.Duration
	gen int // faults of an older generation were healed by healAll
	log []string
}

func (s *chaosSchedule) note(format string, args ...any) {
	msg := fmt.Sprintf("%10v ", s.c.w.Now()) + fmt.Sprintf(format, args...)
	s.log = append(s.log, msg)
	s.c.w.tracef("FAULT %s", fmt.Sprintf(format, args...))
}

// later runs undo after d unless the faults were healed meanwhile.
func (s *chaosSchedule) later(d time.Duration, undo func()) {
	gen := s.gen
	s.c.w.after(d, func() {
		if s.gen == gen {
			undo()
		}
	})
}

func (s *chaosSchedule) pick() *simNode { return s.c.nodes[s.rng.IntN(len(s.c.nodes))] }

// pickRole returns the Elector or the Primary (or, when there is none, any
// node) half the time, any node otherwise.
func (s *chaosSchedule) pickRole() *simNode {
	if s.rng.IntN(2) == 0 {
		var n *simNode
		if s.rng.IntN(2) == 0 {
			n = s.c.electorNode()
		} else {
			n = s.c.primaryNode()
		}
		if n != nil {
			return n
		}
	}
	return s.pick()
}

func (s *chaosSchedule) step() {
	c, rng := s.c, s.rng
	if c.w.Now() >= s.end {
		return
	}
	d := uniform(rng, 500*time.Millisecond, 15*time.Second)
	switch k := rng.IntN(12); k {
	case 0, 1: // a node cut from the Elector
		e := c.electorNode()
		x := s.pick()
		if e != nil && x != e {
			s.note("cut %s from the Elector %s for %v", x.id, e.id, d)
			c.cut(x.id, e.id, 1)
			s.later(d, func() { c.cut(x.id, e.id, -1) })
		}
	case 2: // a node cut from the bucket
		x := s.pickRole()
		fail := uniform(rng, 10*time.Millisecond, 5*time.Second)
		s.note("cut %s from the bucket for %v (calls fail after %v)", x.id, d, fail)
		x.cutBucket(1, fail)
		s.later(d, func() { x.cutBucket(-1, 0) })
	case 3: // a node cut from both
		x := s.pickRole()
		e := c.electorNode()
		fail := uniform(rng, 10*time.Millisecond, 5*time.Second)
		s.note("cut %s from the bucket and the Elector for %v", x.id, d)
		x.cutBucket(1, fail)
		if e != nil && e != x {
			c.cut(x.id, e.id, 1)
		}
		s.later(d, func() {
			x.cutBucket(-1, 0)
			if e != nil && e != x {
				c.cut(x.id, e.id, -1)
			}
		})
	case 4: // a node cut from every other node
		x := s.pickRole()
		s.note("isolate %s from the nodes for %v", x.id, d)
		for _, y := range c.nodes {
			c.cut(x.id, y.id, 1)
		}
		s.later(d, func() {
			for _, y := range c.nodes {
				c.cut(x.id, y.id, -1)
			}
		})
	case 5: // one direction only
		a, b := s.pickRole(), s.pick()
		if a != b {
			if rng.IntN(2) == 0 {
				a, b = b, a
			}
			s.note("cut %s->%s only for %v", a.id, b.id, d)
			c.cutOneWay(a.id, b.id, 1)
			s.later(d, func() { c.cutOneWay(a.id, b.id, -1) })
		}
	case 6, 7: // a crash, often of the Elector or the Primary
		x := s.pickRole()
		if x.isAlive() {
			s.note("crash %s, restart after %v", x.id, d)
			x.crash()
			s.later(d, x.boot)
		}
	case 8: // a stall (SIGSTOP), often of the Elector or the Primary
		x := s.pickRole()
		d = uniform(rng, 100*time.Millisecond, 8*time.Second)
		if x.isAlive() {
			s.note("stall %s for %v", x.id, d)
			x.freeze()
			s.later(d, x.resume)
		}
	case 9: // a slow path between two nodes
		a, b := s.pickRole(), s.pick()
		slow := uniform(rng, 100*time.Millisecond, 4*time.Second)
		if a != b {
			s.note("slow %s->%s by %v for %v", a.id, b.id, slow, d)
			c.w.setLink(a.id, b.id, func(l *link) { l.slow += slow })
			s.later(d, func() { c.w.setLink(a.id, b.id, func(l *link) { l.slow = max(0, l.slow-slow) }) })
		}
	case 10: // a slow bucket for one node
		x := s.pickRole()
		slow := uniform(rng, 100*time.Millisecond, 3*time.Second)
		s.note("slow the bucket for %s by %v for %v", x.id, slow, d)
		x.slowBucket(slow)
		s.later(d, func() { x.slowBucket(-slow) })
	case 11: // the bucket unreachable for everyone
		d = uniform(rng, 500*time.Millisecond, 8*time.Second)
		fail := uniform(rng, 10*time.Millisecond, 2*time.Second)
		s.note("bucket down for %v", d)
		for _, x := range c.nodes {
			x.cutBucket(1, fail)
		}
		s.later(d, func() {
			for _, x := range c.nodes {
				x.cutBucket(-1, 0)
			}
		})
	}
	c.w.after(uniform(rng, 500*time.Millisecond, 6*time.Second), s.step)
}

// healAll ends every fault: links, the bucket, stalls and crashes.
func (s *chaosSchedule) healAll() {
	s.gen++
	c := s.c
	s.note("heal everything")
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				c.w.setLink(a.id, b.id, func(l *link) { l.cuts, l.slow = 0, 0 })
			}
		}
		a.mu.Lock()
		a.bucket = bucketState{}
		a.mu.Unlock()
		a.releaseHeldAndRecord()
		a.boot()
	}
}

// runChaos runs one seed and checks every invariant.
func runChaos(seed uint64, o chaosOpts, trace bool) (res chaosResult) {
	if o.chaos == 0 {
		o.chaos = 90 * time.Second
	}
	if o.settleLimit == 0 {
		o.settleLimit = 30 * time.Second
	}
	c, rng := buildChaos(seed, trace)
	res.c = c
	res.desc = fmt.Sprintf("%d nodes, quorum %d, lock lease %v, handshake %v, deregistration %v, starting up to %v, rates",
		len(c.nodes), c.cfg.Quorum, c.cfg.LockLease, c.cfg.HandshakeTimeout, c.cfg.Deregistration, c.cfg.StartingDelay)
	for _, n := range c.nodes {
		res.desc += fmt.Sprintf(" %d‰", n.clk.rate)
	}
	defer func() {
		if r := recover(); r != nil {
			res.err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
		c.closeAll()
		res.steps = c.w.steps
	}()
	warm := 15 * time.Second
	s := &chaosSchedule{c: c, rng: rng, end: warm + o.chaos}
	c.w.after(warm, s.step)
	c.w.run(warm+o.chaos, nil)
	s.healAll()
	took, err := c.settle(o.settleLimit, 250*time.Millisecond)
	if err == nil {
		// Settled means settled: nothing moves for a while afterwards.
		c.w.run(c.w.Now()+10*time.Second, nil)
		if why := c.settledReason(); why != "" {
			err = fmt.Errorf("settled after the faults healed, then not: %s", why)
		}
	}
	res.settled = took
	rerr := c.rec.check()
	switch {
	case rerr != nil && err != nil:
		res.err = fmt.Errorf("%v\n%v", rerr, err)
	case rerr != nil:
		res.err = rerr
	default:
		res.err = err
	}
	if res.err != nil {
		res.err = fmt.Errorf("%w\nfaults:\n%s", res.err, joinLines(s.log))
	}
	c.rec.mu.Lock()
	res.electors, res.promoted, res.stale = len(c.rec.electors), len(c.rec.promotions), c.rec.staleRejected
	res.stalePromotions = c.rec.stalePromotions
	c.rec.mu.Unlock()
	return res
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}

func (n *simNode) cutBucket(by int, failAfter time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.bucket.cuts = max(0, n.bucket.cuts+by)
	if by > 0 {
		n.bucket.failAfter = failAfter
	}
}

func (n *simNode) slowBucket(by time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.bucket.slow = max(0, n.bucket.slow+by)
}

func (n *simNode) releaseHeldAndRecord() {
	if n.releaseHeld() {
		n.c.rec.frozen(n, false)
	}
}

// seedsToRun lists the seeds of this run.
func seedsToRun() []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	seeds := make([]uint64, seedCount())
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// Partitions (from the Elector, from the bucket, from both, one way),
// crashes and stalls of the Elector and the Primary, slow links and a slow
// or absent bucket, on clocks with offsets and rates: never two Electors
// acting at once, never two Primaries with valid leases at once, primary
// terms taken up once each and in order, no view going back to an older
// Elector; and once the faults heal, one Elector and one Primary that
// every node knows, every node Healthy again by itself.
func TestChaos(t *testing.T) {
	seeds := seedsToRun()
	trace := *flagSeed != 0 || *flagTrace
	var mu sync.Mutex
	var steps, stale, promoted, stalePromotions int
	var slowest time.Duration
	t.Run("seeds", func(t *testing.T) {
		for _, seed := range seeds {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					r := runChaos(seed, chaosOpts{}, trace)
					if r.err != nil {
						msg := fmt.Sprintf("seed %d (%s): %v\nrerun: go test ./internal/clustersim -run 'TestChaos$' -clustersim.seed=%d -count=1", seed, r.desc, r.err, seed)
						if trace {
							msg += "\ntrace:\n" + r.c.w.dump()
						}
						t.Error(msg)
					} else if *flagTrace {
						t.Log(r.c.w.dump())
					}
					mu.Lock()
					defer mu.Unlock()
					steps += r.steps
					stale += r.stale
					stalePromotions += r.stalePromotions
					promoted += r.promoted
					slowest = max(slowest, r.settled)
				})
			})
		}
	})
	t.Logf("%d seeds, %d events; %d promotions (%d at a term below one taken up before); %d stale states rejected by views; settled within %v at most after the faults healed",
		len(seeds), steps, promoted, stalePromotions, stale, slowest)
}
