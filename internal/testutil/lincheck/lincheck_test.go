package lincheck

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// op builds one operation on client c over [call, ret].
func op(c int, in Input, out Output, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: c, Input: in, Output: out, Call: call, Return: ret}
}

func put(c int, k, v string, call, ret int64) porcupine.Operation {
	return op(c, Input{Op: Put, Key: k, Value: v}, Output{}, call, ret)
}

func get(c int, k, v string, call, ret int64) porcupine.Operation {
	return op(c, Input{Op: Get, Key: k}, Output{Value: v}, call, ret)
}

func del(c int, k string, existed bool, call, ret int64) porcupine.Operation {
	return op(c, Input{Op: Delete, Key: k}, Output{OK: existed}, call, ret)
}

func putPair(c int, k1, v1, k2, v2 string, call, ret int64) porcupine.Operation {
	return op(c, Input{Op: PutPair, Key: k1, Value: v1, Key2: k2, Value2: v2}, Output{}, call, ret)
}

func getPair(c int, k1, k2, v1, v2 string, call, ret int64) porcupine.Operation {
	return op(c, Input{Op: GetPair, Key: k1, Key2: k2}, Output{Value: v1, Value2: v2}, call, ret)
}

func check(t *testing.T, name string, want bool, ops ...porcupine.Operation) {
	t.Helper()
	if got := porcupine.CheckOperations(Model, ops); got != want {
		t.Errorf("%s: linearizable = %v, want %v", name, got, want)
	}
}

// TestKVModelRejectsStaleRead proves the model can fail: a read that
// returns an overwritten value after the overwrite completed is illegal.
func TestKVModelRejectsStaleRead(t *testing.T) {
	check(t, "stale read", false, put(0, "k", "a", 0, 10), put(0, "k", "b", 20, 30), get(1, "k", "a", 40, 50))
	check(t, "read concurrent with the overwrite", true, put(0, "k", "a", 0, 10), put(0, "k", "b", 20, 30), get(1, "k", "a", 25, 50))
	check(t, "failed cas on a matching value", false,
		put(0, "k", "a", 0, 10),
		op(1, Input{Op: CAS, Key: "k", Old: "a", Value: "c"}, Output{OK: false}, 20, 30))
}

// TestKVModelDelete: a deleted key reads as absent, deleting an absent key
// is fine, and a read that sees the deleted value come back is illegal.
func TestKVModelDelete(t *testing.T) {
	check(t, "resurrected after delete", false,
		put(0, "k", "a", 0, 10), del(0, "k", true, 20, 30), get(1, "k", "a", 40, 50))
	check(t, "resurrected after a later read saw it gone", false,
		put(0, "k", "a", 0, 10), del(0, "k", true, 20, 30), get(1, "k", "", 40, 50), get(2, "k", "a", 60, 70))
	check(t, "read concurrent with the delete", true,
		put(0, "k", "a", 0, 10), del(0, "k", true, 20, 30), get(1, "k", "a", 25, 50))
	check(t, "absent after delete", true,
		put(0, "k", "a", 0, 10), del(0, "k", true, 20, 30), get(1, "k", "", 40, 50))
	check(t, "delete of an absent key", true, del(0, "k", false, 0, 10), get(1, "k", "", 20, 30))
	check(t, "delete of an absent key that claims it existed", false, del(0, "k", true, 0, 10))
	check(t, "delete of a present key that claims it was absent", false, put(0, "k", "a", 0, 10), del(0, "k", false, 20, 30))
	check(t, "create after delete", true,
		put(0, "k", "a", 0, 10), del(0, "k", true, 20, 30),
		op(1, Input{Op: CAS, Key: "k", Old: "", Value: "b"}, Output{OK: true}, 40, 50), get(2, "k", "b", 60, 70))
	// A delete whose call failed may take effect at any later time.
	unknown := op(1, Input{Op: Delete, Key: "k"}, Output{Unknown: true}, 20, 1<<62)
	check(t, "unknown delete, value kept", true, put(0, "k", "a", 0, 10), unknown, get(2, "k", "a", 40, 50))
	check(t, "unknown delete, value gone", true, put(0, "k", "a", 0, 10), unknown, get(2, "k", "", 40, 50))
	check(t, "unknown delete, value gone then back", false,
		put(0, "k", "a", 0, 10), unknown, get(2, "k", "", 40, 50), get(2, "k", "a", 60, 70))
}

// TestKVModelPair: a two-key put is atomic, so a read of both keys never
// sees half of it, and a pair joins its keys into one partition.
func TestKVModelPair(t *testing.T) {
	first := putPair(0, "a", "a1", "b", "b1", 0, 10)
	check(t, "both new", true, first, putPair(0, "a", "a2", "b", "b2", 20, 30), getPair(1, "a", "b", "a2", "b2", 25, 40))
	check(t, "both old", true, first, putPair(0, "a", "a2", "b", "b2", 20, 30), getPair(1, "a", "b", "a1", "b1", 25, 40))
	check(t, "torn read during the put", false, first, putPair(0, "a", "a2", "b", "b2", 20, 30), getPair(1, "a", "b", "a2", "b1", 25, 40))
	check(t, "torn read in two single reads", false, first, putPair(0, "a", "a2", "b", "b2", 20, 60),
		get(1, "a", "a2", 25, 30), get(1, "b", "b1", 35, 40))
	check(t, "pair read sees a single-key delete", true, first, del(1, "b", true, 20, 30), getPair(2, "a", "b", "a1", "", 40, 50))
	check(t, "pair read misses a finished delete", false, first, del(1, "b", true, 20, 30), getPair(2, "a", "b", "a1", "b1", 40, 50))

	parts := Model.Partition([]porcupine.Operation{
		put(0, "a", "1", 0, 1), put(0, "b", "1", 0, 1), put(0, "c", "1", 0, 1), put(0, "d", "1", 0, 1),
		putPair(0, "a", "2", "b", "2", 2, 3), getPair(0, "c", "d", "1", "1", 2, 3), del(0, "e", false, 2, 3),
	})
	if len(parts) != 3 || len(parts[0]) != 3 || len(parts[1]) != 3 || len(parts[2]) != 1 {
		t.Errorf("partitions %v, want {a b} {c d} {e}", parts)
	}
}
