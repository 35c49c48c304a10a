package mvcc

import (
	"bytes"
	"hash/maphash"
	"unsafe"
)

// keyMap finds a key's index in one hash lookup, as a map[string]*keyIndex
// did, but without pointers in its table: ids maps a hash of the key to a
// slot of kis, so the collector never scans the table, and kis holds the
// one pointer per key, in the order keys arrived. At 1 M keys the map's
// table held two pointers per key to follow at every collection (its
// string and its value) and ~50 MB (issue 22 item 5).
//
// Two keys may share a hash: the first takes the slot, the others go to
// clash, a map of their own that is empty but for such rare keys. Lookups
// compare the key, so a shared hash never returns the wrong index.
//
// The zero value is empty and ready. Owned by its Store, under its lock.
type keyMap struct {
	seed maphash.Seed
	// hash, when set, replaces maphash (tests force clashes with it).
	hash  func([]byte) uint64
	ids   map[uint64]uint32
	kis   []*keyIndex
	free  []uint32
	clash map[string]*keyIndex
}

// newKeyMap returns an empty keyMap with room for hint keys.
func newKeyMap(hint int) keyMap {
	return keyMap{seed: maphash.MakeSeed(), ids: make(map[uint64]uint32, hint), kis: make([]*keyIndex, 0, hint)}
}

func (m *keyMap) hashOf(key []byte) uint64 {
	if m.hash != nil {
		return m.hash(key)
	}
	return maphash.Bytes(m.seed, key)
}

// len is the number of keys held.
func (m *keyMap) len() int { return len(m.kis) - len(m.free) + len(m.clash) }

// get returns the index of key, or nil.
func (m *keyMap) get(key []byte) *keyIndex {
	if len(m.ids) == 0 {
		return nil
	}
	id, ok := m.ids[m.hashOf(key)]
	if !ok {
		return nil
	}
	if ki := m.kis[id]; bytes.Equal(ki.key(), key) {
		return ki
	}
	return m.clash[string(key)]
}

// put adds ki, whose key must not be held.
func (m *keyMap) put(ki *keyIndex) {
	if m.ids == nil {
		*m = newKeyMap(0)
	}
	h := m.hashOf(ki.key())
	if _, taken := m.ids[h]; taken {
		if m.clash == nil {
			m.clash = map[string]*keyIndex{}
		}
		// The map key aliases ki.key(): stored keys are never modified.
		m.clash[unsafe.String(unsafe.SliceData(ki.key()), len(ki.key()))] = ki
		return
	}
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
	id, ok := m.ids[h]
	if !ok || m.kis[id] != ki {
		delete(m.clash, string(ki.key()))
		return
	}
	m.kis[id] = nil
	m.free = append(m.free, id)
	delete(m.ids, h)
	// A key that clashed with ki's hash takes the slot: get finds clash
	// keys only through their hash's slot.
	for k, c := range m.clash {
		if m.hashOf(c.key()) == h {
			delete(m.clash, k)
			m.put(c)
			return
		}
	}
}
