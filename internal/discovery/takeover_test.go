package discovery

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// prober answers for peer addresses as the map says; an address not in it
// refuses (its process is gone). It counts probes.
type prober struct {
	mu     sync.Mutex
	alive  map[string]string // peer address -> node id answering there
	probes int
	// before, if set, runs inside each probe (to interleave a racer).
	before func(addr string)
}

func (p *prober) probe(_ context.Context, addr string) (string, error) {
	p.mu.Lock()
	p.probes++
	before := p.before
	id, ok := p.alive[addr]
	p.mu.Unlock()
	if before != nil {
		before(addr)
	}
	if !ok {
		return "", errors.New("connection refused")
	}
	return id, nil
}

// moved is reg(id) restarted with another --http-addr (the case).
func moved(id, http string) Registration {
	r := reg(id)
	r.HTTPAddr = http
	return r
}

func TestRegisterTakingOverSameDataIsNoOp(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	p := &prober{alive: map[string]string{}}
	if _, err := RegisterTakingOver(ctx, s, reg("n1"), p.probe); err != nil {
		t.Fatal(err)
	}
	before := mustGet(t, s, "nodes/n1.json")
	old, err := RegisterTakingOver(ctx, s, reg("n1"), p.probe)
	if err != nil || old != nil {
		t.Fatalf("same registration again = %v, %v; want a no-op", old, err)
	}
	if p.probes != 0 {
		t.Fatalf("%d probes for an identical registration, want none", p.probes)
	}
	if after := mustGet(t, s, "nodes/n1.json"); string(after) != string(before) {
		t.Fatal("a no-op rewrote the file")
	}
}

// A node restarted with only --http-addr changed, whose old process is
// gone (its peer address refuses, or answers as another node), takes its
// registration over.
func TestRegisterTakesOverWhenWriterGone(t *testing.T) {
	for name, alive := range map[string]map[string]string{
		"refused":      {},
		"another node": {"10.0.0.1:2380": "n7"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s, _ := newStore()
			if err := Register(ctx, s, reg("n1")); err != nil {
				t.Fatal(err)
			}
			// Without a prober the conflict stands (the old behaviour).
			wantErr(t, Register(ctx, s, moved("n1", "10.0.0.1:9999")), ErrConflict)
			p := &prober{alive: alive}
			old, err := RegisterTakingOver(ctx, s, moved("n1", "10.0.0.1:9999"), p.probe)
			if err != nil {
				t.Fatal(err)
			}
			if old == nil || old.HTTPAddr != "10.0.0.1:2381" {
				t.Fatalf("replaced %+v, want the old registration", old)
			}
			regs, _, err := List(ctx, s)
			if err != nil || len(regs) != 1 || regs[0].HTTPAddr != "10.0.0.1:9999" {
				t.Fatalf("after the takeover: %+v, %v", regs, err)
			}
		})
	}
}

// A registration whose peer address answers as the same node id is a live
// process: the start fails with the conflict and the file is untouched.
func TestRegisterRefusesTakeoverWhenWriterAlive(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	before := mustGet(t, s, "nodes/n1.json")
	p := &prober{alive: map[string]string{"10.0.0.1:2380": "n1"}}
	_, err := RegisterTakingOver(ctx, s, moved("n1", "10.0.0.1:9999"), p.probe)
	wantErr(t, err, ErrConflict, "answers as node n1", "another process is running with --node-id n1")
	if after := mustGet(t, s, "nodes/n1.json"); string(after) != string(before) {
		t.Fatal("a refused takeover rewrote the file")
	}
}

// Two starters find the same dead registration and both try to take it
// over: the conditional write lets one win; the other reads the winner's
// registration, finds it alive and fails.
func TestRegisterRacingTakeoversOneWins(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore()
	if err := Register(ctx, s, reg("n1")); err != nil {
		t.Fatal(err)
	}
	a, b := moved("n1", "10.0.0.1:7001"), moved("n1", "10.0.0.1:7002")
	a.PeerAddr, b.PeerAddr = "10.0.0.2:2380", "10.0.0.3:2380"
	p := &prober{alive: map[string]string{}}
	// Each starter's process answers as n1 once it has registered, which
	// is what the loser's second probe sees.
	var wg sync.WaitGroup
	var arrived sync.WaitGroup
	arrived.Add(2)
	p.before = func(addr string) {
		if addr == "10.0.0.1:2380" {
			arrived.Done()
			arrived.Wait() // both read the old ETag before either writes
		}
	}
	errs := make([]error, 2)
	for i, r := range []Registration{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = RegisterTakingOver(ctx, s, r, func(ctx context.Context, addr string) (string, error) {
				if addr == a.PeerAddr || addr == b.PeerAddr {
					// The winner is alive by now.
					return "n1", nil
				}
				return p.probe(ctx, addr)
			})
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else if !errors.Is(err, ErrConflict) {
			t.Fatalf("the loser failed with %v, want ErrConflict", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d takeovers succeeded (%v), want exactly 1", won, errs)
	}
	regs, _, err := List(ctx, s)
	if err != nil || len(regs) != 1 {
		t.Fatalf("List = %+v, %v", regs, err)
	}
	if w := regs[0]; w.PeerAddr != a.PeerAddr && w.PeerAddr != b.PeerAddr {
		t.Fatalf("the file holds %+v, neither starter", w)
	}
}
