package etcdapi

import (
	"bytes"
	"slices"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The checks below reproduce etcd 3.6's request validation so clients get
// the same error for the same request. They use getters throughout: a nil
// message anywhere in a request is an error, never a panic.

func checkRange(r *pb.RangeRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.GetSortOrder())]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.GetSortTarget())]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPut(r *pb.PutRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.GetIgnoreValue() && len(r.GetValue()) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.GetIgnoreLease() && r.GetLease() != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDelete(r *pb.DeleteRangeRequest) error {
	if len(r.GetKey()) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// checkTxn validates a txn the way etcd does: a level may hold at most
// maxOps of max(compares, success ops, failure ops), and a nested txn gets
// only the budget its parent left over. Overlapping writes are checked
// separately (checkTxnOverlaps) so a request is rejected by the cheap checks
// before the overlap analysis runs.
func checkTxn(r *pb.TxnRequest, maxOps int) error {
	n := max(len(r.GetCompare()), len(r.GetSuccess()), len(r.GetFailure()))
	if n > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.GetCompare() {
		if len(c.GetKey()) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [2][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
		for _, op := range ops {
			if err := checkOp(op, maxOps-n); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkOp(op *pb.RequestOp, maxOps int) error {
	switch {
	case op.GetRequestRange() != nil:
		return checkRange(op.GetRequestRange())
	case op.GetRequestPut() != nil:
		return checkPut(op.GetRequestPut())
	case op.GetRequestDeleteRange() != nil:
		return checkDelete(op.GetRequestDeleteRange())
	case op.GetRequestTxn() != nil:
		return checkTxn(op.GetRequestTxn(), maxOps)
	default:
		// etcd's answer to an op with nothing in it.
		return rpctypes.ErrGRPCKeyNotFound
	}
}

// checkTxnOverlaps rejects a txn that writes one key twice on a path that
// can execute, with etcd's rules: a put may not meet another put or a
// delete of the same level or of a nested txn; puts in the two branches of
// one nested txn may share keys (only one branch runs); deletes may overlap
// each other.
func checkTxnOverlaps(r *pb.TxnRequest) error {
	for _, ops := range [2][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
		if !needsOverlapCheck(ops) {
			continue
		}
		if _, _, err := branchWrites(ops); err != nil {
			return err
		}
	}
	return nil
}

// needsOverlapCheck is the fast path for the common txn (kube: one compare,
// one write): with at most one write and no nested txn nothing can overlap.
func needsOverlapCheck(ops []*pb.RequestOp) bool {
	writes := 0
	for _, op := range ops {
		switch {
		case op.GetRequestTxn() != nil:
			return true
		case op.GetRequestPut() != nil, op.GetRequestDeleteRange() != nil:
			writes++
		}
	}
	return writes > 1
}

// branchWrites returns the keys put and the ranges deleted by one branch
// (including nested txns), or ErrGRPCDuplicateKey.
func branchWrites(ops []*pb.RequestOp) (map[string]struct{}, keyRanges, error) {
	var own []keyRange
	for _, op := range ops {
		if d := op.GetRequestDeleteRange(); d != nil {
			if kr, ok := deleteRange(d); ok {
				own = append(own, kr)
			}
		}
	}
	dels := newKeyRanges(own)
	var puts map[string]struct{}

	for _, op := range ops {
		t := op.GetRequestTxn()
		if t == nil {
			continue
		}
		thenPuts, thenDels, err := branchWrites(t.GetSuccess())
		if err != nil {
			return nil, nil, err
		}
		elsePuts, elseDels, err := branchWrites(t.GetFailure())
		if err != nil {
			return nil, nil, err
		}
		if puts == nil && len(thenPuts)+len(elsePuts) > 0 {
			puts = make(map[string]struct{}, len(thenPuts)+len(elsePuts))
		}
		for k := range thenPuts {
			if _, dup := puts[k]; dup || dels.contains(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		for k := range elsePuts {
			if _, dup := puts[k]; dup {
				if _, sameTxn := thenPuts[k]; !sameTxn {
					return nil, nil, rpctypes.ErrGRPCDuplicateKey
				}
			}
			if dels.contains(k) {
				return nil, nil, rpctypes.ErrGRPCDuplicateKey
			}
			puts[k] = struct{}{}
		}
		dels = dels.union(thenDels).union(elseDels)
	}

	for _, op := range ops {
		p := op.GetRequestPut()
		if p == nil {
			continue
		}
		k := string(p.GetKey())
		if _, dup := puts[k]; dup || dels.contains(k) {
			return nil, nil, rpctypes.ErrGRPCDuplicateKey
		}
		if puts == nil {
			puts = make(map[string]struct{})
		}
		puts[k] = struct{}{}
	}
	return puts, dels, nil
}

// keyRange is the half-open key interval [lo, hi).
type keyRange struct{ lo, hi string }

// deleteRange is the interval a delete covers for the overlap check. A range
// end of "\x00" ("every key from key on") is treated as covering nothing, as
// etcd's check does: etcd accepts such a txn, so we must too.
func deleteRange(d *pb.DeleteRangeRequest) (keyRange, bool) {
	key, end := d.GetKey(), d.GetRangeEnd()
	if len(end) == 0 {
		return keyRange{string(key), string(key) + "\x00"}, true
	}
	if (len(end) == 1 && end[0] == 0) || bytes.Compare(key, end) >= 0 {
		// "\x00" after an empty key is not below it, so it is checked
		// by itself.
		return keyRange{}, false
	}
	return keyRange{string(key), string(end)}, true
}

// keyRanges is a set of keys as sorted, disjoint, non-adjacent intervals:
// membership is a binary search and a union is a merge, so the overlap check
// stays near-linear in the size of the request.
type keyRanges []keyRange

func newKeyRanges(rs []keyRange) keyRanges {
	if len(rs) < 2 {
		return rs
	}
	slices.SortFunc(rs, func(a, b keyRange) int {
		if a.lo < b.lo {
			return -1
		}
		if a.lo > b.lo {
			return 1
		}
		return 0
	})
	return coalesce(rs)
}

// coalesce merges overlapping or touching neighbours of a list sorted by lo.
func coalesce(rs []keyRange) keyRanges {
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi {
			if r.hi > out[n-1].hi {
				out[n-1].hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

func (s keyRanges) contains(k string) bool {
	// hi is increasing because the ranges are sorted and disjoint.
	i := sort.Search(len(s), func(i int) bool { return s[i].hi > k })
	return i < len(s) && s[i].lo <= k
}

func (s keyRanges) union(o keyRanges) keyRanges {
	if len(o) == 0 {
		return s
	}
	if len(s) == 0 {
		return o
	}
	merged := make([]keyRange, 0, len(s)+len(o))
	i, j := 0, 0
	for i < len(s) || j < len(o) {
		if j == len(o) || (i < len(s) && s[i].lo <= o[j].lo) {
			merged = append(merged, s[i])
			i++
		} else {
			merged = append(merged, o[j])
			j++
		}
	}
	return coalesce(merged)
}

// txnWrites reports whether a txn can write; etcd applies the request size
// limit only to requests that go through its log, i.e. writes.
func txnWrites(r *pb.TxnRequest) bool {
	for _, ops := range [2][]*pb.RequestOp{r.GetSuccess(), r.GetFailure()} {
		for _, op := range ops {
			switch {
			case op.GetRequestPut() != nil, op.GetRequestDeleteRange() != nil:
				return true
			case op.GetRequestTxn() != nil:
				if txnWrites(op.GetRequestTxn()) {
					return true
				}
			}
		}
	}
	return false
}

// validateTxn is the whole txn check in etcd's order.
func validateTxn(r *pb.TxnRequest, maxOps, maxBytes int) error {
	if err := checkTxn(r, maxOps); err != nil {
		return err
	}
	if err := checkTxnOverlaps(r); err != nil {
		return err
	}
	if txnWrites(r) && r.Size() > maxBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}
