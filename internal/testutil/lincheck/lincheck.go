// Package lincheck records concurrent histories of get, put and
// compare-and-swap on a few keys through etcd clients and checks them with
// porcupine against a register per key. The e2e suites and the in-process
// power-loss and cluster tests share it.
//
// A write whose call failed is recorded with an unknown outcome that may
// take effect at any later time (its return is open-ended); a failed read
// is dropped, since it had no effect. This package must never be imported
// by non-test code.
package lincheck

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
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
)

// Input is one call.
type Input struct {
	Op    Kind
	Key   string
	Value string // put, cas: new value
	Old   string // cas: expected value ("" = absent)
}

// Output is what the call returned.
type Output struct {
	Value   string // get: value read ("" = absent)
	OK      bool   // cas: swapped
	Unknown bool   // the call failed; its effect may or may not have happened
	Rev     int64  // the response header's revision (0 when unknown)
}

// Model is a register per key; histories are partitioned by key, so the
// state is one value ("" = absent; callers never write empty values).
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(Input).Key
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
		st, in, out := state.(string), input.(Input), output.(Output)
		switch in.Op {
		case Get:
			return out.Value == st, st
		case Put:
			return true, in.Value
		default: // CAS
			if st == in.Old {
				return out.OK || out.Unknown, in.Value
			}
			return !out.OK, st
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		switch in.Op {
		case Get:
			return fmt.Sprintf("get(%s) -> %q", in.Key, out.Value)
		case Put:
			return fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
		default:
			return fmt.Sprintf("cas(%s, %q -> %q) -> ok=%v unknown=%v", in.Key, in.Old, in.Value, out.OK, out.Unknown)
		}
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
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
		if in.Op == Get {
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
	res, info := porcupine.CheckOperationsVerbose(Model, ops, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%d operations linearizable", len(ops))
	case porcupine.Illegal:
		path := filepath.Join(t.ArtifactDir(), "linearizability.html")
		if err := porcupine.VisualizePath(Model, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		t.Fatalf("history of %d operations is not linearizable; visualization: %s (kept with go test -artifacts)", len(ops), path)
	default:
		t.Fatalf("linearizability check inconclusive (%s) for %d operations", res, len(ops))
	}
}
