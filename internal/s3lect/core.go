package s3lect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/objstore"
)

// The core is the whole election as a deterministic state machine: every
// method takes this node's clock reading and the outcome of the store call
// it asked for, and records what follows (store calls to make, leadership
// gained or lost, the holder as now known). It never reads a clock, calls
// the store or starts a goroutine; the driver in election.go does, and the
// tests drive many cores against one store on simulated clocks.

// params is the validated configuration the core works with.
type params struct {
	nodeID   string
	addr     string
	lease    time.Duration
	renew    time.Duration
	poll     time.Duration
	validity time.Duration // how long the holder may act after sending a write
	observer bool
	minTerm  func() uint64
}

func paramsOf(cfg Config) params {
	return params{
		nodeID:   cfg.NodeID,
		addr:     cfg.PeerAddr,
		lease:    cfg.Lease,
		renew:    cfg.Renew,
		poll:     cfg.Poll,
		validity: time.Duration(float64(cfg.Lease) * HolderFraction),
		observer: cfg.Observer,
		minTerm:  cfg.MinTerm,
	}
}

// evidenceFactor: a counter heard from the holder itself shows a live
// holder for this many Renew periods after this node first saw it. The
// holder writes a new counter every Renew, so a live holder keeps the
// evidence fresh; a counter that stops changing stops counting.
const evidenceFactor = 2

type viewKind uint8

const (
	// viewUnknown: nothing read yet, or a write of ours was refused or
	// may have landed, so the lock must be read before acting on it.
	viewUnknown viewKind = iota
	viewAbsent
	viewLock
	viewCorrupt
)

// lockView is one version of the lock object as this node knows it.
type lockView struct {
	kind viewKind
	// etag is empty when the version is known only from Observed.
	etag string
	body lockBody
	// firstSeen is this node's clock when it first saw this version.
	firstSeen time.Time
}

type opKind uint8

const (
	opRead opKind = iota + 1
	opCreate
	opTakeover
	opRenew
	opRelease
)

func (k opKind) String() string {
	switch k {
	case opRead:
		return "read"
	case opCreate:
		return "create"
	case opTakeover:
		return "take over"
	case opRenew:
		return "renew"
	case opRelease:
		return "release"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// op is a store call the core asks for. At most one is in flight.
type op struct {
	kind opKind
	// sent is this node's clock when the call was handed to the store.
	sent time.Time
	// deadline is when the driver gives up on the call.
	deadline time.Time
	// etag is the If-Match condition of takeover, renew and release.
	etag string
	body lockBody
	data []byte // body, encoded
}

// result is a store call's outcome: data and etag of a read, etag of a write.
type result struct {
	data []byte
	etag string
	err  error
}

type effectKind uint8

const (
	effLead     effectKind = iota + 1 // this node may act as Elector at term
	effLose                           // it may not any more: cancel first
	effView                           // the holder as now known
	effResigned                       // a Resign finished, with err
)

type effect struct {
	kind effectKind
	term uint64
	// holder and ok (effView): ok is false when no live holder is known.
	holder Holder
	ok     bool
	// notify (effView): who holds the lock changed, not just its counter.
	notify bool
	err    error
}

// holding is the state of the holder.
type holding struct {
	etag string
	body lockBody
	// seenAt is when the answer to the last successful write arrived.
	seenAt     time.Time
	validUntil time.Time
	nextRenew  time.Time
	// pending is the renewal being attempted; retries send it unchanged,
	// so at most one of them can land.
	pending  *lockBody
	failures int
}

// releasing is a resignation whose released marker is not written yet.
type releasing struct {
	etag string // If-Match for the marker
	body lockBody
	// waitRenew: a renew was in flight when resigning; the marker must
	// wait for its answer to know which ETag to match.
	waitRenew bool
	retryAt   time.Time
	giveUp    time.Time
	failures  int
	lastErr   error
}

type core struct {
	p   params
	log hclog.Logger

	view lockView
	// What was last reported through effView.
	shown      Holder
	shownOK    bool
	shownValid bool

	haveRead      bool // a read has been answered since start
	nextRead      time.Time
	evidenceUntil time.Time
	suspicious    bool
	suspectOf     uint64 // the counter known when Suspect was called

	maxCounter   uint64
	maxTerm      uint64
	holdOffUntil time.Time
	corruptETag  string // the corrupt object last logged

	hold     *holding
	release  *releasing
	inflight *op
	// triedAcquire: this process made an acquiring write; from then on it
	// follows the ordinary rules for its own lock too (ownLock).
	triedAcquire bool

	out []effect
}

func newCore(p params, log hclog.Logger) *core {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &core{p: p, log: log}
}

// effects returns and clears what the core decided since the last call.
func (c *core) effects() []effect {
	out := c.out
	c.out = nil
	return out
}

func (c *core) minTerm() uint64 {
	if c.p.minTerm == nil {
		return 0
	}
	return c.p.minTerm()
}

func (c *core) nextCounter() uint64 {
	c.maxCounter++
	return c.maxCounter
}

func (c *core) newBody(now time.Time, term uint64) lockBody {
	return lockBody{
		Version:    lockVersion,
		HolderID:   c.p.nodeID,
		HolderAddr: c.p.addr,
		Term:       term,
		LeaseMS:    c.p.lease.Milliseconds(),
		Counter:    c.nextCounter(),
		WrittenAt:  now.UTC().Truncate(time.Millisecond),
	}
}

// seen raises the highest term and counter this node knows of.
func (c *core) seen(b lockBody) {
	c.maxCounter = max(c.maxCounter, b.Counter)
	c.maxTerm = max(c.maxTerm, b.Term)
}

// tick is called whenever the clock may have passed a deadline, and first
// thing in every other entry point: a holder whose validity has run out
// loses before anything else happens.
func (c *core) tick(now time.Time) {
	if c.hold != nil && !now.Before(c.hold.validUntil) {
		c.lose(now, "validity ran out before a renew succeeded", false)
	}
	if r := c.release; r != nil && !now.Before(r.giveUp) && (c.inflight == nil || c.inflight.kind != opRelease) {
		c.endRelease(fmt.Errorf("release %s: gave up after one lease: %w", Key, r.lastErr))
	}
}

// lose ends this node's leadership. refused says someone else wrote the
// lock, so what this node last wrote is no longer the lock; otherwise this
// node watches its own last write go stale like anyone else's.
func (c *core) lose(now time.Time, reason string, refused bool) {
	h := c.hold
	c.hold = nil
	c.out = append(c.out, effect{kind: effLose, term: h.body.Term})
	c.log.Warn("lost the elector lock", "term", h.body.Term, "reason", reason)
	c.evidenceUntil = time.Time{}
	c.nextRead = now
	if refused {
		c.view = lockView{kind: viewUnknown}
		return
	}
	c.view = lockView{kind: viewLock, etag: h.etag, body: h.body, firstSeen: h.seenAt}
}

// next returns the store call to make now, if any; the caller makes it and
// reports its outcome through done.
func (c *core) next(now time.Time) *op {
	c.tick(now)
	if c.inflight != nil {
		return nil
	}
	var o *op
	switch {
	case c.release != nil:
		r := c.release
		if !r.waitRenew && !now.Before(r.retryAt) {
			o = &op{kind: opRelease, etag: r.etag, body: r.body, deadline: r.giveUp}
		}
	case c.hold != nil:
		h := c.hold
		if !now.Before(h.nextRenew) {
			if h.pending == nil {
				b := h.body
				b.Counter = c.nextCounter()
				b.WrittenAt = now.UTC().Truncate(time.Millisecond)
				h.pending = &b
			}
			o = &op{kind: opRenew, etag: h.etag, body: *h.pending, deadline: h.validUntil}
		}
	default:
		o = c.acquireOp(now)
		if o == nil && !now.Before(c.readAt()) {
			o = &op{kind: opRead}
		}
	}
	if o == nil {
		return nil
	}
	o.sent = now
	if o.deadline.IsZero() {
		o.deadline = now.Add(c.p.lease)
	}
	if o.kind != opRead {
		o.data = o.body.encode()
	}
	c.inflight = o
	return o
}

// acquireOp returns the write that acquires the lock, if this node may
// acquire it now: it is absent, released, or has not changed for a whole
// lease on this node's clock. A live lock is never taken.
func (c *core) acquireOp(now time.Time) *op {
	if c.p.observer || now.Before(c.holdOffUntil) {
		return nil
	}
	term := max(c.maxTerm, c.minTerm()) + 1
	switch c.view.kind {
	case viewAbsent:
		c.triedAcquire = true
		return &op{kind: opCreate, body: c.newBody(now, term)}
	case viewLock, viewCorrupt:
		if c.view.etag == "" {
			return nil // known only from Observed: read it for the ETag first
		}
		if (c.view.kind == viewLock && c.view.body.Released) || c.stale(now) || c.ownLock() {
			c.triedAcquire = true
			return &op{kind: opTakeover, etag: c.view.etag, body: c.newBody(now, term)}
		}
	}
	return nil
}

// ownLock reports whether the lock is held in this very node's name and
// address by a previous process of this node (it restarted): only before
// this process made any acquiring write of its own. Nobody else is acting on it (one process per node id and
// address: a second one cannot bind the address, and discovery refuses
// the id at another address), so waiting a lease for it to go stale would
// only keep the cluster without an Elector.
func (c *core) ownLock() bool {
	b := c.view.body
	return !c.triedAcquire && c.view.kind == viewLock && c.hold == nil && b.HolderID == c.p.nodeID && b.HolderAddr == c.p.addr && c.p.addr != ""
}

// staleAfter is how long the current version must stay unchanged before
// this node may take it over: its own lease, or the holder's if longer.
func (c *core) staleAfter() time.Duration {
	d := c.p.lease
	if c.view.kind == viewLock {
		d = max(d, time.Duration(c.view.body.LeaseMS)*time.Millisecond)
	}
	return d
}

func (c *core) stale(now time.Time) bool {
	return now.Sub(c.view.firstSeen) >= c.staleAfter()
}

// readAt is when a non-holder reads next: at start and when suspicious at
// once, else not while fresh evidence shows a live holder, else every Poll.
func (c *core) readAt() time.Time {
	t := c.nextRead
	if c.haveRead && !c.suspicious && c.evidenceUntil.After(t) {
		t = c.evidenceUntil
	}
	return t
}

// wake returns the next time after now at which the core has something to
// do if nothing else happens first.
func (c *core) wake(now time.Time) (time.Time, bool) {
	var w time.Time
	found := false
	consider := func(t time.Time) {
		if t.After(now) && (!found || t.Before(w)) {
			w, found = t, true
		}
	}
	idle := c.inflight == nil
	switch {
	case c.hold != nil:
		consider(c.hold.validUntil)
		if idle {
			consider(c.hold.nextRenew)
		}
	case c.release != nil:
		consider(c.release.giveUp)
		if idle && !c.release.waitRenew {
			consider(c.release.retryAt)
		}
	case idle:
		consider(c.readAt())
		if !c.p.observer {
			consider(c.holdOffUntil)
			if (c.view.kind == viewLock || c.view.kind == viewCorrupt) && c.view.etag != "" {
				consider(c.view.firstSeen.Add(c.staleAfter()))
			}
		}
	}
	return w, found
}

// done reports the outcome of the call next returned. now is this node's
// clock when the answer arrived.
func (c *core) done(now time.Time, r result) {
	o := c.inflight
	c.tick(now) // with o still in flight, so a release being answered is not given up
	c.inflight = nil
	switch o.kind {
	case opRead:
		c.readDone(now, o, r)
	case opCreate, opTakeover:
		c.acquireDone(now, o, r)
	case opRenew:
		c.renewDone(now, o, r)
	case opRelease:
		c.releaseDone(now, o, r)
	}
}

func (c *core) readDone(now time.Time, o *op, r result) {
	c.haveRead = true
	// A read asked for after this one was sent (Suspect) stays due, unless
	// this one failed: a failing store is retried every Poll, not in a loop.
	requested := c.nextRead.After(o.sent)
	if !requested || (r.err != nil && !errors.Is(r.err, objstore.ErrNotFound)) {
		c.nextRead = now.Add(c.p.poll)
	}
	var v lockView
	switch {
	case errors.Is(r.err, objstore.ErrNotFound):
		v = lockView{kind: viewAbsent}
	case r.err != nil:
		c.logStoreError(o, r.err)
		return
	default:
		b, err := parseLock(r.data)
		if err != nil {
			if r.etag != c.corruptETag {
				c.corruptETag = r.etag
				c.log.Error("corrupt lock object: treating it as held by an unknown node until it has not changed for a lease",
					"key", Key, "etag", r.etag, "error", err)
			}
			v = lockView{kind: viewCorrupt, etag: r.etag}
		} else {
			v = lockView{kind: viewLock, etag: r.etag, body: b}
		}
	}
	if c.setView(now, v) {
		// Evidence vouched for an older version, not this one.
		c.evidenceUntil = time.Time{}
	}
}

// setView records v as the current version and reports whether it is a
// different version from the one known before; a different version is
// first seen now, the same one keeps its first sighting (and its ETag, if
// v came without one).
func (c *core) setView(now time.Time, v lockView) bool {
	old := c.view
	same := false
	switch {
	case v.kind != old.kind:
	case v.kind == viewAbsent:
		same = true
	case v.etag != "" && old.etag != "":
		same = v.etag == old.etag
	case v.kind == viewLock:
		same = sameWrite(v.body, old.body)
	}
	if same {
		v.firstSeen = old.firstSeen
		if v.etag == "" {
			v.etag = old.etag
		}
	} else {
		v.firstSeen = now
	}
	c.view = v
	if v.kind == viewLock {
		c.seen(v.body)
		if c.suspicious && !same && !v.body.Released && v.body.Counter != c.suspectOf {
			c.suspicious = false // a holder wrote since the suspicion: it is alive
		}
	}
	c.show()
	return !same
}

// sameWrite reports whether two bodies are the same write; the counter
// alone would do, but holder and term also tell apart writes made after an
// operator deleted the lock.
func sameWrite(a, b lockBody) bool {
	return a.Counter == b.Counter && a.Term == b.Term && a.HolderID == b.HolderID && a.Released == b.Released
}

// show reports the holder as now known, if that changed.
func (c *core) show() {
	var h Holder
	ok := false
	switch c.view.kind {
	case viewUnknown:
		return // keep showing the last known holder until the read
	case viewLock:
		h = c.view.body.holder()
		ok = !h.Released
	}
	if c.shownValid && h == c.shown && ok == c.shownOK {
		return
	}
	idOf := func(h Holder) Holder { h.Counter = 0; return h }
	notify := !c.shownValid || idOf(h) != idOf(c.shown) || ok != c.shownOK
	c.shown, c.shownOK, c.shownValid = h, ok, true
	c.out = append(c.out, effect{kind: effView, holder: h, ok: ok, notify: notify})
}

func (c *core) acquireDone(now time.Time, o *op, r result) {
	switch {
	case r.err == nil:
		c.view = lockView{kind: viewLock, etag: r.etag, body: o.body, firstSeen: now}
		c.seen(o.body)
		c.suspicious, c.evidenceUntil = false, time.Time{}
		validUntil := o.sent.Add(c.p.validity)
		if !now.Before(validUntil) {
			// Too late to act on: the write stands and goes stale like
			// anyone's.
			c.log.Warn("acquired the elector lock too late to act on it", "term", o.body.Term, "waited", now.Sub(o.sent))
			c.nextRead = now.Add(c.p.poll)
			c.show()
			return
		}
		c.hold = &holding{etag: r.etag, body: o.body, seenAt: now, validUntil: validUntil, nextRenew: o.sent.Add(c.p.renew)}
		c.log.Info("acquired the elector lock", "term", o.body.Term, "counter", o.body.Counter, "how", o.kind.String())
		c.out = append(c.out, effect{kind: effLead, term: o.body.Term})
		c.show()
	case errors.Is(r.err, objstore.ErrPreconditionFailed):
		c.log.Debug("another node wrote the lock first", "op", o.kind.String())
		c.view = lockView{kind: viewUnknown}
		c.nextRead, c.evidenceUntil = now, time.Time{}
	default:
		// The write may have landed: read before deciding anything.
		c.logStoreError(o, r.err)
		c.view = lockView{kind: viewUnknown}
		c.nextRead, c.evidenceUntil = now.Add(c.p.poll), time.Time{}
	}
}

func (c *core) renewDone(now time.Time, o *op, r result) {
	h := c.hold
	switch {
	case r.err == nil:
		switch {
		case h != nil:
			h.etag, h.body, h.seenAt = r.etag, o.body, now
			h.pending, h.failures = nil, 0
			h.validUntil = o.sent.Add(c.p.validity)
			h.nextRenew = o.sent.Add(c.p.renew)
			c.view = lockView{kind: viewLock, etag: r.etag, body: o.body, firstSeen: now}
			c.show()
		case c.release != nil && c.release.waitRenew:
			c.release.etag, c.release.waitRenew, c.release.retryAt = r.etag, false, now
		default:
			// Landed after this node stopped acting: its own write, seen now.
			c.setView(now, lockView{kind: viewLock, etag: r.etag, body: o.body})
		}
	case errors.Is(r.err, objstore.ErrPreconditionFailed):
		if h != nil {
			c.lose(now, "someone else wrote the lock", true)
		}
		if c.release != nil && c.release.waitRenew {
			c.endRelease(fmt.Errorf("release %s: the lock changed before the marker could be written: %w", Key, r.err))
		}
		c.view = lockView{kind: viewUnknown}
		c.nextRead = now
	default:
		c.logStoreError(o, r.err)
		if h != nil {
			h.failures++
			h.nextRenew = now.Add(c.backoff(h.failures))
		}
		if c.release != nil && c.release.waitRenew {
			// The renew may or may not have landed; try the ETag known.
			c.release.waitRenew, c.release.retryAt, c.release.lastErr = false, now, r.err
		}
	}
}

// backoff is the wait before retry n (1, 2, ...) of a failed write:
// Renew/20 doubling, at most Renew/2, so a holder tries several times
// within its validity.
func (c *core) backoff(n int) time.Duration {
	d := c.p.renew / 20
	for i := 1; i < n && d < c.p.renew/2; i++ {
		d *= 2
	}
	return min(d, c.p.renew/2)
}

func (c *core) releaseDone(now time.Time, o *op, r result) {
	rel := c.release
	switch {
	case r.err == nil:
		c.log.Info("released the elector lock", "term", o.body.Term, "counter", o.body.Counter)
		c.endRelease(nil)
		c.setView(now, lockView{kind: viewLock, etag: r.etag, body: o.body})
		c.nextRead = now.Add(c.p.poll)
	case errors.Is(r.err, objstore.ErrPreconditionFailed):
		c.endRelease(fmt.Errorf("release %s: the lock changed before the marker could be written: %w", Key, r.err))
		c.view = lockView{kind: viewUnknown}
		c.nextRead = now
	default:
		c.logStoreError(o, r.err)
		rel.failures++
		rel.lastErr = r.err
		rel.retryAt = now.Add(c.backoff(rel.failures))
		if !now.Before(rel.giveUp) {
			c.endRelease(fmt.Errorf("release %s: gave up after one lease: %w", Key, r.err))
		}
	}
}

func (c *core) endRelease(err error) {
	c.release = nil
	c.out = append(c.out, effect{kind: effResigned, err: err})
	if err != nil {
		c.log.Warn("could not write the released marker; the lock goes stale after a lease instead", "error", err)
	}
}

func (c *core) logStoreError(o *op, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	c.log.Warn("lock object call failed", "op", o.kind.String(), "key", Key, "error", err)
}

// resign stops this node acting at once, then has the released marker
// written; an effResigned reports the outcome.
func (c *core) resign(now time.Time) {
	c.tick(now)
	if c.release != nil {
		return // already resigning; its outcome answers this call too
	}
	h := c.hold
	if h == nil {
		c.out = append(c.out, effect{kind: effResigned})
		return
	}
	c.hold = nil
	c.out = append(c.out, effect{kind: effLose, term: h.body.Term})
	c.log.Info("resigning the elector lock", "term", h.body.Term)
	c.holdOffUntil = now.Add(c.p.lease)
	b := h.body
	b.Released = true
	b.Counter = c.nextCounter()
	b.WrittenAt = now.UTC().Truncate(time.Millisecond)
	c.release = &releasing{
		etag:      h.etag,
		body:      b,
		waitRenew: c.inflight != nil && c.inflight.kind == opRenew,
		retryAt:   now,
		giveUp:    now.Add(c.p.lease),
		lastErr:   errors.New("no attempt made"),
	}
	c.view = lockView{kind: viewLock, etag: h.etag, body: h.body, firstSeen: h.seenAt}
}

// observed records that this node heard from the holder itself (tier 2)
// at now: h is that holder's last completed write.
func (c *core) observed(now time.Time, h Holder) {
	c.tick(now)
	if h.NodeID == "" || h.Term == 0 || h.Counter == 0 || h.NodeID == c.p.nodeID {
		return
	}
	if c.hold != nil || c.release != nil {
		if c.hold != nil && h.Counter > c.maxCounter {
			c.lose(now, "another node reports a newer write of the lock", true)
		}
		return
	}
	v := lockView{kind: viewLock, body: bodyOf(h)}
	same := c.view.kind == viewLock && sameWrite(v.body, c.view.body)
	if !same && h.Counter <= c.maxCounter {
		return // older than what this node has seen: old news
	}
	// The holder wrote this counter before it said so, so a first sighting
	// now is never earlier than the write.
	c.setView(now, v)
	if h.Released {
		c.evidenceUntil = time.Time{}
		c.nextRead = now
		return
	}
	c.evidenceUntil = c.view.firstSeen.Add(evidenceFactor * c.p.renew)
}

// suspected records that tier 2 failed to reach the holder: read now, and
// keep polling until a read shows a holder that wrote since.
func (c *core) suspected(now time.Time) {
	c.tick(now)
	if c.hold != nil || c.release != nil {
		return
	}
	c.suspicious = true
	c.suspectOf = 0
	if c.view.kind == viewLock {
		c.suspectOf = c.view.body.Counter
	}
	c.nextRead = now
}

// validUntil is when this node's leadership runs out by its clock, while
// it holds the lock.
func (c *core) validUntil() (time.Time, bool) {
	if c.hold == nil {
		return time.Time{}, false
	}
	return c.hold.validUntil, true
}

// held returns this node's own lock while it holds it.
func (c *core) held() (Holder, bool) {
	if c.hold == nil {
		return Holder{}, false
	}
	return c.hold.body.holder(), true
}
