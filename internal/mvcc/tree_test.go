package mvcc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// treeModel is the obvious implementation: a sorted slice.
type treeModel struct {
	keys []string
	live map[string]bool
}

func (m *treeModel) countLive(from, to string, bounded bool) int {
	i, _ := slices.BinarySearch(m.keys, from)
	j := len(m.keys)
	if bounded {
		j, _ = slices.BinarySearch(m.keys, to)
	}
	c := 0
	for _, k := range m.keys[i:max(i, j)] {
		if m.live[k] {
			c++
		}
	}
	return c
}

// checkTree verifies the structural invariants: separators bound their
// subtrees and counts match.
func checkTree(t *testing.T, tr *tree) {
	t.Helper()
	var items, live, leaves int
	var walk func(n *node, lo, hi []byte) int
	walk = func(n *node, lo, hi []byte) int {
		if n.leaf() {
			leaves++
			if len(n.items) > leafMax {
				t.Fatalf("leaf has %d items", len(n.items))
			}
			if n.live>>uint(len(n.items)) != 0 {
				t.Fatalf("live bits beyond items: %b (%d items)", n.live, len(n.items))
			}
			for i, ki := range n.items {
				if lo != nil && bytes.Compare(ki.key(), lo) < 0 || hi != nil && bytes.Compare(ki.key(), hi) >= 0 {
					t.Fatalf("key %q outside [%q, %q)", ki.key(), lo, hi)
				}
				if i > 0 && bytes.Compare(n.items[i-1].key(), ki.key()) >= 0 {
					t.Fatalf("keys out of order: %q, %q", n.items[i-1].key(), ki.key())
				}
				if got := n.live&(1<<uint(i)) != 0; got != ki.live() {
					t.Fatalf("key %q live bit %v, key live %v", ki.key(), got, ki.live())
				}
			}
			items += len(n.items)
			c := n.liveCount()
			live += c
			return c
		}
		if len(n.kids) == 0 || len(n.kids) > innerMax || len(n.seps) != len(n.kids) || len(n.count) != len(n.kids) {
			t.Fatalf("inner node with %d kids, %d seps, %d counts", len(n.kids), len(n.seps), len(n.count))
		}
		total := 0
		for i, k := range n.kids {
			l, h := lo, hi
			if i > 0 {
				l = n.seps[i]
			}
			if i+1 < len(n.kids) {
				h = n.seps[i+1]
			}
			c := walk(k, l, h)
			if c != n.count[i] {
				t.Fatalf("count %d, subtree holds %d live", n.count[i], c)
			}
			total += c
		}
		return total
	}
	walk(tr.root, nil, nil)
	if items != tr.n || live != tr.live || leaves != tr.leaves {
		t.Fatalf("tree says n=%d live=%d leaves=%d, holds %d, %d, %d", tr.n, tr.live, tr.leaves, items, live, leaves)
	}
}

// liveKI returns a keyIndex whose live() answers live.
func liveKI(key string, live bool) *keyIndex {
	ki := newKeyIndex([]byte(key))
	setKILive(ki, live)
	return ki
}

func setKILive(ki *keyIndex, live bool) {
	v := int64(0)
	if live {
		v = 1
	}
	ki.hist = []*mvccpb.KeyValue{{Key: ki.key(), Version: v}}
}

func TestTreeRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tr := newTree()
	m := &treeModel{live: map[string]bool{}}
	key := func() string { return fmt.Sprintf("k%05d", rng.IntN(8000)) }
	depth := 0
	for step := range 30000 {
		k := key()
		_, present := slices.BinarySearch(m.keys, k)
		switch op := rng.IntN(10); {
		case op < 5 || step < 8000: // insert or toggle
			if !present {
				live := rng.IntN(3) > 0
				tr.insert(liveKI(k, live), live)
				i, _ := slices.BinarySearch(m.keys, k)
				m.keys = slices.Insert(m.keys, i, k)
				m.live[k] = live
			} else {
				ki := tr.get([]byte(k))
				live := !m.live[k]
				setKILive(ki, live)
				tr.setLive(ki.key(), live)
				m.live[k] = live
			}
		case op < 8 || step > 25000: // delete
			got := tr.delete([]byte(k))
			if (got != nil) != present {
				t.Fatalf("delete %q: got %v, present %v", k, got, present)
			}
			if present {
				i, _ := slices.BinarySearch(m.keys, k)
				m.keys = slices.Delete(m.keys, i, i+1)
				delete(m.live, k)
			}
			if tr.sparse() {
				tr.rebuild()
			}
		default: // queries
			if got := tr.get([]byte(k)); (got != nil) != present || got != nil && string(got.key()) != k {
				t.Fatalf("get %q: %v, present %v", k, got, present)
			}
			ai := rng.IntN(8000)
			a, b := fmt.Sprintf("k%05d", ai), fmt.Sprintf("k%05d", ai+rng.IntN(300))
			if got, want := tr.countLive([]byte(a), []byte(b)), m.countLive(a, b, true); got != want {
				t.Fatalf("countLive [%q, %q) = %d, want %d", a, b, got, want)
			}
			if step%20 == 0 {
				if got, want := tr.countLive([]byte(a), nil), m.countLive(a, "", false); got != want {
					t.Fatalf("countLive [%q, ∞) = %d, want %d", a, got, want)
				}
			}
			var got []string
			tr.ascend([]byte(a), []byte(b), func(ki *keyIndex) bool {
				got = append(got, string(ki.key()))
				return len(got) < 100
			})
			i, _ := slices.BinarySearch(m.keys, a)
			j, _ := slices.BinarySearch(m.keys, b)
			want := m.keys[i:min(j, i+100)]
			if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("ascend [%q, %q): %v, want %v", a, b, got, want)
			}
		}
		d := 1
		for n := tr.root; !n.leaf(); n = n.kids[0] {
			d++
		}
		depth = max(depth, d)
		if step%5000 == 0 || step == 29999 {
			checkTree(t, &tr)
		}
	}
	checkTree(t, &tr)
	if depth < 3 {
		t.Fatalf("tree reached depth %d only", depth)
	}
	if len(m.keys) != tr.n {
		t.Fatalf("tree holds %d items, model %d", tr.n, len(m.keys))
	}
}

func TestTreeEmptyAndRebuild(t *testing.T) {
	tr := newTree()
	if tr.get([]byte("a")) != nil || tr.countLive(nil, nil) != 0 || tr.delete([]byte("a")) != nil {
		t.Fatal("empty tree answers")
	}
	for i := range 10000 {
		k := fmt.Sprintf("%06d", i)
		tr.insert(liveKI(k, i%2 == 0), i%2 == 0)
	}
	checkTree(t, &tr)
	for i := range 10000 {
		if i%50 != 0 {
			tr.delete(fmt.Appendf(nil, "%06d", i))
		}
	}
	checkTree(t, &tr)
	if !tr.sparse() {
		t.Fatalf("tree with %d items in %d leaves not sparse", tr.n, tr.leaves)
	}
	tr.rebuild()
	checkTree(t, &tr)
	if tr.leaves != 5 || tr.live != 200 {
		t.Fatalf("rebuilt: %d leaves, %d live", tr.leaves, tr.live)
	}
	for i := range 10000 {
		tr.delete(fmt.Appendf(nil, "%06d", i))
	}
	checkTree(t, &tr)
	if tr.n != 0 || !tr.root.leaf() {
		t.Fatal("tree not empty after deleting everything")
	}
}

// Keys past the last one take pastLast's path without a search; mixed
// with keys that go between others and with deletes of the last key
// (after which an earlier separator bounds the end), the tree stays the
// model's.
func TestTreeAscendingInsertsMixedWithOthers(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	tr := newTree()
	m := &treeModel{live: map[string]bool{}}
	next := 0
	for step := range 20000 {
		var k string
		switch op := rng.IntN(10); {
		case op < 7:
			next += 1 + rng.IntN(3)
			k = fmt.Sprintf("k%07d", next)
		case op < 9:
			k = fmt.Sprintf("k%07d", rng.IntN(next+1))
		default:
			if len(m.keys) == 0 {
				continue
			}
			// Delete the last key, or a run of them.
			for range 1 + rng.IntN(80) {
				if len(m.keys) == 0 {
					break
				}
				last := m.keys[len(m.keys)-1]
				if tr.delete([]byte(last)) == nil {
					t.Fatalf("step %d: delete %q found nothing", step, last)
				}
				m.keys = m.keys[:len(m.keys)-1]
				delete(m.live, last)
			}
			continue
		}
		i, present := slices.BinarySearch(m.keys, k)
		if present {
			continue
		}
		live := rng.IntN(4) > 0
		tr.insert(liveKI(k, live), live)
		m.keys = slices.Insert(m.keys, i, k)
		m.live[k] = live
		if step%2000 == 0 {
			checkTree(t, &tr)
		}
	}
	checkTree(t, &tr)
	var got []string
	tr.ascend(nil, nil, func(ki *keyIndex) bool {
		got = append(got, string(ki.key()))
		return true
	})
	if !slices.Equal(got, m.keys) {
		t.Fatalf("tree holds %d keys, model %d, or in another order", len(got), len(m.keys))
	}
	if got, want := tr.countLive(nil, nil), m.countLive("", "", false); got != want {
		t.Fatalf("%d live, want %d", got, want)
	}
}

// Inserts of ascending keys into a tree of a million, as a load of
// sequential keys makes them: each goes past the last key.
func BenchmarkTreeInsertAscending(b *testing.B) {
	const base = 1_000_000
	tr := newTree()
	kis := make([]*keyIndex, base+b.N)
	for i := range kis {
		kis[i] = liveKI(fmt.Sprintf("%09d", i), true)
	}
	for _, ki := range kis[:base] {
		tr.insert(ki, true)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, ki := range kis[base:] {
		tr.insert(ki, true)
	}
}
