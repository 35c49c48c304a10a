package mvcc

import (
	"bytes"
	"hash/maphash"
)

// keyMap finds a key's index in one hash lookup, as a map[string]*keyIndex
// did, but without pointers in its table: ids maps a 32-bit hash of the
// key to a slot of kis, so the collector never scans the table, and kis
// holds the one pointer per key, in the order keys arrived. At 1 M keys the
// map's table held two pointers per key to follow at every collection (its
// string and its value) and ~50 MB (issue 22 item 5). The hash is 32 bits,
// not 64, because a Go map's slot is its key and value padded to the
// larger's alignment: 8 bytes instead of 16, ~18 MB less at 1 M keys.
//
// Two keys may share a hash (at 1 M keys about a hundred pairs do): the
// first takes the slot, the others go to clash under that hash, a map
// that is empty but for such keys. Lookups compare the key, so a shared
// hash never returns the wrong index.
//
// The zero value is empty and ready. Owned by its Store, under its lock.
type keyMap struct {
	seed maphash.Seed
	// hash, when set, replaces maphash (tests force clashes with it).
	hash   func([]byte) uint64
	ids    map[uint32]uint32
	kis    []*keyIndex
	free   []uint32
	clash  map[uint32][]*keyIndex
	nclash int
}

// newKeyMap returns an empty keyMap with room for hint keys.
func newKeyMap(hint int) keyMap {
	return keyMap{seed: maphash.MakeSeed(), ids: make(map[uint32]uint32, hint), kis: make([]*keyIndex, 0, hint)}
}

func (m *keyMap) hashOf(key []byte) uint32 {
	if m.hash != nil {
		return uint32(m.hash(key))
	}
	return uint32(maphash.Bytes(m.seed, key))
}

// len is the number of keys held.
func (m *keyMap) len() int { return len(m.kis) - len(m.free) + m.nclash }

// get returns the index of key, or nil.
func (m *keyMap) get(key []byte) *keyIndex {
	if len(m.ids) == 0 {
		return nil
	}
	h := m.hashOf(key)
	id, ok := m.ids[h]
	if !ok {
		return nil
	}
	if ki := m.kis[id]; bytes.Equal(ki.key(), key) {
		return ki
	}
	for _, ki := range m.clash[h] {
		if bytes.Equal(ki.key(), key) {
			return ki
		}
	}
	return nil
}

// put adds ki, whose key must not be held.
func (m *keyMap) put(ki *keyIndex) {
	if m.ids == nil {
		*m = newKeyMap(0)
	}
	h := m.hashOf(ki.key())
	if _, taken := m.ids[h]; taken {
		if m.clash == nil {
			m.clash = map[uint32][]*keyIndex{}
		}
		m.clash[h] = append(m.clash[h], ki)
		m.nclash++
		return
	}
	m.putSlot(h, ki)
}

// putSlot gives ki, whose hash h no slot holds, a slot.
func (m *keyMap) putSlot(h uint32, ki *keyIndex) {
	var id uint32
	if n := len(m.free); n > 0 {
		id = m.free[n-1]
		m.free = m.free[:n-1]
		m.kis[id] = ki
	} else {
		id = uint32(len(m.kis))
		m.kis = append(m.kis, ki)
	}
	m.ids[h] = id
}

// del removes ki, which must be held.
func (m *keyMap) del(ki *keyIndex) {
	h := m.hashOf(ki.key())
	cs := m.clash[h]
	id, ok := m.ids[h]
	if !ok || m.kis[id] != ki {
		for i, c := range cs {
			if c == ki {
				m.dropClash(h, cs, i)
				return
			}
		}
		return
	}
	m.kis[id] = nil
	m.free = append(m.free, id)
	delete(m.ids, h)
	// A key that shares ki's hash takes the slot: get finds clash keys
	// only through their hash's slot.
	if n := len(cs); n > 0 {
		c := cs[n-1]
		m.dropClash(h, cs, n-1)
		m.putSlot(h, c)
	}
}

// dropClash removes cs[i] from the keys clashing on h.
func (m *keyMap) dropClash(h uint32, cs []*keyIndex, i int) {
	m.nclash--
	if len(cs) == 1 {
		delete(m.clash, h)
		return
	}
	m.clash[h] = removeAt(cs, i)
}
