package mvcc

import (
	"bytes"
	"math/bits"
)

// tree is the ordered key index: a B+tree of keyIndex items that also counts,
// per subtree, the items live at the latest revision. The counts make
// "how many live keys in [a, b)" cost O(log n), so a limited range over a
// huge prefix does not walk every key just to fill RangeResponse.Count.
// google/btree cannot carry such per-subtree aggregates, hence this type.
//
// Deletions (compaction and rollback only) do not rebalance; nodes that
// become empty are unlinked and the whole tree is rebuilt once it is mostly
// empty space, which keeps the code small and the amortised cost O(1).
type tree struct {
	root   *node
	n      int // items
	live   int // items live at the latest revision
	leaves int
}

const (
	// leafMax is bounded by the width of node.live.
	leafMax  = 64
	innerMax = 64
	// rebuildFill is the fill of nodes made by a rebuild: room to grow
	// without splitting at once.
	rebuildFill = 48
)

// node is a leaf (kids == nil) or an inner node.
type node struct {
	// Leaves: items in key order and a bit per item, set when live.
	items []*keyIndex
	live  uint64

	// Inner nodes: every key under kids[i] is >= seps[i] (i > 0) and
	// < seps[i+1]; count[i] is the number of live items under kids[i].
	// seps[0] is unused: kids[0] has no lower bound.
	kids  []*node
	seps  [][]byte
	count []int
}

func newLeaf() *node { return &node{items: make([]*keyIndex, 0, leafMax)} }

func newTree() tree { return tree{root: newLeaf(), leaves: 1} }

func (n *node) leaf() bool { return n.kids == nil }

func (n *node) empty() bool { return len(n.items) == 0 && len(n.kids) == 0 }

func (n *node) liveCount() int {
	if n.leaf() {
		return bits.OnesCount64(n.live)
	}
	c := 0
	for _, x := range n.count {
		c += x
	}
	return c
}

// search returns the position of the first item >= key in a leaf.
func (n *node) search(key []byte) int {
	lo, hi := 0, len(n.items)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(n.items[m].key(), key) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// child returns the index of the kid of an inner node that holds key.
func (n *node) child(key []byte) int {
	lo, hi := 1, len(n.kids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(n.seps[m], key) <= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

func (t *tree) get(key []byte) *keyIndex {
	n := t.root
	for !n.leaf() {
		n = n.kids[n.child(key)]
	}
	if i := n.search(key); i < len(n.items) && bytes.Equal(n.items[i].key(), key) {
		return n.items[i]
	}
	return nil
}

// rank returns the number of live items with a key < key.
func (t *tree) rank(key []byte) int {
	r := 0
	n := t.root
	for !n.leaf() {
		i := n.child(key)
		for _, c := range n.count[:i] {
			r += c
		}
		n = n.kids[i]
	}
	// A shift by 64 yields 0, so i == 64 masks every item.
	return r + bits.OnesCount64(n.live&(uint64(1)<<uint(n.search(key))-1))
}

// countLive returns the number of live items in [from, to); to == nil is
// unbounded.
func (t *tree) countLive(from, to []byte) int {
	hi := t.live
	if to != nil {
		hi = t.rank(to)
	}
	return hi - t.rank(from)
}

// setLive records that the item with key (present) became live or dead.
// Callers only call it on a change of state.
func (t *tree) setLive(key []byte, live bool) {
	d := -1
	if live {
		d = 1
	}
	t.live += d
	n := t.root
	for !n.leaf() {
		i := n.child(key)
		n.count[i] += d
		n = n.kids[i]
	}
	bit := uint64(1) << uint(n.search(key))
	if live {
		n.live |= bit
	} else {
		n.live &^= bit
	}
}

// insert adds ki, which must not be present.
func (t *tree) insert(ki *keyIndex, live bool) {
	t.n++
	if live {
		t.live++
	}
	right, sep := t.insertAt(t.root, ki, live, t.pastLast(ki.key()))
	if right != nil {
		l := t.root
		t.root = &node{
			kids:  []*node{l, right},
			seps:  [][]byte{nil, sep},
			count: []int{l.liveCount(), right.liveCount()},
		}
	}
}

// pastLast reports whether key sorts after every key the tree holds.
// Keys often arrive in ascending order (names with counters, a load of
// sequential keys), and such a key goes at the end of every node on the
// rightmost path: insertAt then takes the last place without a binary
// search, whose comparisons each read a key index and its key, cache
// misses once the index outgrows the caches (at 1 M keys the searches
// were most of a new key's insert; issue 22 item 5). The walk down the
// rightmost path and its one comparison stay in the cache when keys do
// arrive in order.
func (t *tree) pastLast(key []byte) bool {
	n := t.root
	for !n.leaf() {
		n = n.kids[len(n.kids)-1]
	}
	// Only an empty tree has an empty leaf: delete unlinks the others.
	return len(n.items) == 0 || bytes.Compare(n.items[len(n.items)-1].key(), key) < 0
}

// insertAt adds ki under n and returns the new right sibling of n and its
// lower bound when n had to split. last says that ki's key sorts after
// every key in n (see pastLast): it goes at the end of every node it
// passes, since every separator is a key some item at or after it holds.
func (t *tree) insertAt(n *node, ki *keyIndex, live, last bool) (*node, []byte) {
	if n.leaf() {
		i := len(n.items)
		if !last {
			i = n.search(ki.key())
		}
		var right *node
		if len(n.items) == leafMax {
			right = newLeaf()
			h := splitAt(i, leafMax)
			right.items = append(right.items, n.items[h:]...)
			right.live = n.live >> h
			clear(n.items[h:])
			n.items = n.items[:h]
			n.live &= uint64(1)<<h - 1
			t.leaves++
			if i > h {
				leafInsert(right, i-h, ki, live)
				return right, right.items[0].key()
			}
		}
		leafInsert(n, i, ki, live)
		if right != nil {
			return right, right.items[0].key()
		}
		return nil, nil
	}
	i := len(n.kids) - 1
	if !last {
		i = n.child(ki.key())
	}
	right, sep := t.insertAt(n.kids[i], ki, live, last)
	if live {
		n.count[i]++
	}
	if right == nil {
		return nil, nil
	}
	n.count[i] = n.kids[i].liveCount()
	n.kids = insertAt(n.kids, i+1, right)
	n.seps = insertAt(n.seps, i+1, sep)
	n.count = insertAt(n.count, i+1, right.liveCount())
	if len(n.kids) <= innerMax {
		return nil, nil
	}
	h := splitAt(i+1, innerMax)
	r := &node{
		kids:  append(make([]*node, 0, innerMax+1), n.kids[h:]...),
		seps:  append(make([][]byte, 0, innerMax+1), n.seps[h:]...),
		count: append(make([]int, 0, innerMax+1), n.count[h:]...),
	}
	sep = r.seps[0]
	r.seps[0] = nil
	clear(n.kids[h:])
	clear(n.seps[h:])
	n.kids, n.seps, n.count = n.kids[:h], n.seps[:h], n.count[:h]
	return r, sep
}

// splitAt returns how many of a full node's size entries stay left when one
// more goes in at position i. Keys often arrive in ascending order (names
// with counters, restores of such keys), so an insert past the last entry
// leaves the left node nearly full instead of half empty.
func splitAt(i, size int) int {
	if i >= size {
		return size - size/8
	}
	return size / 2
}

func leafInsert(n *node, i int, ki *keyIndex, live bool) {
	n.items = insertAt(n.items, i, ki)
	low := uint64(1)<<uint(i) - 1
	n.live = n.live&low | (n.live&^low)<<1
	if live {
		n.live |= 1 << uint(i)
	}
}

func insertAt[T any](s []T, i int, v T) []T {
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

func removeAt[T any](s []T, i int) []T {
	copy(s[i:], s[i+1:])
	var zero T
	s[len(s)-1] = zero
	return s[:len(s)-1]
}

// delete removes the item with key, if present, and returns it.
func (t *tree) delete(key []byte) *keyIndex {
	ki, live := t.deleteAt(t.root, key)
	if ki == nil {
		return nil
	}
	t.n--
	if live {
		t.live--
	}
	for !t.root.leaf() && len(t.root.kids) == 1 {
		t.root = t.root.kids[0]
	}
	if t.root.empty() {
		t.root = newLeaf()
		t.leaves = 1
	}
	return ki
}

func (t *tree) deleteAt(n *node, key []byte) (*keyIndex, bool) {
	if n.leaf() {
		i := n.search(key)
		if i == len(n.items) || !bytes.Equal(n.items[i].key(), key) {
			return nil, false
		}
		ki := n.items[i]
		live := n.live&(1<<uint(i)) != 0
		n.items = removeAt(n.items, i)
		low := uint64(1)<<uint(i) - 1
		n.live = n.live&low | (n.live>>1)&^low
		return ki, live
	}
	i := n.child(key)
	ki, live := t.deleteAt(n.kids[i], key)
	if ki == nil {
		return nil, false
	}
	if live {
		n.count[i]--
	}
	if n.kids[i].empty() {
		if n.kids[i].leaf() {
			t.leaves--
		}
		n.kids = removeAt(n.kids, i)
		n.seps = removeAt(n.seps, i)
		n.count = removeAt(n.count, i)
		if i == 0 && len(n.seps) > 0 {
			n.seps[0] = nil
		}
	}
	return ki, live
}

// sparse reports whether deletions left the tree mostly empty space.
func (t *tree) sparse() bool { return t.leaves > 4 && t.n < t.leaves*leafMax/4 }

// rebuild packs the items into fresh, evenly filled nodes.
func (t *tree) rebuild() {
	var level []*node
	cur := newLeaf()
	t.ascend(nil, nil, func(ki *keyIndex) bool {
		if len(cur.items) == rebuildFill {
			level = append(level, cur)
			cur = newLeaf()
		}
		cur.items = append(cur.items, ki)
		if ki.live() {
			cur.live |= 1 << uint(len(cur.items)-1)
		}
		return true
	})
	level = append(level, cur)
	t.leaves = len(level)
	for len(level) > 1 {
		var up []*node
		for i := 0; i < len(level); i += rebuildFill {
			kids := level[i:min(i+rebuildFill, len(level))]
			p := &node{
				kids:  append(make([]*node, 0, innerMax+1), kids...),
				seps:  make([][]byte, len(kids), innerMax+1),
				count: make([]int, len(kids), innerMax+1),
			}
			for j, k := range kids {
				if j > 0 {
					p.seps[j] = k.minKey()
				}
				p.count[j] = k.liveCount()
			}
			up = append(up, p)
		}
		level = up
	}
	t.root = level[0]
}

func (n *node) minKey() []byte {
	for !n.leaf() {
		n = n.kids[0]
	}
	return n.items[0].key()
}

// ascend calls fn for every item in [from, to) in key order until fn
// returns false; to == nil is unbounded.
func (t *tree) ascend(from, to []byte, fn func(*keyIndex) bool) {
	t.root.ascend(from, to, fn)
}

func (n *node) ascend(from, to []byte, fn func(*keyIndex) bool) bool {
	if n.leaf() {
		i := 0
		if from != nil {
			i = n.search(from)
		}
		for _, ki := range n.items[i:] {
			if to != nil && bytes.Compare(ki.key(), to) >= 0 {
				return false
			}
			if !fn(ki) {
				return false
			}
		}
		return true
	}
	i := 0
	if from != nil {
		i = n.child(from)
	}
	for j := i; j < len(n.kids); j++ {
		if j > i {
			from = nil
		}
		if !n.kids[j].ascend(from, to, fn) {
			return false
		}
	}
	return true
}
