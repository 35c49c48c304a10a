// Package lincheck records concurrent histories of get, put, delete and
// compare-and-swap on a few keys, and of two-key transactions (a put of
// both keys, a read of both), through etcd clients and checks them with
// porcupine against a map of registers. The e2e suites and the in-process
// power-loss and cluster tests share it.
//
// Histories are partitioned by the keys an operation touches: keys that no
// two-key operation joins are checked one by one, so a client that pairs
// its keys (k with one fixed partner) keeps the check as fast as per-key
// registers; pairing keys at random would make one partition of them all.
//
// A write whose call failed is recorded with an unknown outcome that may
// take effect at any later time (its return is open-ended); a failed read
// is dropped, since it had no effect. This package must never be imported
// by non-test code.
package lincheck

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Kind is an operation of the model.
type Kind int

const (
	Get Kind = iota
	Put
	CAS
	Delete
	// PutPair puts Key and Key2 in one transaction.
	PutPair
	// GetPair reads Key and Key2 in one transaction.
	GetPair
)

// Input is one call.
type Input struct {
	Op     Kind
	Key    string
	Value  string // put, cas, put pair: new value of Key
	Old    string // cas: expected value ("" = absent)
	Key2   string // pair operations: the second key
	Value2 string // put pair: new value of Key2
}

// Output is what the call returned.
type Output struct {
	Value   string // get, get pair: value of Key read ("" = absent)
	Value2  string // get pair: value of Key2 read ("" = absent)
	OK      bool   // cas: swapped; delete: the key existed
	Unknown bool   // the call failed; its effect may or may not have happened
	Rev     int64  // the response header's revision (0 when unknown)
}

// keys lists the keys the call touches.
func (in Input) keys() []string {
	if in.Op == PutPair || in.Op == GetPair {
		return []string{in.Key, in.Key2}
	}
	return []string{in.Key}
}

// state maps each key of a partition that exists to its value; it is never
// modified, a step that writes returns a copy. Callers never write empty
// values, so "" reads as absent.
type state map[string]string

func (s state) with(kv ...string) state {
	n := maps.Clone(s)
	if n == nil {
		n = state{}
	}
	for i := 0; i < len(kv); i += 2 {
		n[kv[i]] = kv[i+1]
	}
	return n
}

func (s state) without(k string) state {
	if _, ok := s[k]; !ok {
		return s
	}
	n := maps.Clone(s)
	delete(n, k)
	return n
}

// Model is a map of registers, partitioned by the keys operations join.
var Model = porcupine.Model{
	Partition: partition,
	Init:      func() any { return state{} },
	Step: func(st, input, output any) (bool, any) {
		s, in, out := st.(state), input.(Input), output.(Output)
		switch in.Op {
		case Get:
			return out.Value == s[in.Key], s
		case Put:
			return true, s.with(in.Key, in.Value)
		case Delete:
			_, present := s[in.Key]
			return out.Unknown || out.OK == present, s.without(in.Key)
		case PutPair:
			return true, s.with(in.Key, in.Value, in.Key2, in.Value2)
		case GetPair:
			return out.Value == s[in.Key] && out.Value2 == s[in.Key2], s
		default: // CAS
			if s[in.Key] == in.Old {
				return out.OK || out.Unknown, s.with(in.Key, in.Value)
			}
			return !out.OK, s
		}
	},
	Equal: func(a, b any) bool { return maps.Equal(a.(state), b.(state)) },
	Hash: func(st any) uint64 {
		var sum uint64 // order-independent: keys are unique
		for k, v := range st.(state) {
			h := fnv.New64a()
			h.Write([]byte(k))
			h.Write([]byte{0})
			h.Write([]byte(v))
			sum += h.Sum64()
		}
		return sum
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		switch in.Op {
		case Get:
			return fmt.Sprintf("get(%s) -> %q", in.Key, out.Value)
		case Put:
			return fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
		case Delete:
			return fmt.Sprintf("delete(%s) -> existed=%v unknown=%v", in.Key, out.OK, out.Unknown)
		case PutPair:
			return fmt.Sprintf("put(%s, %q; %s, %q)", in.Key, in.Value, in.Key2, in.Value2)
		case GetPair:
			return fmt.Sprintf("get(%s; %s) -> %q; %q", in.Key, in.Key2, out.Value, out.Value2)
		default:
			return fmt.Sprintf("cas(%s, %q -> %q) -> ok=%v unknown=%v", in.Key, in.Old, in.Value, out.OK, out.Unknown)
		}
	},
	DescribeState: func(st any) string {
		s := st.(state)
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(s)) {
			fmt.Fprintf(&b, "%s=%q ", k, s[k])
		}
		return strings.TrimSpace(b.String())
	},
}

// partition splits history into the connected groups of keys that pair
// operations join (union-find), ordered by each group's root key.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	parent := map[string]string{}
	var find func(k string) string
	find = func(k string) string {
		p, ok := parent[k]
		if !ok {
			parent[k] = k
			return k
		}
		if p == k {
			return k
		}
		r := find(p)
		parent[k] = r
		return r
	}
	for _, op := range history {
		ks := op.Input.(Input).keys()
		r := find(ks[0])
		for _, k := range ks[1:] {
			if o := find(k); o != r {
				parent[o] = r
			}
		}
	}
	byRoot := map[string][]porcupine.Operation{}
	for _, op := range history {
		r := find(op.Input.(Input).Key)
		byRoot[r] = append(byRoot[r], op)
	}
	var parts [][]porcupine.Operation
	for _, r := range slices.Sorted(maps.Keys(byRoot)) {
		parts = append(parts, byRoot[r])
	}
	return parts
}

// Do runs one call against cli, bounded by timeout.
func Do(ctx context.Context, cli *clientv3.Client, in Input, timeout time.Duration) (Output, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch in.Op {
	case Get:
		resp, err := cli.Get(ctx, in.Key)
		if err != nil {
			return Output{}, err
		}
		if len(resp.Kvs) == 0 {
			return Output{Rev: resp.Header.Revision}, nil
		}
		return Output{Value: string(resp.Kvs[0].Value), Rev: resp.Header.Revision}, nil
	case Put:
		resp, err := cli.Put(ctx, in.Key, in.Value)
		if err != nil {
			return Output{}, err
		}
		return Output{Rev: resp.Header.Revision}, nil
	case Delete:
		resp, err := cli.Delete(ctx, in.Key)
		if err != nil {
			return Output{}, err
		}
		return Output{OK: resp.Deleted > 0, Rev: resp.Header.Revision}, nil
	case PutPair:
		resp, err := cli.Txn(ctx).Then(clientv3.OpPut(in.Key, in.Value), clientv3.OpPut(in.Key2, in.Value2)).Commit()
		if err != nil {
			return Output{}, err
		}
		return Output{Rev: resp.Header.Revision}, nil
	case GetPair:
		resp, err := cli.Txn(ctx).Then(clientv3.OpGet(in.Key), clientv3.OpGet(in.Key2)).Commit()
		if err != nil {
			return Output{}, err
		}
		out := Output{Rev: resp.Header.Revision}
		for i, r := range resp.Responses {
			if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
				if i == 0 {
					out.Value = string(kvs[0].Value)
				} else {
					out.Value2 = string(kvs[0].Value)
				}
			}
		}
		return out, nil
	default:
		cmp := clientv3.Compare(clientv3.Value(in.Key), "=", in.Old)
		if in.Old == "" {
			cmp = clientv3.Compare(clientv3.CreateRevision(in.Key), "=", 0)
		}
		resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(in.Key, in.Value)).Commit()
		if err != nil {
			return Output{}, err
		}
		return Output{OK: resp.Succeeded, Rev: resp.Header.Revision}, nil
	}
}

// History collects operations from many goroutines against one time base.
type History struct {
	base time.Time
	mu   sync.Mutex
	ops  []porcupine.Operation
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{base: time.Now()} }

// Now is the history's clock, for Call and Return times.
func (h *History) Now() int64 { return int64(time.Since(h.base)) }

// Run performs in through cli and records it: a failed write as unknown
// (open-ended), a failed read not at all. It returns the output and error.
func (h *History) Run(ctx context.Context, client int, cli *clientv3.Client, in Input, timeout time.Duration) (Output, error) {
	call := h.Now()
	out, err := Do(ctx, cli, in, timeout)
	ret := h.Now()
	if err != nil {
		if in.Op == Get || in.Op == GetPair {
			return out, err
		}
		out, ret = Output{Unknown: true}, math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
	return out, err
}

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Ops returns a copy of the recorded operations.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Check fails t unless ops are linearizable; an illegal history is
// written as a visualization into the test's artifact directory.
func Check(t testing.TB, ops []porcupine.Operation) {
	t.Helper()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations linearizable (checked in %v)", len(ops), time.Since(start).Round(time.Millisecond))
	case porcupine.Illegal:
		path := filepath.Join(t.ArtifactDir(), "linearizability.html")
		if err := porcupine.VisualizePath(Model, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		t.Fatalf("history of %d operations is not linearizable; visualization: %s (kept with go test -artifacts)", len(ops), path)
	default:
		open := 0
		for _, op := range ops {
			if op.Output.(Output).Unknown {
				open++
			}
		}
		t.Fatalf("linearizability check inconclusive (%s) after %v for %d operations, %d of them writes of unknown outcome (each may take effect at any later time, which is what makes the search long)",
			res, time.Since(start).Round(time.Millisecond), len(ops), open)
	}
}
