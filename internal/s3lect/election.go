package s3lect

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
)

// Election runs the tier-1 election for one node: one goroutine owns the
// core, makes the store calls it asks for (one at a time, each in its own
// goroutine so deadlines still fire while a call hangs) and turns its
// effects into Leadership values, holder updates and Resign answers.
type Election struct {
	store objstore.Store
	clk   clock.Clock
	core  *core // owned by run

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	lead    chan Leadership
	resigns chan chan error
	kick    chan struct{} // buffer 1: pending commands or idle waiters wait
	idles   chan chan struct{}

	closeOnce sync.Once

	mu        sync.Mutex
	started   bool
	closed    bool
	current   Holder
	currentOK bool
	known     bool
	subs      map[uint64]chan Holder
	nextSub   uint64
	// Commands from other goroutines, taken by run at the top of each turn.
	pendObserved *Holder
	pendSuspect  bool
}

// New checks cfg, fills its defaults and returns an Election that does
// nothing until Start.
func New(cfg Config) (*Election, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Election{
		store:   cfg.Store,
		clk:     cfg.Clock,
		core:    newCore(paramsOf(cfg), cfg.Logger),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
		lead:    make(chan Leadership, 1),
		resigns: make(chan chan error),
		kick:    make(chan struct{}, 1),
		idles:   make(chan chan struct{}),
		subs:    make(map[uint64]chan Holder),
	}, nil
}

// Start starts the election goroutine: it reads the lock at once and
// acquires it if it is free (unless Config.Observer).
func (e *Election) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.closed {
		return
	}
	e.started = true
	go e.run()
}

// Close stops the election goroutine and waits for it. A holder's
// Leadership.Ctx is cancelled; Close does not resign (call Resign first
// for a fast handoff), so the lock goes stale after a lease. The Leadership
// and Subscribe channels are closed.
func (e *Election) Close() {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		started := e.started
		e.closed = true
		e.mu.Unlock()
		e.cancel()
		if started {
			<-e.done
		} else {
			close(e.lead)
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		for id, ch := range e.subs {
			close(ch)
			delete(e.subs, id)
		}
	})
}

// Current returns the holder as last known: the lock's last version this
// node has read, heard of (Observed) or written. ok is false when no live
// holder is known: the lock is absent, corrupt, released (the Holder then
// says so) or not read yet. It says whom the lock names, not that this node
// may act: only a live Leadership.Ctx says that.
func (e *Election) Current() (Holder, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.current, e.currentOK
}

// Subscribe returns a channel that always holds the latest holder: a new
// value replaces one not yet received. It receives when who holds the lock
// changes (node, term, released or not; not every renewal's counter), and
// first the current holder if one is known. A zero Holder means the lock
// is absent or corrupt. The returned func unsubscribes and closes the
// channel.
func (e *Election) Subscribe() (<-chan Holder, func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch := make(chan Holder, 1)
	if e.closed {
		close(ch)
		return ch, func() {}
	}
	id := e.nextSub
	e.nextSub++
	e.subs[id] = ch
	if e.known {
		ch <- e.current
	}
	return ch, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if ch, ok := e.subs[id]; ok {
			close(ch)
			delete(e.subs, id)
		}
	}
}

// Leadership returns the channel that receives one value per acquisition
// of the lock by this node. It holds at most one value: an unreceived one
// is replaced by the next, whose predecessor's Ctx is already cancelled.
// It is closed by Close.
func (e *Election) Leadership() <-chan Leadership { return e.lead }

// Resign gives up the lock if this node holds it: the Leadership's Ctx is
// cancelled before anything else, then the lock is rewritten as released
// so another node can take it over at once; this node does not acquire
// again for one lease. It returns nil when the marker is written or this
// node did not hold the lock, and an error when the marker could not be
// written (the lock then goes stale after a lease, as after a crash) or
// ctx ended first (the marker is still attempted).
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	started, closed := e.started, e.closed
	e.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !started:
		return nil
	}
	reply := make(chan error, 1)
	select {
	case e.resigns <- reply:
	case <-e.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Observed tells the election that this node just heard from the holder
// itself (a push or heartbeat answer carrying h, the holder's last
// completed write). A live holder's counter changes every Renew; while it
// does, this node does not read the bucket. It never blocks.
func (e *Election) Observed(h Holder) {
	e.mu.Lock()
	if e.pendObserved == nil || h.Counter >= e.pendObserved.Counter {
		e.pendObserved = &h
	}
	e.mu.Unlock()
	e.wake()
}

// Suspect tells the election that tier 2 failed to reach the holder: the
// lock is read at once and every Poll until a holder that wrote since is
// seen. It never blocks.
func (e *Election) Suspect() {
	e.mu.Lock()
	e.pendSuspect = true
	e.mu.Unlock()
	e.wake()
}

func (e *Election) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// idle waits until the election goroutine has no store call in flight and
// has done everything due at the clock's current time, including what
// Observed and Suspect asked before the call. Tests call it before and after
// advancing a fake clock; a store call that waits on the clock keeps it
// from returning.
func (e *Election) idle(ctx context.Context) error {
	ch := make(chan struct{})
	select {
	case e.idles <- ch:
	case <-e.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ch:
		return nil
	case <-e.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call is one store call run for the core.
type call struct {
	o      *op
	cancel context.CancelFunc
	// abandoned: its deadline passed and its context is cancelled; run
	// still waits for its answer before starting another.
	abandoned bool
}

func (e *Election) run() {
	defer close(e.done)
	var (
		inflight   *call
		results    = make(chan result, 1)
		calls      sync.WaitGroup
		leadCancel context.CancelFunc
		leadValid  *validity
		resigners  []chan error
		idlers     []chan struct{}
	)
	defer func() {
		if leadCancel != nil {
			leadCancel()
		}
		if inflight != nil {
			inflight.cancel()
		}
		calls.Wait()
		for _, r := range resigners {
			r <- ErrClosed
		}
		close(e.lead)
	}()
	// apply carries out the core's decisions in order; a lost leadership
	// is cancelled here, before the core is asked for anything else.
	apply := func() {
		for _, ef := range e.core.effects() {
			switch ef.kind {
			case effLose:
				if leadCancel != nil {
					leadValid.set(time.Time{})
					leadCancel()
					leadCancel, leadValid = nil, nil
				}
			case effLead:
				ctx, cancel := context.WithCancel(e.ctx)
				leadCancel = cancel
				leadValid = &validity{clk: e.clk}
				if until, ok := e.core.validUntil(); ok {
					leadValid.set(until)
				}
				select {
				case <-e.lead: // replaced: its Ctx is already cancelled
				default:
				}
				e.lead <- Leadership{Term: ef.term, Ctx: ctx, v: leadValid}
			case effView:
				e.show(ef.holder, ef.ok, ef.notify)
			case effResigned:
				for _, r := range resigners {
					r <- ef.err
				}
				resigners = nil
			}
		}
		// A renewal moves the validity on.
		if until, ok := e.core.validUntil(); ok && leadValid != nil {
			leadValid.set(until)
		}
	}
	launch := func(o *op) {
		ctx, cancel := context.WithCancel(e.ctx)
		inflight = &call{o: o, cancel: cancel}
		calls.Add(1)
		go func() {
			defer calls.Done()
			results <- e.do(ctx, o) // buffered: never blocks
		}()
	}
	for {
		now := e.clk.Now()
		e.takePending(now)
		e.core.tick(now)
		apply()
		if inflight == nil {
			if o := e.core.next(now); o != nil {
				launch(o)
			}
			apply()
		}
		wake, ok := e.core.wake(now)
		if inflight != nil && !inflight.abandoned && (!ok || inflight.o.deadline.Before(wake)) {
			wake, ok = inflight.o.deadline, true
		}
		var timer clock.Timer
		var fired <-chan time.Time
		if ok {
			timer = e.clk.NewTimer(wake.Sub(now))
			fired = timer.C()
		}
		// Idle only once the timer is armed: a test that moves a fake
		// clock after idle must not race the timer's start (a timer armed
		// after the move would wait from the new time and oversleep).
		if inflight == nil {
			for _, ch := range idlers {
				close(ch)
			}
			idlers = nil
		}
		select {
		case <-e.ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case r := <-results:
			inflight.cancel()
			inflight = nil
			e.core.done(e.clk.Now(), r)
		case reply := <-e.resigns:
			resigners = append(resigners, reply)
			e.core.resign(e.clk.Now())
		case ch := <-e.idles:
			idlers = append(idlers, ch)
		case <-e.kick:
		case <-fired:
			if inflight != nil && !inflight.abandoned && !e.clk.Now().Before(inflight.o.deadline) {
				inflight.cancel()
				inflight.abandoned = true
			}
		}
		if timer != nil {
			timer.Stop()
		}
		apply()
	}
}

// takePending hands commands from other goroutines to the core.
func (e *Election) takePending(now time.Time) {
	e.mu.Lock()
	h, suspect := e.pendObserved, e.pendSuspect
	e.pendObserved, e.pendSuspect = nil, false
	e.mu.Unlock()
	if h != nil {
		e.core.observed(now, *h)
	}
	if suspect {
		e.core.suspected(now)
	}
}

// do makes one store call for the core.
func (e *Election) do(ctx context.Context, o *op) result {
	var r result
	switch o.kind {
	case opRead:
		r.data, r.etag, r.err = e.store.Get(ctx, Key)
	case opCreate:
		r.etag, r.err = e.store.PutIfAbsent(ctx, Key, o.data)
	default:
		r.etag, r.err = e.store.PutIfMatch(ctx, Key, o.data, o.etag)
	}
	if r.err != nil {
		r.err = fmt.Errorf("%s %s: %w", o.kind, Key, r.err)
	}
	return r
}

// show publishes the holder as now known.
func (e *Election) show(h Holder, ok, notify bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.current, e.currentOK, e.known = h, ok, true
	if !notify {
		return
	}
	for _, ch := range e.subs {
		select {
		case <-ch:
		default:
		}
		ch <- h // only sender, under mu, and just emptied: never blocks
	}
}
