package mvcc

import (
	"fmt"
	"math/rand/v2"
	"runtime"
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

// The key map costs at most 32 bytes per key at a quarter million keys
// (issue 22 item 5): its table holds a 32-bit hash and a 32-bit slot per
// key, and its slots one pointer. With a 64-bit hash a Go map's slot was
// 16 bytes, and the map ~44 bytes per key with its slots.
func TestKeyMapTakesAtMost32BytesPerKey(t *testing.T) {
	const n = 1 << 18
	kis := make([]*keyIndex, n)
	for i := range kis {
		kis[i] = newKeyIndex(fmt.Appendf(nil, "%08d", i))
	}
	before := heapAlloc()
	var m keyMap
	for _, ki := range kis {
		m.put(ki)
	}
	after := heapAlloc()
	perKey := float64(after-before) / n
	t.Logf("%.1f bytes per key", perKey)
	if perKey > 32 {
		t.Errorf("key map takes %.1f bytes per key, want at most 32", perKey)
	}
	if m.get(kis[n/2].key()) != kis[n/2] {
		t.Fatal("key map lost a key")
	}
	runtime.KeepAlive(kis)
}

// heapAlloc is the heap in use after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
