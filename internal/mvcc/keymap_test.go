package mvcc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Keys that share a hash are each found, and stay found as others come
// and go, including the one holding their hash's slot: checked against a
// map under random adds and removals with a hash of four values.
func TestKeyMapFindsKeysThatShareAHash(t *testing.T) {
	var m keyMap
	m.hash = func(k []byte) uint64 { return uint64(k[len(k)-1] % 4) }
	model := map[string]*keyIndex{}
	rng := rand.New(rand.NewPCG(7, 7))
	for step := range 5000 {
		k := fmt.Sprintf("key-%03d", rng.IntN(64))
		if ki, ok := model[k]; ok && rng.IntN(2) == 0 {
			m.del(ki)
			delete(model, k)
		} else if !ok {
			ki := newKeyIndex([]byte(k))
			m.put(ki)
			model[k] = ki
		}
		if m.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, m.len(), len(model))
		}
		for i := range 64 {
			k := fmt.Sprintf("key-%03d", i)
			if got, want := m.get([]byte(k)), model[k]; got != want {
				t.Fatalf("step %d: get(%s) = %p, want %p", step, k, got, want)
			}
		}
	}
}

// The zero keyMap, which a store emptied by a failed restore holds, is
// empty and takes keys.
func TestKeyMapZeroValue(t *testing.T) {
	var m keyMap
	if m.get([]byte("a")) != nil || m.len() != 0 {
		t.Fatal("zero keyMap not empty")
	}
	ki := newKeyIndex([]byte("a"))
	m.put(ki)
	if m.get([]byte("a")) != ki || m.len() != 1 {
		t.Fatal("zero keyMap lost a key")
	}
}
