package s3lect

import (
	"flag"
	"fmt"
	"runtime/debug"
	"testing"
	"time"
)

var (
	chaosSeeds = flag.Int("s3lect.seeds", 200, "seeds for the chaos simulation")
	chaosSeed  = flag.Uint64("s3lect.seed", 0, "run only this chaos seed (0: all), with a trace on failure")
)

// chaosOpts varies the simulation for the tests that show the safety check
// can fail.
type chaosOpts struct {
	// independentRates draws each clock rate from [0.8, 1.25] of true time
	// on its own, so two clocks may differ by up to 1.5625x, beyond what
	// HolderFraction covers. Otherwise a seed picks a base b in [0.8, 1.0]
	// and every rate lies in [b, 1.25b]: rates span 0.8-1.25 of true time
	// across seeds, and no clock runs more than 25% faster than another.
	independentRates bool
	// validity overrides Lease*HolderFraction.
	validity time.Duration
	length   time.Duration
}

type chaosResult struct {
	w            *world
	err          error
	acquisitions int
	leadShare    float64
	rates        []int64
}

// runChaos runs one seeded simulation: 3 to 5 nodes with their own clock
// offsets and rates, a store that fails, loses answers and delays calls (a
// few by longer than a lease), a tier 2 that drops and delays reports, and
// random crashes and restarts, partitions from the store, store outages,
// resignations and suspicions.
func runChaos(seed uint64, o chaosOpts, trace bool) chaosResult {
	if o.length == 0 {
		o.length = 10 * time.Minute
	}
	w := newWorld(seed, faults{
		failBefore:   0.05,
		failAfter:    0.03,
		fastMax:      150 * time.Millisecond,
		medium:       0.05,
		mediumMax:    8 * time.Second,
		slow:         0.01,
		slowMax:      20 * time.Second,
		observedDrop: 0.1,
	})
	w.trace = trace
	rng := w.rng
	n := 3 + rng.IntN(3)
	base := 800 + rng.Int64N(201)
	var res chaosResult
	for i := range n {
		rate := base + rng.Int64N(base/4+1)
		if o.independentRates {
			rate = 800 + rng.Int64N(451)
		}
		res.rates = append(res.rates, rate)
		clk := simClock{offset: time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour, rate: rate}
		observer := n >= 4 && i == n-1 && rng.IntN(2) == 0 // at most one, among at least three candidates
		// Nodes may be configured with different leases; observers honour
		// the holder's if it is longer than theirs.
		nodeLease := []time.Duration{10 * time.Second, 15 * time.Second, 20 * time.Second}[rng.IntN(3)]
		node := w.addNode(fmt.Sprintf("n%d", i+1), clk, func(p *params) {
			p.lease, p.renew = nodeLease, nodeLease/3
			p.validity = time.Duration(float64(nodeLease) * HolderFraction)
			p.observer = observer
			if o.validity != 0 {
				p.validity = o.validity
			}
		})
		node.useMinTerm = rng.IntN(2) == 0
		w.after(time.Duration(rng.Int64N(int64(5*time.Second))), node.start)
	}
	w.heartbeats(500*time.Millisecond, time.Second)

	uniform := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	pick := func() *simNode { return w.nodes[rng.IntN(len(w.nodes))] }
	var chaos func()
	chaos = func() {
		switch k := rng.IntN(10); {
		case k < 2: // crash, restart later
			node := pick()
			if node.alive {
				node.crash()
				w.after(uniform(500*time.Millisecond, 40*time.Second), node.start)
			}
		case k < 4: // the leader resigns; tier 2 notices at some nodes
			if l := w.leader(); l != nil {
				l.resign()
				for _, m := range w.nodes {
					if m != l && rng.IntN(2) == 0 {
						w.after(uniform(0, 2*time.Second), m.suspect)
					}
				}
			}
		case k < 6: // a spurious suspicion
			w.after(0, pick().suspect)
		case k < 8: // one node, often the leader, loses the store
			node := pick()
			if l := w.leader(); l != nil && rng.IntN(2) == 0 {
				node = l
			}
			w.partitioned[node.id] = w.now + uniform(time.Second, 40*time.Second)
			w.logf("%s partitioned until %v", node.id, w.partitioned[node.id])
		case k < 9: // the store is down for everybody
			until := w.now + uniform(time.Second, 20*time.Second)
			w.logf("store down until %v", until)
			for _, m := range w.nodes {
				w.partitioned[m.id] = max(w.partitioned[m.id], until)
			}
		default: // the leader's machine stalls: it crashes right after a renew
			if l := w.leader(); l != nil && l.c.inflight != nil {
				w.after(0, l.crash)
				w.after(uniform(time.Second, 30*time.Second), l.start)
			}
		}
		w.after(uniform(time.Second, 30*time.Second), chaos)
	}
	w.after(20*time.Second, chaos)

	func() {
		defer func() {
			if r := recover(); r != nil {
				res.err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		w.runUntil(o.length)
	}()
	if res.err == nil {
		res.err = w.checkSafety()
	}
	res.w = w
	res.acquisitions = len(w.intervals)
	res.leadShare = float64(w.leadTime()) / float64(o.length)
	return res
}

// Clock skew, rate differences, crashes, store faults and resignations
// never give two Electors acting at once, terms grow with every
// acquisition, and no ETag is ever written twice.
func TestChaosNeverTwoElectors(t *testing.T) {
	seeds := make([]uint64, 0, *chaosSeeds)
	if *chaosSeed != 0 {
		seeds = append(seeds, *chaosSeed)
	} else {
		for i := range *chaosSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	var totalShare float64
	minAcq, minShare := 1<<30, 1.0
	for _, seed := range seeds {
		r := runChaos(seed, chaosOpts{}, *chaosSeed != 0)
		if r.err != nil {
			msg := fmt.Sprintf("seed %d (rerun with -s3lect.seed=%d for a trace), rates %v: %v", seed, seed, r.rates, r.err)
			if *chaosSeed != 0 {
				msg += "\n" + r.w.dump()
			}
			t.Fatal(msg)
		}
		// Liveness, loosely: the cluster has an Elector most of the time and
		// re-elects after the disruptions.
		if r.acquisitions < 3 || r.leadShare < 0.4 {
			t.Errorf("seed %d: %d acquisitions, an Elector %.0f%% of the time: the election got stuck",
				seed, r.acquisitions, 100*r.leadShare)
		}
		totalShare += r.leadShare
		minAcq = min(minAcq, r.acquisitions)
		minShare = min(minShare, r.leadShare)
	}
	t.Logf("%d seeds: an Elector %.0f%% of the time on average, %.0f%% at least; at least %d acquisitions per seed",
		len(seeds), 100*totalShare/float64(len(seeds)), 100*minShare, minAcq)
}

// findOverlap runs seeds until the safety check fails.
func findOverlap(t *testing.T, o chaosOpts) {
	t.Helper()
	for seed := uint64(1); seed <= uint64(*chaosSeeds); seed++ {
		if r := runChaos(seed, o, false); r.err != nil {
			t.Logf("seed %d, rates %v: %v", seed, r.rates, r.err)
			return
		}
	}
	t.Fatalf("no seed in %d produced an overlap: the safety check or the fault model is too weak", *chaosSeeds)
}

// The safety check can fail: with validity equal to the lease (no margin
// for clock rates), the same simulation finds two Electors at once.
func TestChaosCatchesFullLeaseValidity(t *testing.T) {
	findOverlap(t, chaosOpts{validity: lease})
}

// HolderFraction covers observer clocks up to 25% faster than the holder's,
// no more: with rates drawn independently from 0.8-1.25 of true time (up to
// 1.5625x apart) the simulation finds two Electors at once.
func TestChaosCatchesRatesBeyondHolderFraction(t *testing.T) {
	findOverlap(t, chaosOpts{independentRates: true})
}

// The chaos runs are deterministic: a seed reproduces its run exactly.
func TestChaosReproducible(t *testing.T) {
	a := runChaos(42, chaosOpts{length: 3 * time.Minute}, true)
	b := runChaos(42, chaosOpts{length: 3 * time.Minute}, true)
	if a.w.dump() != b.w.dump() || len(a.w.log) == 0 {
		t.Fatal("seed 42 ran differently twice")
	}
}
