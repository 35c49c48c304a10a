package engine

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// handover is a MemStorage that hands over a copy of its snapshot on
// every load, as the local log does, and says so.
type handover struct {
	*enginetest.MemStorage
	mu   sync.Mutex
	last []*netsyv1.KeyVersion
}

func (h *handover) LoadSnapshot() (*datafile.Snapshot, error) {
	s, err := h.MemStorage.LoadSnapshot()
	if s == nil || err != nil {
		return s, err
	}
	cp := &datafile.Snapshot{Header: s.Header, KVs: slices.Clone(s.KVs), Leases: s.Leases}
	h.mu.Lock()
	h.last = cp.KVs
	h.mu.Unlock()
	return cp, nil
}

func (h *handover) HandsOverSnapshots() bool { return true }

// leaseKeys is every lease's attached keys.
func leaseKeys(e *Engine, ids []int64) map[int64][]string {
	out := map[int64][]string{}
	for _, id := range ids {
		for _, k := range e.lease.keys(id) {
			out[id] = append(out[id], string(k))
		}
	}
	return out
}

// A restart attaches keys to leases as the snapshot loads: the result is
// what a pass over every live key (reattach, which it replaces) gives,
// whether the engine consumes the snapshot or not, and a storage that
// keeps its snapshot can hand it out again.
func TestRestartAttachesLeasesAsTheSnapshotLoads(t *testing.T) {
	for _, consume := range []bool{false, true} {
		t.Run(fmt.Sprintf("consume=%v", consume), func(t *testing.T) {
			mem := &enginetest.MemStorage{}
			var st Storage = mem
			ho := &handover{MemStorage: mem}
			if consume {
				st = ho
			}
			snapEvery := uint64(1000)
			spill := t.TempDir()
			h := newHarness(t, mem, func(c *Config) { c.Storage, c.SnapshotEntries, c.SpillDir, c.SpillMin = st, snapEvery, spill, 1 })
			ids := []int64{7, 8, 9}
			for _, id := range ids {
				if _, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{ID: id, TTL: 600}); err != nil {
					t.Fatal(err)
				}
			}
			with := func(id int64) func(*pb.PutRequest) { return func(r *pb.PutRequest) { r.Lease = id } }
			for i := range 40 {
				h.put(fmt.Sprintf("k%02d", i%13), fmt.Sprint(i), with(ids[i%3]))
				switch i % 5 {
				case 1:
					h.put(fmt.Sprintf("k%02d", i%13), "off")
				case 3:
					if _, err := h.e.DeleteRange(ctx(t), &pb.DeleteRangeRequest{Key: []byte(fmt.Sprintf("k%02d", (i+4)%13))}); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := leaseKeys(h.e, ids)
			if len(want[7])+len(want[8])+len(want[9]) == 0 {
				t.Fatal("the history left no key on a lease")
			}
			// Everything in the snapshot, nothing to replay.
			snapEvery = 1
			h.reopen()
			h.put("last", "x")
			waitFor(t, mem.HasSnapshot)
			for range 2 {
				h.reopen()
				if got := leaseKeys(h.e, ids); !equalKeys(got, want) {
					t.Fatalf("attachments after a restart %v, before %v", got, want)
				}
				h.e.lease.reattachAll(h.e.store, h.e.CurrentRevision())
				if got := leaseKeys(h.e, ids); !equalKeys(got, want) {
					t.Fatalf("a pass over every key attaches %v, before the restart %v", got, want)
				}
			}
			ho.mu.Lock()
			defer ho.mu.Unlock()
			if consume != (ho.last != nil) {
				t.Fatalf("consume=%v but the handover storage was asked for %d versions", consume, len(ho.last))
			}
			for i, v := range ho.last {
				if v != nil {
					t.Fatalf("version %d of a snapshot handed over was kept after the load", i)
				}
			}
			if s, _ := mem.LoadSnapshot(); slices.Contains(s.KVs, nil) {
				t.Fatal("the storage's own snapshot lost versions to a load")
			}
		})
	}
}

func equalKeys(a, b map[int64][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for id, ks := range a {
		if !slices.Equal(ks, b[id]) {
			return false
		}
	}
	return true
}
