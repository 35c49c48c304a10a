package mvcc

import (
	"maps"
	"slices"
	"testing"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// leased is a put with a lease.
func leased(k, v string, lease int64) op {
	return op{key: k, val: v, lease: lease}
}

// leaseHistory moves keys between leases, off them, and deletes and
// recreates them, over several revisions.
func leaseHistory(t *testing.T, s *Store) {
	apply(t, s,
		[]op{leased("a", "1", 7), leased("b", "1", 7), put("c", "1")},
		[]op{leased("a", "2", 8)},
		[]op{del("b"), leased("c", "2", 9)},
		[]op{put("a", "3"), leased("d", "1", 7)},
		[]op{leased("b", "2", 8), del("d")},
		[]op{leased("d", "2", 9), leased("e", "1", 7)},
	)
}

// liveLeases is every live key's lease at the latest revision, as a Range
// over the whole store sees it.
func liveLeases(t *testing.T, s *Store) map[string]int64 {
	res, err := s.Range([]byte{0}, []byte{0}, RangeOptions{Rev: s.Rev(), KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range res.KVs {
		if kv.Lease != 0 {
			out[string(kv.Key)] = kv.Lease
		}
	}
	return out
}

func TestRestoreFromEqualsRestore(t *testing.T) {
	eachKind(t, func(t *testing.T, s *Store) {
		leaseHistory(t, s)
		for _, floor := range []int64{0, 3} {
			if floor > 0 {
				if err := s.Compact(floor); err != nil {
					t.Fatal(err)
				}
			}
			for _, consume := range []bool{false, true} {
				snap := snapshotOf(t, s)
				kept := slices.Clone(snap)
				attached := map[string]int64{}
				r := like(t, s)
				err := r.RestoreFrom(Load{Rev: s.Rev(), CompactRev: s.CompactRev(), Versions: snap, Consume: consume,
					OnLease: func(key []byte, prev, next int64) {
						if got := attached[string(key)]; got != prev {
							t.Fatalf("key %q moves off lease %d, attached to %d", key, prev, got)
						}
						if next == 0 {
							delete(attached, string(key))
						} else {
							attached[string(key)] = next
						}
					}})
				if err != nil {
					t.Fatal(err)
				}
				// The loader built what Restore builds.
				sameStore(t, true, s, r)
				sameStore(t, true, restore(t, s), r)
				if want := liveLeases(t, s); !maps.Equal(attached, want) {
					t.Fatalf("floor %d: attachments %v, live keys' leases %v", floor, attached, want)
				}
				for i, v := range snap {
					if consume && v != nil {
						t.Fatalf("floor %d: version %d left in a consumed load", floor, i)
					}
					if !consume && v != kept[i] {
						t.Fatalf("floor %d: version %d changed by a load that was not to consume", floor, i)
					}
				}
				// What the store kept is not what the caller dropped: the
				// versions it was built from were never modified.
				for i, v := range kept {
					if want := snapshotOf(t, s)[i]; v.String() != want.String() {
						t.Fatalf("version %d modified by the load: %v, was %v", i, v, want)
					}
				}
			}
		}
	})
}

func TestReplaceFromConsumesAndLeavesTheStoreEmptyOnBadInput(t *testing.T) {
	s := New()
	leaseHistory(t, s)
	other := New()
	apply(t, other, []op{put("zz", "old")})
	snap := snapshotOf(t, s)
	if err := other.ReplaceFrom(Load{Rev: s.Rev(), Versions: snap, Consume: true}); err != nil {
		t.Fatal(err)
	}
	sameStore(t, true, s, other)
	bad := []*netsyv1.KeyVersion{{Key: []byte("k"), ModRevision: 1, Version: 1, CreateRevision: 1}, nil}
	if err := other.ReplaceFrom(Load{Rev: 3, Versions: bad, Consume: true}); err == nil || other.Rev() != 0 {
		t.Fatalf("replace with a missing version: %v, rev %d", err, other.Rev())
	}
}
