package faulty_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/objstore/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore() (*faulty.Store, *clock.Fake) {
	clk := clock.NewFake(epoch)
	return faulty.New(mem.New(clk), clk), clk
}

// With no faults the decorator is transparent: it passes the whole suite.
func TestConformanceWithoutFaults(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store {
		return faulty.New(mem.New(clock.Real()), clock.Real())
	})
}

func TestFailByOpAndPrefixUntilStopped(t *testing.T) {
	s, _ := newStore()
	ctx := t.Context()
	f := s.Fail(faulty.PutIfAbsent, "wal/")
	for i := range 3 {
		if _, err := s.PutIfAbsent(ctx, "wal/1", []byte("x")); !errors.Is(err, faulty.ErrInjected) {
			t.Fatalf("attempt %d: %v, want ErrInjected", i, err)
		}
	}
	// Other methods and prefixes are untouched.
	if _, err := s.PutIfAbsent(ctx, "snapshots/1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "wal/1"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("failed PutIfAbsent wrote anyway: %v", err)
	}
	if f.Fired() != 3 || !f.Active() {
		t.Fatalf("fired %d active %v", f.Fired(), f.Active())
	}
	f.Stop()
	if _, err := s.PutIfAbsent(ctx, "wal/1", []byte("x")); err != nil {
		t.Fatalf("after Stop: %v", err)
	}
	if got := s.Calls(faulty.PutIfAbsent); got != 5 {
		t.Fatalf("Calls(PutIfAbsent) = %d, want 5", got)
	}
	if got := s.Calls(faulty.All); got != 6 {
		t.Fatalf("Calls(All) = %d, want 6", got)
	}
}

func TestSkipAndCount(t *testing.T) {
	s, _ := newStore()
	ctx := t.Context()
	boom := errors.New("boom")
	f := s.Inject(faulty.Rule{Ops: faulty.Get, Err: boom, Skip: 1, Count: 2})
	if _, err := s.PutIfAbsent(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 5 {
		_, _, err := s.Get(ctx, "k")
		got = append(got, errors.Is(err, boom))
	}
	if want := []bool{false, true, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("failures = %v, want %v", got, want)
	}
	if f.Active() || f.Fired() != 2 {
		t.Fatalf("active %v fired %d", f.Active(), f.Fired())
	}
}

func TestAfterCallIsALostResponse(t *testing.T) {
	s, _ := newStore()
	ctx := t.Context()
	s.Inject(faulty.Rule{Ops: faulty.PutIfMatch | faulty.PutIfAbsent, Err: faulty.ErrInjected, AfterCall: true, Count: 1})
	if _, err := s.PutIfAbsent(ctx, "lock", []byte("mine")); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("PutIfAbsent = %v", err)
	}
	body, _, err := s.Inner().Get(ctx, "lock")
	if err != nil || string(body) != "mine" {
		t.Fatalf("the write should have landed: %q %v", body, err)
	}
	// A retry now sees its own write as a conflict: exactly the ambiguity
	// the objstore contract warns callers about.
	if _, err := s.PutIfAbsent(ctx, "lock", []byte("mine")); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("retry = %v", err)
	}
}

func TestDelayUsesInjectedClock(t *testing.T) {
	s, clk := newStore()
	ctx := t.Context()
	s.Delay(faulty.Get, "leader/", 10*time.Second)
	if _, err := s.PutIfAbsent(ctx, "leader/elector.json", []byte("v")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := s.Get(ctx, "leader/elector.json")
		done <- err
	}()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("delayed Get returned early: %v", err)
	default:
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDelayHonoursContext(t *testing.T) {
	s, clk := newStore()
	s.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, Delay: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := s.PutIfAbsent(ctx, "k", []byte("v"))
		done <- err
	}()
	if err := clk.BlockUntil(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled delayed call = %v", err)
	}
	if _, _, err := s.Get(t.Context(), "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("canceled delayed call wrote anyway: %v", err)
	}
}

func TestListMatchesOnPrefixArgumentAndClear(t *testing.T) {
	s, _ := newStore()
	ctx := t.Context()
	s.Fail(faulty.List, "wal/")
	if _, err := s.List(ctx, "wal/", "", 0); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("List(wal/) = %v", err)
	}
	if _, err := s.List(ctx, "snapshots/", "", 0); err != nil {
		t.Fatalf("List(snapshots/) = %v", err)
	}
	s.Clear()
	if _, err := s.List(ctx, "wal/", "", 0); err != nil {
		t.Fatalf("after Clear: %v", err)
	}
}

func TestInvalidRulePanics(t *testing.T) {
	s, _ := newStore()
	defer func() {
		if recover() == nil {
			t.Fatal("a rule with neither Err nor Delay was accepted")
		}
	}()
	s.Inject(faulty.Rule{Ops: faulty.Get})
}
