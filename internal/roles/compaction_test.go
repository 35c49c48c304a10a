package roles

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/compactor"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// revTarget is an engine at a fixed revision that records compactions.
type revTarget struct {
	mu    sync.Mutex
	rev   int64
	floor int64
	got   []int64
}

func (t *revTarget) CurrentRevision() int64 { t.mu.Lock(); defer t.mu.Unlock(); return t.rev }
func (t *revTarget) CompactRevision() int64 { t.mu.Lock(); defer t.mu.Unlock(); return t.floor }
func (t *revTarget) Compact(_ context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.floor = r.Revision
	t.got = append(t.got, r.Revision)
	return &pb.CompactionResponse{}, nil
}
func (t *revTarget) compactions() int { t.mu.Lock(); defer t.mu.Unlock(); return len(t.got) }
func (t *revTarget) setRev(r int64)   { t.mu.Lock(); t.rev = r; t.mu.Unlock() }

// Auto-compaction runs only while the Primary is Active: Starting does
// not compact, Draining and Replica stop it, and a new Active term starts
// its schedule from scratch (a full period before its first compaction).
func TestAutoCompactionRunsOnlyWhileActive(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	tgt := &revTarget{rev: 10}
	steps := make(chan struct{})
	a := &autoCompaction{policy: compactor.Policy{Mode: compactor.ModePeriodic, Period: 10 * time.Second},
		target: tgt, clk: clk, log: hclog.NewNullLogger(), afterStep: func() { steps <- struct{}{} }}
	defer a.close()
	step := func(n int) {
		for range n {
			clk.Advance(time.Second)
			<-steps
		}
	}

	a.primaryState(netsyv1.PrimaryState_STARTING)
	if clk.Pending() != 0 {
		t.Fatal("a Starting Primary runs a schedule")
	}
	a.primaryState(netsyv1.PrimaryState_ACTIVE)
	step(10)
	if n := tgt.compactions(); n != 1 {
		t.Fatalf("%d compactions one period into the Active term, want 1", n)
	}
	a.primaryState(netsyv1.PrimaryState_DRAINING)
	a.wg.Wait()
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers armed after the Primary stopped being Active", n)
	}
	a.primaryState(netsyv1.PrimaryState_REPLICA)

	tgt.setRev(20)
	a.primaryState(netsyv1.PrimaryState_ACTIVE)
	step(9)
	if n := tgt.compactions(); n != 1 {
		t.Fatalf("a new Active term compacted %d times before one period of its own", n-1)
	}
	step(1)
	if n := tgt.compactions(); n != 2 {
		t.Fatalf("%d compactions after the new term's first period, want 2", n)
	}
}
