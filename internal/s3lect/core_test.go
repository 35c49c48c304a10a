package s3lect

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/objstore"
)

const (
	lease = 15 * time.Second
	renew = 5 * time.Second
	poll  = time.Second
)

var unit = simClock{rate: 1000}

func testParams(id string) params {
	return params{
		nodeID:   id,
		addr:     id + ":2380",
		lease:    lease,
		renew:    renew,
		poll:     poll,
		validity: time.Duration(float64(lease) * HolderFraction),
	}
}

// lockData encodes a valid lock body.
func lockData(holder string, term, counter uint64, released bool) []byte {
	return lockBody{Version: 1, HolderID: holder, HolderAddr: holder + ":2380", Term: term,
		LeaseMS: lease.Milliseconds(), Counter: counter, Released: released, WrittenAt: epoch}.encode()
}

// Rule 2 (no flapping) and rule 5 (steady state): one node acquires an empty
// bucket, later nodes never take the live lock over, across many leases, and
// nodes that hear from the holder read the bucket only once.
func TestAcquireEmptyThenOthersNeverSteal(t *testing.T) {
	for _, tier2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "polling", true: "observed"}[tier2], func(t *testing.T) {
			w := newWorld(1, faults{fastMax: 200 * time.Millisecond})
			n1 := w.addNode("n1", simClock{rate: 1000}, nil)
			n2 := w.addNode("n2", simClock{offset: time.Hour, rate: 1100}, nil)
			n3 := w.addNode("n3", simClock{offset: -time.Hour, rate: 900}, nil)
			if tier2 {
				w.heartbeats(500*time.Millisecond, 100*time.Millisecond)
			}
			n1.start()
			w.after(time.Second, n2.start)
			w.after(2*time.Second, n3.start)
			w.runUntil(20 * lease)

			if err := w.checkSafety(); err != nil {
				t.Fatal(err)
			}
			if len(w.intervals) != 1 || w.intervals[0].node != "n1" || !w.intervals[0].open || w.intervals[0].term != 1 {
				t.Fatalf("leaderships = %+v, want n1 term 1 throughout", w.intervals)
			}
			for _, n := range []*simNode{n2, n3} {
				if n.ops[opCreate]+n.ops[opTakeover] != 0 {
					t.Errorf("%s tried to acquire a live lock: %v", n.id, n.ops)
				}
				if n.c.shown.NodeID != "n1" || !n.c.shownOK {
					t.Errorf("%s shows holder %+v ok=%v", n.id, n.c.shown, n.c.shownOK)
				}
				reads := n.ops[opRead]
				if tier2 && reads != 1 {
					t.Errorf("%s read the bucket %d times while hearing from the holder, want 1 (at start)", n.id, reads)
				}
				if !tier2 && reads < 150 {
					t.Errorf("%s read the bucket only %d times without tier-2 evidence; it should poll every second", n.id, reads)
				}
			}
			if n1.ops[opRead] != 1 {
				t.Errorf("holder n1 read %d times, want only its start read", n1.ops[opRead])
			}
			b, _ := w.body()
			if b.HolderID != "n1" || b.Term != 1 || b.Counter < 55 {
				t.Errorf("lock = %+v, want n1 term 1 renewed every 5 s", b)
			}
		})
	}
}

// Rule 1: a crashed holder's lock is taken over only a whole lease after
// the observer first saw its last version, on the observer's own clock,
// whatever its offset and rate, and with the next term.
func TestCrashedHolderTakenOverOnlyAfterLeaseOnObserverClock(t *testing.T) {
	for _, obs := range []simClock{{rate: 1000}, {offset: -48 * time.Hour, rate: 800}, {offset: 3 * time.Hour, rate: 1250}} {
		for _, tier2 := range []bool{false, true} {
			w := newWorld(7, faults{fastMax: 300 * time.Millisecond})
			n1 := w.addNode("n1", unit, nil)
			n2 := w.addNode("n2", obs, nil)
			if tier2 {
				w.heartbeats(500*time.Millisecond, 200*time.Millisecond)
			}
			n1.start()
			w.after(time.Second, n2.start)
			crashAt := 47*time.Second + 300*time.Millisecond
			w.at(crashAt, n1.crash)
			w.runUntil(crashAt + 3*lease)
			if err := w.checkSafety(); err != nil {
				t.Fatal(err)
			}
			if len(w.intervals) != 2 || w.intervals[1].node != "n2" || w.intervals[1].term != 2 {
				t.Fatalf("clock %+v tier2=%v: leaderships %+v, want n1 then n2 at term 2", obs, tier2, w.intervals)
			}
			sentLocal := n2.firstSent[opTakeover]
			// n2 cannot have seen n1's last write before it landed; the
			// takeover went out at least a lease after that on n2's clock.
			var last landing
			for _, ld := range w.landings {
				if ld.who == "n1" {
					last = ld
				}
			}
			if last.at == 0 || last.at > crashAt+time.Second {
				t.Fatalf("n1's last write landed at %v", last.at)
			}
			if d := sentLocal.Sub(n2.clk.local(last.at)); d < lease {
				t.Errorf("clock %+v tier2=%v: takeover sent %v after n1's last write landed (n2's clock), want >= %v",
					obs, tier2, d, lease)
			}
			// And it is not much later: at most a lease after the crash
			// (plus a poll and store delays), on n2's clock.
			if late := sentLocal.Sub(n2.clk.local(crashAt)); late > lease+poll+2*time.Second {
				t.Errorf("clock %+v tier2=%v: takeover %v after the crash on n2's clock, want about one lease", obs, tier2, late)
			}
		}
	}
}

// Rule 1 at the boundary, on one core: staleness counts from this node's
// first sighting of the ETag on its own clock; the writer's timestamp, an
// Observed report and a changed ETag are handled as the rule says.
func TestStalenessCountsFromOwnFirstSighting(t *testing.T) {
	t0 := epoch.Add(time.Hour)
	read := func(c *core, at time.Time, data []byte, etag string) {
		t.Helper()
		o := c.next(at)
		if o == nil || o.kind != opRead {
			t.Fatalf("at %v: next = %+v, want a read", at.Sub(t0), o)
		}
		c.done(at, result{data: data, etag: etag})
	}
	expectNoWrite := func(c *core, at time.Time) {
		t.Helper()
		if o := c.next(at); o != nil && o.kind != opRead {
			t.Fatalf("at %v: next = %s, want no write", at.Sub(t0), o.kind)
		} else if o != nil {
			c.done(at, result{err: errSim}) // keep the read from masking later decisions
		}
	}
	expectTakeover := func(c *core, at time.Time, etag string, term uint64) {
		t.Helper()
		o := c.next(at)
		if o == nil || o.kind != opTakeover || o.etag != etag || o.body.Term != term {
			t.Fatalf("at %v: next = %+v, want takeover of %s at term %d", at.Sub(t0), o, etag, term)
		}
	}

	t.Run("writer timestamp ignored", func(t *testing.T) {
		c := newCore(testParams("n2"), nil)
		b := lockBody{Version: 1, HolderID: "n1", Term: 3, LeaseMS: 15000, Counter: 9,
			WrittenAt: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
		read(c, t0, b.encode(), "e9")
		expectNoWrite(c, t0.Add(lease-time.Nanosecond))
		expectTakeover(c, t0.Add(lease), "e9", 4)
	})
	t.Run("new etag resets the count", func(t *testing.T) {
		c := newCore(testParams("n2"), nil)
		read(c, t0, lockData("n1", 3, 9, false), "e9")
		read(c, t0.Add(10*time.Second), lockData("n1", 3, 10, false), "e10")
		expectNoWrite(c, t0.Add(lease))
		expectNoWrite(c, t0.Add(10*time.Second+lease-time.Nanosecond))
		expectTakeover(c, t0.Add(10*time.Second+lease), "e10", 4)
	})
	t.Run("observed counter is a first sighting", func(t *testing.T) {
		c := newCore(testParams("n2"), nil)
		read(c, t0, lockData("n1", 3, 9, false), "e9")
		c.observed(t0.Add(2*time.Second), Holder{NodeID: "n1", Term: 3, Counter: 10, LeaseMillis: 15000})
		// The evidence holds reads back for 2 Renew from the sighting.
		if o := c.next(t0.Add(2*time.Second + 2*renew - time.Nanosecond)); o != nil {
			t.Fatalf("read %s while the evidence is fresh", o.kind)
		}
		read(c, t0.Add(2*time.Second+2*renew), lockData("n1", 3, 10, false), "e10")
		expectNoWrite(c, t0.Add(2*time.Second+lease-time.Nanosecond))
		expectTakeover(c, t0.Add(2*time.Second+lease), "e10", 4)
	})
	t.Run("holder's longer lease wins", func(t *testing.T) {
		c := newCore(testParams("n2"), nil)
		b := lockBody{Version: 1, HolderID: "n1", Term: 3, LeaseMS: 30000, Counter: 9}
		read(c, t0, b.encode(), "e9")
		expectNoWrite(c, t0.Add(30*time.Second-time.Nanosecond))
		expectTakeover(c, t0.Add(30*time.Second), "e9", 4)
	})
	t.Run("released is taken at once", func(t *testing.T) {
		c := newCore(testParams("n2"), nil)
		read(c, t0, lockData("n1", 3, 9, true), "e9")
		expectTakeover(c, t0, "e9", 4)
	})
	t.Run("observer never writes", func(t *testing.T) {
		p := testParams("n2")
		p.observer = true
		c := newCore(p, nil)
		read(c, t0, lockData("n1", 3, 9, true), "e9")
		expectNoWrite(c, t0.Add(10*lease))
		c2 := newCore(p, nil)
		if o := c2.next(t0); o == nil || o.kind != opRead {
			t.Fatal("observer did not read")
		}
		c2.done(t0, result{err: objstore.ErrNotFound})
		expectNoWrite(c2, t0.Add(10*lease))
	})
}

// Rule 3 and rule 1 together: when the holder cannot reach the store, its
// leadership ends by its own validity deadline, and an observer whose clock
// runs up to 25% faster takes over only afterwards.
func TestRenewFailuresEndLeadershipBeforeTakeover(t *testing.T) {
	for _, pair := range [][2]int64{{1000, 1250}, {800, 1000}, {1000, 1000}, {1250, 1000}} {
		w := newWorld(3, faults{fastMax: 50 * time.Millisecond})
		n1 := w.addNode("n1", simClock{rate: pair[0]}, nil)
		n2 := w.addNode("n2", simClock{offset: 5 * time.Minute, rate: pair[1]}, nil)
		w.heartbeats(500*time.Millisecond, 50*time.Millisecond)
		n1.start()
		w.after(time.Second, n2.start)
		cut := 31 * time.Second
		w.at(cut, func() { w.partitioned["n1"] = time.Hour })
		w.runUntil(cut)
		h := n1.c.hold
		if h == nil {
			t.Fatalf("rates %v: n1 is not holding at the cut", pair)
		}
		deadline := n1.clk.trueAt(h.validUntil)
		renewsBefore := n1.ops[opRenew]
		w.runUntil(cut + 3*lease)
		if err := w.checkSafety(); err != nil {
			t.Fatalf("rates %v: %v", pair, err)
		}
		if len(w.intervals) != 2 {
			t.Fatalf("rates %v: leaderships %+v, want n1 then n2", pair, w.intervals)
		}
		first, second := w.intervals[0], w.intervals[1]
		if first.node != "n1" || first.end != deadline {
			t.Errorf("rates %v: n1's leadership ended at %v, want its validity deadline %v", pair, first.end, deadline)
		}
		if second.node != "n2" || second.term != first.term+1 || second.start < first.end {
			t.Errorf("rates %v: second leadership %+v after %+v", pair, second, first)
		}
		if n1.ops[opRenew]-renewsBefore < 3 {
			t.Errorf("rates %v: n1 made %d renew attempts during the outage, want retries", pair, n1.ops[opRenew]-renewsBefore)
		}
	}
}

// Rule 4: a resigning holder stops acting first, writes the released
// marker, another node takes over at once when told to look, and the
// resigner stays out for one lease.
func TestResignHandsOverAtOnce(t *testing.T) {
	w := newWorld(5, faults{fastMax: 100 * time.Millisecond})
	n1 := w.addNode("n1", unit, nil)
	n2 := w.addNode("n2", simClock{rate: 1200}, nil)
	n3 := w.addNode("n3", simClock{rate: 900}, nil)
	w.heartbeats(500*time.Millisecond, 100*time.Millisecond)
	n1.start()
	w.after(time.Second, n2.start)
	w.after(time.Second, n3.start)
	w.runUntil(40 * time.Second)
	if w.leader() != n1 {
		t.Fatalf("leader %v, want n1", w.leader())
	}
	n1.resign()
	if n1.lead != nil {
		t.Fatal("n1 still leads right after Resign: its leadership must end before the marker is written")
	}
	if n1.c.inflight == nil || n1.c.inflight.kind != opRelease {
		t.Fatalf("n1 is not writing the released marker: %+v", n1.c.inflight)
	}
	w.after(50*time.Millisecond, n2.suspect)
	w.runUntil(41 * time.Second)
	if len(n1.resigned) != 1 || n1.resigned[0] != nil {
		t.Fatalf("resign outcome %v, want one nil", n1.resigned)
	}
	l := w.leader()
	if l != n2 || l.lead.term != 2 {
		t.Fatalf("leader one second after resigning: %v, want n2 at term 2", l)
	}
	w.runUntil(5 * lease)
	if err := w.checkSafety(); err != nil {
		t.Fatal(err)
	}
	if len(w.intervals) != 2 {
		t.Fatalf("leaderships %+v, want n1 then n2 only", w.intervals)
	}
}

// Rule 4: the resigner does not acquire again for one lease, then does.
func TestResignerStaysOutForOneLease(t *testing.T) {
	w := newWorld(5, faults{})
	n1 := w.addNode("n1", unit, nil)
	obs := w.addNode("obs", unit, func(p *params) { p.observer = true })
	n1.start()
	obs.start()
	w.runUntil(20 * time.Second)
	resignAt := w.now
	n1.resign()
	w.runUntil(resignAt + lease - time.Nanosecond)
	if len(w.intervals) != 1 {
		t.Fatalf("leaderships %+v: n1 acquired again within a lease of resigning", w.intervals)
	}
	if b, _ := w.body(); !b.Released {
		t.Fatalf("lock %+v is not released", b)
	}
	w.runUntil(resignAt + lease + 2*poll)
	if len(w.intervals) != 2 || w.intervals[1].node != "n1" || w.intervals[1].term != 2 || w.intervals[1].start < resignAt+lease {
		t.Fatalf("leaderships %+v, want n1 again at term 2 once the lease passed", w.intervals)
	}
	if obs.ops[opCreate]+obs.ops[opTakeover] != 0 {
		t.Fatal("an observer wrote the lock")
	}
}

// Two observers that find the same stale lock at the same moment both try
// to take it over; the CAS lets exactly one win.
func TestTakeoverRaceHasOneWinner(t *testing.T) {
	w := newWorld(9, faults{})
	n1 := w.addNode("n1", unit, nil)
	n2 := w.addNode("n2", unit, nil)
	n3 := w.addNode("n3", unit, nil)
	n1.start()
	n2.start()
	n3.start()
	w.runUntil(12 * time.Second)
	n1.crash()
	w.runUntil(12*time.Second + 2*lease)
	if n2.ops[opTakeover] == 0 || n3.ops[opTakeover] == 0 {
		t.Fatalf("takeovers n2=%d n3=%d: both should have tried", n2.ops[opTakeover], n3.ops[opTakeover])
	}
	if err := w.checkSafety(); err != nil {
		t.Fatal(err)
	}
	if len(w.intervals) != 2 || w.intervals[1].term != 2 {
		t.Fatalf("leaderships %+v, want exactly one winner at term 2", w.intervals)
	}
	winner, loser := w.node(w.intervals[1].node), n2
	if winner == n2 {
		loser = n3
	}
	if loser.lead != nil || loser.c.shown.NodeID != winner.id {
		t.Fatalf("loser %s shows %+v, want the winner %s", loser.id, loser.c.shown, winner.id)
	}
}

// Rule 5: evidence counts only while the counter changes. A holder that is
// alive but cannot renew keeps answering tier 2 with the same counter; the
// others must go back to the bucket and take over.
func TestStaleCounterIsNoEvidence(t *testing.T) {
	w := newWorld(11, faults{fastMax: 50 * time.Millisecond})
	n1 := w.addNode("n1", unit, nil)
	n2 := w.addNode("n2", unit, nil)
	n1.start()
	w.after(time.Second, n2.start)
	// Tier 2 reports n1's last write every 200 ms for as long as n1 runs,
	// even after it stopped leading.
	var last Holder
	var beat func()
	beat = func() {
		if h, ok := n1.c.held(); ok {
			last = h
		}
		if last.Counter != 0 {
			w.observe(n2, last, 0)
		}
		w.after(200*time.Millisecond, beat)
	}
	w.after(0, beat)
	w.runUntil(30 * time.Second)
	readsBefore := n2.ops[opRead]
	w.partitioned["n1"] = time.Hour
	w.runUntil(30*time.Second + 2*lease)
	if err := w.checkSafety(); err != nil {
		t.Fatal(err)
	}
	if l := w.leader(); l != n2 {
		t.Fatalf("leader %v, want n2 after n1 stopped renewing", l)
	}
	if n2.ops[opRead] == readsBefore {
		t.Fatal("n2 never read the bucket though the counter stopped changing")
	}
}

// Rule 5: Suspect forces a read even while the evidence is fresh, and
// polling continues until a holder that wrote since is seen.
func TestSuspectForcesReads(t *testing.T) {
	c := newCore(testParams("n2"), nil)
	t0 := epoch
	o := c.next(t0)
	c.done(t0, result{data: lockData("n1", 1, 4, false), etag: "e4"})
	if o.kind != opRead {
		t.Fatal("no start read")
	}
	c.observed(t0.Add(time.Second), Holder{NodeID: "n1", Term: 1, Counter: 5})
	if o := c.next(t0.Add(2 * time.Second)); o != nil {
		t.Fatalf("%s with fresh evidence", o.kind)
	}
	c.suspected(t0.Add(2 * time.Second))
	for i := range 3 {
		at := t0.Add(2*time.Second + time.Duration(i)*poll)
		o := c.next(at)
		if o == nil || o.kind != opRead {
			t.Fatalf("poll %d after Suspect: next = %+v, want a read", i, o)
		}
		c.done(at, result{data: lockData("n1", 1, 5, false), etag: "e5"}) // unchanged since the suspicion
	}
	at := t0.Add(5 * time.Second)
	if o := c.next(at); o == nil || o.kind != opRead {
		t.Fatal("stopped polling before a changed counter was seen")
	}
	c.done(at, result{data: lockData("n1", 1, 6, false), etag: "e6"})
	c.observed(at, Holder{NodeID: "n1", Term: 1, Counter: 6})
	if o := c.next(at.Add(poll)); o != nil {
		t.Fatalf("%s after the holder proved alive and evidence is fresh", o.kind)
	}
}

// Rule 6: a corrupt lock object is logged naming the key and replaced by
// CAS once it has not changed for a lease; MinTerm keeps the term above
// any term seen elsewhere.
func TestCorruptLockReplacedAfterLease(t *testing.T) {
	for name, data := range map[string][]byte{
		"not json":      []byte("{holder: n1"),
		"wrong version": []byte(`{"version":2,"holder_id":"n1","term":5,"counter":3,"lease_ms":15000}`),
		"no holder":     []byte(`{"version":1,"term":5,"counter":3}`),
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			p := testParams("n2")
			p.minTerm = func() uint64 { return 41 }
			c := newCore(p, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}))
			t0 := epoch
			c.next(t0)
			c.done(t0, result{data: data, etag: "bad1"})
			if !strings.Contains(logs.String(), "[ERROR]") || !strings.Contains(logs.String(), Key) {
				t.Fatalf("no error naming %s logged:\n%s", Key, logs.String())
			}
			if c.shownOK {
				t.Fatal("a corrupt lock shows a live holder")
			}
			// Polled again unchanged: logged once only.
			o := c.next(t0.Add(poll))
			c.done(t0.Add(poll), result{data: data, etag: "bad1"})
			if o.kind != opRead || strings.Count(logs.String(), "[ERROR]") != 1 {
				t.Fatalf("corrupt object logged %d times", strings.Count(logs.String(), "[ERROR]"))
			}
			before := t0.Add(lease - time.Nanosecond)
			if o := c.next(before); o != nil && o.kind != opRead {
				t.Fatalf("%s before the corrupt object was a lease old", o.kind)
			} else if o != nil {
				c.done(before, result{data: data, etag: "bad1"})
			}
			o = c.next(t0.Add(lease))
			if o == nil || o.kind != opTakeover || o.etag != "bad1" || o.body.Term != 42 {
				t.Fatalf("next = %+v, want takeover of bad1 at term 42", o)
			}
			c.done(t0.Add(lease), result{etag: "good"})
			if c.hold == nil || len(c.effects()) == 0 {
				t.Fatal("takeover of the corrupt lock did not lead")
			}
		})
	}
}

// A fresh create uses max(1, MinTerm()+1), also after the lock object was
// deleted from under a holder.
func TestCreateTermAboveMinTerm(t *testing.T) {
	w := newWorld(13, faults{})
	n1 := w.addNode("n1", unit, nil)
	n1.useMinTerm = true
	n1.persistedTerm = 6
	n1.start()
	w.runUntil(time.Second)
	if l := w.leader(); l != n1 || l.lead.term != 7 {
		t.Fatalf("leader %+v, want n1 at term 7", w.intervals)
	}
	// An operator deletes the lock; n1's next renew is refused.
	if err := w.store.Delete(context.Background(), Key); err != nil {
		t.Fatal(err)
	}
	w.runUntil(10 * time.Second)
	if err := w.checkSafety(); err != nil {
		t.Fatal(err)
	}
	if len(w.intervals) != 2 || w.intervals[1].term != 8 {
		t.Fatalf("leaderships %+v, want n1 at 7, then 8 after the delete", w.intervals)
	}
	b, _ := w.body()
	if b.Term != 8 || b.Counter <= 2 {
		t.Fatalf("recreated lock %+v, want term 8 and a counter above the deleted one's", b)
	}
}

// Rule 5: a node reads the bucket once at start even if tier 2 spoke first.
func TestStartReadDespiteEarlyEvidence(t *testing.T) {
	c := newCore(testParams("n2"), nil)
	c.observed(epoch, Holder{NodeID: "n1", Term: 2, Counter: 7})
	if o := c.next(epoch); o == nil || o.kind != opRead {
		t.Fatalf("next = %+v, want the start read", o)
	}
	c.done(epoch, result{data: lockData("n1", 2, 7, false), etag: "e7"})
	if o := c.next(epoch.Add(poll)); o != nil {
		t.Fatalf("next = %s while the evidence is fresh, want nothing", o.kind)
	}
	if c.view.etag != "e7" || !c.view.firstSeen.Equal(epoch) {
		t.Fatalf("view %+v: the read should attach its ETag to the observed write", c.view)
	}
}

func TestLockBodyRoundTripAndChecks(t *testing.T) {
	b := lockBody{Version: 1, HolderID: "n1", HolderAddr: "10.0.0.1:2380", Term: 7, LeaseMS: 15000,
		Counter: 1234, WrittenAt: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)}
	data := b.encode()
	want := `{"version":1,"holder_id":"n1","holder_addr":"10.0.0.1:2380","term":7,"lease_ms":15000,"counter":1234,"released":false,"written_at":"2026-11-25T10:00:00Z"}`
	if string(data) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", data, want)
	}
	got, err := parseLock(data)
	if err != nil || got != b {
		t.Fatalf("parse = %+v, %v", got, err)
	}
	for _, bad := range []string{
		``, `[]`, `{"version":1}`,
		`{"version":0,"holder_id":"n1","term":1,"counter":1}`,
		`{"version":1,"holder_id":"","term":1,"counter":1}`,
		`{"version":1,"holder_id":"n1","term":0,"counter":1}`,
		`{"version":1,"holder_id":"n1","term":1,"counter":0}`,
		`{"version":1,"holder_id":"n1","term":1,"counter":1,"lease_ms":-5}`,
	} {
		if _, err := parseLock([]byte(bad)); err == nil {
			t.Errorf("parseLock(%q) accepted a bad lock", bad)
		}
	}
}

// Rule 6: an unreachable store makes nobody holder; once it is back, one
// node acquires.
func TestUnreachableStoreElectsNobody(t *testing.T) {
	w := newWorld(17, faults{fastMax: 100 * time.Millisecond})
	for _, id := range []string{"n1", "n2", "n3"} {
		n := w.addNode(id, unit, nil)
		w.partitioned[id] = 3 * lease
		n.start()
	}
	w.runUntil(3 * lease)
	if len(w.intervals) != 0 {
		t.Fatalf("leaderships %+v without a store", w.intervals)
	}
	w.runUntil(3*lease + 2*poll)
	if err := w.checkSafety(); err != nil {
		t.Fatal(err)
	}
	if len(w.intervals) != 1 || w.intervals[0].term != 1 {
		t.Fatalf("leaderships %+v once the store is back, want one at term 1", w.intervals)
	}
}

// A suspicion during a read that then fails does not turn into a loop of
// reads against a failing store: it retries every Poll.
func TestFailingReadsRetryEveryPoll(t *testing.T) {
	c := newCore(testParams("n2"), nil)
	o := c.next(epoch)
	c.suspected(epoch.Add(time.Millisecond))
	c.done(epoch.Add(2*time.Millisecond), result{err: errSim})
	if o.kind != opRead {
		t.Fatal("no start read")
	}
	if o := c.next(epoch.Add(2 * time.Millisecond)); o != nil {
		t.Fatalf("%s right after a failed read", o.kind)
	}
	if o := c.next(epoch.Add(2*time.Millisecond + poll)); o == nil || o.kind != opRead {
		t.Fatalf("next = %+v a poll after the failed read, want a read", o)
	}
}

// Rule 2's exception: a node restarted while its lock still names it
// (same id and address) takes the lock back at once, at the next term,
// instead of leaving the cluster without an Elector for a lease; a second
// loss in the same process follows the ordinary rules again.
func TestRestartedHolderRetakesOwnLockAtOnce(t *testing.T) {
	w := newWorld(3, faults{fastMax: 100 * time.Millisecond})
	n1 := w.addNode("n1", unit, nil)
	n2 := w.addNode("n2", unit, nil)
	n1.start()
	w.after(time.Second, n2.start)
	w.at(20*time.Second, n1.crash)
	restart := 20*time.Second + 500*time.Millisecond
	w.at(restart, n1.start)
	w.runUntil(restart + 5*time.Second)
	if err := w.checkSafety(); err != nil {
		t.Fatal(err)
	}
	if len(w.intervals) != 2 || w.intervals[1].node != "n1" || w.intervals[1].term != 2 {
		t.Fatalf("leaderships %+v, want n1 at term 1, then n1 again at term 2 right after its restart", w.intervals)
	}
	if d := w.intervals[1].start - restart; d > 2*time.Second {
		t.Fatalf("the restarted node took its lock back %v after it started, want at once", d)
	}
	if n2.ops[opCreate]+n2.ops[opTakeover] != 0 {
		t.Fatalf("n2 tried to acquire: %v", n2.ops)
	}
}
