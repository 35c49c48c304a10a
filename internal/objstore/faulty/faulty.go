package faulty

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
)

// Op selects Store methods; values combine with |.
type Op uint8

// The methods a Rule can select. The streamed variants share their
// method's Op: Get selects GetReader, PutIfAbsent selects PutIfAbsentFrom.
const (
	Get Op = 1 << iota
	PutIfAbsent
	PutIfMatch
	Delete
	List

	// Writes is every method that changes the store.
	Writes = PutIfAbsent | PutIfMatch | Delete
	// All is every method except Close, which is never faulted.
	All = Get | Writes | List
)

func (o Op) String() string {
	var names []string
	for _, n := range []struct {
		op   Op
		name string
	}{{Get, "Get"}, {PutIfAbsent, "PutIfAbsent"}, {PutIfMatch, "PutIfMatch"}, {Delete, "Delete"}, {List, "List"}} {
		if o&n.op != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// ErrInjected is the error Fail injects.
var ErrInjected = errors.New("faulty: injected failure")

// Rule describes one fault.
type Rule struct {
	// Ops selects the methods; 0 means All.
	Ops Op
	// KeyPrefix restricts the fault to keys starting with it; for List, to
	// calls whose prefix argument starts with it. Empty matches everything.
	KeyPrefix string
	// Err is returned to the caller; nil injects no error (a pure delay).
	Err error
	// Delay is waited on the store's clock before the call proceeds (or
	// fails). A canceled context ends the wait with the context's error.
	Delay time.Duration
	// Skip lets the first Skip matching calls through untouched.
	Skip int
	// Count retires the rule after it has fired Count times; 0: never.
	Count int
	// AfterCall makes the inner call first and returns Err only afterwards:
	// the write landed but the caller is told it failed, as when a response
	// is lost on the network.
	AfterCall bool
}

// Fault is a handle on an injected Rule.
type Fault struct {
	s    *Store
	rule Rule
	// Guarded by s.mu.
	seen, fired int
	stopped     bool
}

// Stop retires the fault; calls already waiting on its delay still finish.
func (f *Fault) Stop() {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	f.stopped = true
}

// Fired reports how many calls the fault has affected.
func (f *Fault) Fired() int {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return f.fired
}

// Active reports whether the fault can still fire.
func (f *Fault) Active() bool {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return f.activeLocked()
}

func (f *Fault) activeLocked() bool {
	return !f.stopped && (f.rule.Count == 0 || f.fired < f.rule.Count)
}

// Store is the fault-injecting decorator. It is safe for concurrent use.
type Store struct {
	inner objstore.Store
	clk   clock.Clock

	mu     sync.Mutex
	faults []*Fault
	calls  map[Op]int
}

var _ objstore.Store = (*Store)(nil)

// New wraps inner; delays wait on clk.
func New(inner objstore.Store, clk clock.Clock) *Store {
	return &Store{inner: inner, clk: clk, calls: make(map[Op]int)}
}

// Inner returns the wrapped store, for checking what really got written.
func (s *Store) Inner() objstore.Store { return s.inner }

// Inject adds a fault; it affects calls that start after Inject returns.
func (s *Store) Inject(r Rule) *Fault {
	if r.Err == nil && r.Delay <= 0 {
		panic("faulty: a Rule needs an Err or a Delay")
	}
	if r.AfterCall && r.Err == nil {
		panic("faulty: AfterCall needs an Err")
	}
	if r.Ops == 0 {
		r.Ops = All
	}
	f := &Fault{s: s, rule: r}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
	return f
}

// Fail makes every call of ops under keyPrefix fail with ErrInjected until Stop.
func (s *Store) Fail(ops Op, keyPrefix string) *Fault {
	return s.Inject(Rule{Ops: ops, KeyPrefix: keyPrefix, Err: ErrInjected})
}

// Delay makes every call of ops under keyPrefix wait d first, until Stop.
func (s *Store) Delay(ops Op, keyPrefix string, d time.Duration) *Fault {
	return s.Inject(Rule{Ops: ops, KeyPrefix: keyPrefix, Delay: d})
}

// Clear stops every fault.
func (s *Store) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		f.stopped = true
	}
	s.faults = nil
}

// Calls reports how many calls of ops have been made, faulted or not.
func (s *Store) Calls(ops Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for op, c := range s.calls {
		if ops&op != 0 {
			n += c
		}
	}
	return n
}

// plan is what the matching faults decided for one call.
type plan struct {
	delay     time.Duration
	err       error
	afterCall bool
}

func (s *Store) plan(op Op, key string) plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	var p plan
	kept := s.faults[:0]
	for _, f := range s.faults {
		if !f.activeLocked() {
			continue // drop retired faults so long tests do not accumulate them
		}
		kept = append(kept, f)
		if f.rule.Ops&op == 0 || !strings.HasPrefix(key, f.rule.KeyPrefix) {
			continue
		}
		f.seen++
		if f.seen <= f.rule.Skip {
			continue
		}
		f.fired++
		p.delay += f.rule.Delay
		if p.err == nil && f.rule.Err != nil {
			p.err, p.afterCall = f.rule.Err, f.rule.AfterCall
		}
	}
	clear(s.faults[len(kept):])
	s.faults = kept
	return p
}

// do runs call under the faults planned for (op, key).
func (s *Store) do(ctx context.Context, op Op, key string, call func() error) error {
	p := s.plan(op, key)
	if p.delay > 0 {
		if err := s.clk.Sleep(ctx, p.delay); err != nil {
			return fmt.Errorf("faulty %s %q: delayed call canceled: %w", op, key, err)
		}
	}
	if p.err != nil && !p.afterCall {
		return fmt.Errorf("faulty %s %q: %w", op, key, p.err)
	}
	if err := call(); err != nil {
		return err
	}
	if p.err != nil {
		return fmt.Errorf("faulty %s %q: after the call succeeded: %w", op, key, p.err)
	}
	return nil
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) (body []byte, etag string, err error) {
	err = s.do(ctx, Get, key, func() error {
		body, etag, err = s.inner.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return body, etag, nil
}

// GetReader implements objstore.Store; faults select it as Get and apply
// when the stream is opened.
func (s *Store) GetReader(ctx context.Context, key string) (body io.ReadCloser, etag string, err error) {
	err = s.do(ctx, Get, key, func() error {
		body, etag, err = s.inner.GetReader(ctx, key)
		return err
	})
	if err != nil {
		if body != nil {
			body.Close()
		}
		return nil, "", err
	}
	return body, etag, nil
}

// PutIfAbsent implements objstore.Store.
func (s *Store) PutIfAbsent(ctx context.Context, key string, body []byte) (etag string, err error) {
	err = s.do(ctx, PutIfAbsent, key, func() error {
		etag, err = s.inner.PutIfAbsent(ctx, key, body)
		return err
	})
	if err != nil {
		return "", err
	}
	return etag, nil
}

// PutIfAbsentFrom implements objstore.Store; faults select it as PutIfAbsent.
func (s *Store) PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (etag string, err error) {
	err = s.do(ctx, PutIfAbsent, key, func() error {
		etag, err = s.inner.PutIfAbsentFrom(ctx, key, r, size)
		return err
	})
	if err != nil {
		return "", err
	}
	return etag, nil
}

// PutIfMatch implements objstore.Store.
func (s *Store) PutIfMatch(ctx context.Context, key string, body []byte, etag string) (newETag string, err error) {
	err = s.do(ctx, PutIfMatch, key, func() error {
		newETag, err = s.inner.PutIfMatch(ctx, key, body, etag)
		return err
	})
	if err != nil {
		return "", err
	}
	return newETag, nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.do(ctx, Delete, key, func() error { return s.inner.Delete(ctx, key) })
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) (infos []objstore.ObjectInfo, err error) {
	err = s.do(ctx, List, prefix, func() error {
		infos, err = s.inner.List(ctx, prefix, startAfter, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return infos, nil
}

// Close implements objstore.Store by closing the inner store; it is never faulted.
func (s *Store) Close() error { return s.inner.Close() }
