//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type kvOpKind int

const (
	opGet kvOpKind = iota
	opPut
	opCAS
)

type kvInput struct {
	op    kvOpKind
	key   string
	value string // put, cas: new value
	old   string // cas: expected value ("" = absent)
}

type kvOutput struct {
	value   string // get: value read ("" = absent)
	ok      bool   // cas: swapped
	unknown bool   // the call failed; its effect may or may not have happened
}

// kvModel is a register per key; histories are partitioned by key, so the
// state is one value ("" = absent; the test never writes empty values).
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(kvInput).key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts [][]porcupine.Operation
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(kvInput), output.(kvOutput)
		switch in.op {
		case opGet:
			return out.value == st, st
		case opPut:
			return true, in.value
		default: // opCAS
			if st == in.old {
				return out.ok || out.unknown, in.value
			}
			return !out.ok, st
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		switch in.op {
		case opGet:
			return fmt.Sprintf("get(%s) -> %q", in.key, out.value)
		case opPut:
			return fmt.Sprintf("put(%s, %q)", in.key, in.value)
		default:
			return fmt.Sprintf("cas(%s, %q -> %q) -> ok=%v unknown=%v", in.key, in.old, in.value, out.ok, out.unknown)
		}
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
}

// TestLinearizability records a concurrent history of get, put and
// compare-and-swap on a few keys from several clients and checks it with
// porcupine against a sequential register model.
func TestLinearizability(t *testing.T) {
	s := startServer(t)
	const (
		clients  = 5
		keys     = 3
		duration = 3 * time.Second
	)
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }

	var (
		mu  sync.Mutex
		ops []porcupine.Operation
		wg  sync.WaitGroup
	)
	stopAt := time.Now().Add(duration)
	for c := range clients {
		cli := newClient(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(base.UnixNano())))
			last := map[string]string{} // this client's last read per key, for cas
			for n := 0; time.Now().Before(stopAt); n++ {
				key := fmt.Sprintf("lin/%d", rng.IntN(keys))
				in := kvInput{key: key, value: fmt.Sprintf("c%d-%d", c, n)}
				switch r := rng.IntN(100); {
				case r < 40:
					in.op = opGet
				case r < 75:
					in.op = opPut
				default:
					in.op = opCAS
					in.old = last[key]
				}
				call := now()
				out, err := runKVOp(t.Context(), cli, in)
				ret := now()
				if err != nil {
					if in.op == opGet {
						continue // a failed read has no effect to account for
					}
					// The write may still take effect at any later time.
					out, ret = kvOutput{unknown: true}, math.MaxInt64
				}
				if in.op == opGet {
					last[key] = out.value
				}
				mu.Lock()
				ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("recorded %d operations", len(ops))

	res, info := porcupine.CheckOperationsVerbose(kvModel, ops, time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		path := filepath.Join(t.ArtifactDir(), "linearizability.html")
		if err := porcupine.VisualizePath(kvModel, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		t.Fatalf("history of %d operations is not linearizable; visualization: %s (kept with go test -artifacts)", len(ops), path)
	default:
		t.Fatalf("linearizability check inconclusive (%s) for %d operations", res, len(ops))
	}
}

func runKVOp(ctx context.Context, cli *clientv3.Client, in kvInput) (kvOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch in.op {
	case opGet:
		resp, err := cli.Get(ctx, in.key)
		if err != nil {
			return kvOutput{}, err
		}
		if len(resp.Kvs) == 0 {
			return kvOutput{}, nil
		}
		return kvOutput{value: string(resp.Kvs[0].Value)}, nil
	case opPut:
		_, err := cli.Put(ctx, in.key, in.value)
		return kvOutput{}, err
	default:
		cmp := clientv3.Compare(clientv3.Value(in.key), "=", in.old)
		if in.old == "" {
			cmp = clientv3.Compare(clientv3.CreateRevision(in.key), "=", 0)
		}
		resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(in.key, in.value)).Commit()
		if err != nil {
			return kvOutput{}, err
		}
		return kvOutput{ok: resp.Succeeded}, nil
	}
}

// TestKVModelRejectsStaleRead proves the model can fail: a read that
// returns an overwritten value after the overwrite completed is illegal.
func TestKVModelRejectsStaleRead(t *testing.T) {
	put := func(c int, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: kvInput{op: opPut, key: "k", value: v}, Call: call, Output: kvOutput{}, Return: ret}
	}
	get := func(c int, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: kvInput{op: opGet, key: "k"}, Call: call, Output: kvOutput{value: v}, Return: ret}
	}
	stale := []porcupine.Operation{put(0, "a", 0, 10), put(0, "b", 20, 30), get(1, "a", 40, 50)}
	if porcupine.CheckOperations(kvModel, stale) {
		t.Fatal("stale read accepted")
	}
	concurrent := []porcupine.Operation{put(0, "a", 0, 10), put(0, "b", 20, 30), get(1, "a", 25, 50)}
	if !porcupine.CheckOperations(kvModel, concurrent) {
		t.Fatal("read concurrent with the overwrite rejected")
	}
	lostCAS := []porcupine.Operation{
		put(0, "a", 0, 10),
		{ClientId: 1, Input: kvInput{op: opCAS, key: "k", old: "a", value: "c"}, Call: 20, Output: kvOutput{ok: false}, Return: 30},
	}
	if porcupine.CheckOperations(kvModel, lostCAS) {
		t.Fatal("failed cas on a matching value accepted")
	}
}
