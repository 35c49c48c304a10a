package clock

import (
	"context"
	"sync"
	"time"
)

// Clock is the time source injected into every component.
//
// It has two readings (see the package doc for which to use when): Now is
// the one every duration, lease, timeout and deadline is measured with, and
// Wall is the one a timestamp that leaves the process is taken from.
type Clock interface {
	// Now is the reading durations are measured with: on the real clock it
	// carries Go's monotonic reading, so Sub, Since, Before and After on
	// two Now readings ignore wall-clock steps. Keep it a time.Time:
	// UnixNano, Unix, Round(0), serialising or rebuilding it with
	// time.Unix drops the monotonic reading.
	Now() time.Time
	// Since is Now().Sub(t), for t a Now reading.
	Since(t time.Time) time.Duration
	// Wall is the wall clock, for timestamps that are shown, persisted or
	// sent to another node. It may step backwards or forwards (NTP, an
	// operator); no decision may be taken on it.
	Wall() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
	After(d time.Duration) <-chan time.Time
	// Sleep waits for d or until ctx is done, whichever comes first.
	Sleep(ctx context.Context, d time.Duration) error
}

// Timer is the subset of time.Timer the project uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is the subset of time.Ticker the project uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real returns the system clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) Since(t time.Time) time.Duration        { return time.Since(t) }
func (realClock) Wall() time.Time                        { return time.Now().Round(0) }
func (realClock) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }

// Fake is a manually advanced clock for deterministic tests. Timers and
// tickers fire only when Advance moves time past their deadline. StepWall
// moves its wall clock alone, as NTP or an operator steps a host's: Now,
// Since and timers do not see it.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	wall    time.Duration // Wall() - Now(): the sum of StepWall calls
	waiters []*fakeWaiter
	changed chan struct{}
}

type fakeWaiter struct {
	deadline time.Time
	period   time.Duration // > 0 for tickers
	ch       chan time.Time
	active   bool
}

// NewFake returns a fake clock starting at start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// Wall is Now moved by every StepWall so far.
func (f *Fake) Wall() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now.Add(f.wall)
}

// StepWall steps the wall clock by d (backwards when negative) without
// moving Now or firing a timer: a test of "a wall-clock step changes no
// decision" (SPEC §5.4) steps it and checks that nothing changed.
func (f *Fake) StepWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall += d
}

// Advance moves time forward by d, firing every timer and ticker due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	for _, w := range f.waiters {
		for w.active && !w.deadline.After(now) {
			select {
			case w.ch <- w.deadline:
			default: // like time.Ticker, drop ticks nobody reads
			}
			if w.period > 0 {
				w.deadline = w.deadline.Add(w.period)
			} else {
				w.active = false
			}
		}
	}
	f.compact()
	f.mu.Unlock()
}

// BlockUntil waits until at least n timers or tickers are pending. Tests use
// it to know a goroutine has armed its timer before advancing the clock.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		count := 0
		for _, w := range f.waiters {
			if w.active {
				count++
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if count >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Pending reports how many timers and tickers are armed.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waiters {
		if w.active {
			n++
		}
	}
	return n
}

func (f *Fake) compact() {
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.active {
			kept = append(kept, w)
		}
	}
	for i := len(kept); i < len(f.waiters); i++ {
		f.waiters[i] = nil
	}
	f.waiters = kept
}

func (f *Fake) add(w *fakeWaiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waiters = append(f.waiters, w)
	f.signal()
}

func (f *Fake) signal() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *Fake) NewTimer(d time.Duration) Timer {
	w := &fakeWaiter{deadline: f.Now().Add(d), ch: make(chan time.Time, 1), active: true}
	if d <= 0 {
		w.ch <- f.Now()
		w.active = false
		return &fakeTimer{f: f, w: w}
	}
	f.add(w)
	return &fakeTimer{f: f, w: w}
}

func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker interval")
	}
	w := &fakeWaiter{deadline: f.Now().Add(d), period: d, ch: make(chan time.Time, 1), active: true}
	f.add(w)
	return &fakeTicker{f: f, w: w}
}

func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

func (f *Fake) Sleep(ctx context.Context, d time.Duration) error {
	t := f.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type fakeTimer struct {
	f *Fake
	w *fakeWaiter
}

func (t *fakeTimer) C() <-chan time.Time { return t.w.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.w.active
	t.w.active = false
	t.f.compact()
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	was := t.w.active
	t.w.active = false
	t.f.compact()
	t.f.mu.Unlock()
	nw := &fakeWaiter{deadline: t.f.Now().Add(d), ch: t.w.ch, active: true}
	t.w = nw
	t.f.add(nw)
	return was
}

type fakeTicker struct {
	f *Fake
	w *fakeWaiter
}

func (t *fakeTicker) C() <-chan time.Time { return t.w.ch }

func (t *fakeTicker) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.w.active = false
	t.f.compact()
}

func (t *fakeTicker) Reset(d time.Duration) {
	t.Stop()
	nw := &fakeWaiter{deadline: t.f.Now().Add(d), period: d, ch: t.w.ch, active: true}
	t.w = nw
	t.f.add(nw)
}

// WithTimeout is context.WithTimeout on c: the context ends when d has
// passed on c (a fake clock's Advance), not on the wall clock. The watcher
// goroutine ends with the returned cancel.
func WithTimeout(parent context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, real := c.(realClock); real {
		return context.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancel(parent)
	t := c.NewTimer(d)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-t.C():
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		t.Stop()
		close(done)
		wg.Wait()
		cancel()
	}
}
