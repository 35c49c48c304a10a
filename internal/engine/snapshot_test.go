package engine

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
)

// savedIndexes is a MemStorage that records the index of every snapshot
// saved.
type savedIndexes struct {
	*enginetest.MemStorage
	mu    sync.Mutex
	saved []uint64
}

func (s *savedIndexes) SaveSnapshot(snap *datafile.Snapshot) error {
	s.mu.Lock()
	s.saved = append(s.saved, snap.Header.Index)
	s.mu.Unlock()
	return s.MemStorage.SaveSnapshot(snap)
}

func (s *savedIndexes) indexes() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.saved)
}

// snapshotIdle waits until the engine has no snapshot in flight, so the
// next entry meets the trigger as it would on a node whose save kept up.
func snapshotIdle(t *testing.T, e *Engine) {
	t.Helper()
	for {
		var busy bool
		if err := e.inLoop(ctx(t), func() { busy = e.snapshotting }); err != nil {
			t.Fatal(err)
		}
		if !busy {
			return
		}
		runtime.Gosched()
	}
}

// Two nodes fed the same log snapshot at different indexes (the phases of
// their node IDs), each every SnapshotEntries entries, the first within
// SnapshotEntries of the start.
func TestNodesSnapshotAtDifferentIndexesEveryInterval(t *testing.T) {
	const every = 10
	var got [][]uint64
	for _, id := range []string{"n1", "n2"} {
		st := &savedIndexes{MemStorage: &enginetest.MemStorage{}}
		h := newHarness(t, nil, func(c *Config) {
			c.Storage, c.SnapshotEntries, c.SnapshotPhase = st, every, SnapshotPhase(id, every)
		})
		for i := range 5 * every {
			h.put(fmt.Sprintf("k%d", i%7), fmt.Sprint(i))
			snapshotIdle(t, h.e)
		}
		idx := st.indexes()
		if len(idx) < 4 {
			t.Fatalf("node %s saved snapshots at %v over %d entries, want one every %d", id, idx, 5*every, every)
		}
		if idx[0] > every {
			t.Fatalf("node %s: first snapshot at index %d, more than %d entries after the start", id, idx[0], every)
		}
		for i := 1; i < len(idx); i++ {
			if idx[i]-idx[i-1] != every {
				t.Fatalf("node %s saved snapshots at %v, not %d entries apart", id, idx, every)
			}
		}
		got = append(got, idx)
	}
	for _, a := range got[0] {
		if slices.Contains(got[1], a) {
			t.Fatalf("both nodes snapshot at index %d (n1 at %v, n2 at %v)", a, got[0], got[1])
		}
	}
}

// Node IDs ending in consecutive numbers get phases far apart; others
// get one from a hash, always inside the interval.
func TestSnapshotPhaseSpreadsNodeIDs(t *testing.T) {
	const every = 100000
	phases := []uint64{SnapshotPhase("n1", every), SnapshotPhase("n2", every), SnapshotPhase("n3", every)}
	slices.Sort(phases)
	gaps := []uint64{phases[1] - phases[0], phases[2] - phases[1], every - phases[2] + phases[0]}
	for _, g := range gaps {
		if g < every/5 {
			t.Fatalf("phases %v of n1..n3 leave a gap of %d entries, want at least %d", phases, g, every/5)
		}
	}
	if SnapshotPhase("netsy-0", every) != 0 || SnapshotPhase("n1", every) != SnapshotPhase("other-1", every) {
		t.Fatal("the phase of an ID ending in a number is not that number's")
	}
	for _, id := range []string{"", "alpha", "beta", "9999999999999999999999"} {
		if p := SnapshotPhase(id, every); p >= every {
			t.Fatalf("phase %d of %q is outside [0, %d)", p, id, every)
		}
	}
	if SnapshotPhase("alpha", every) == SnapshotPhase("beta", every) {
		t.Fatal("two hashed IDs got one phase")
	}
}
