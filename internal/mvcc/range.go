package mvcc

import (
	"bytes"
	"cmp"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// RangeOptions are the parts of an etcd RangeRequest the store evaluates.
type RangeOptions struct {
	// Rev is the revision to read at. The engine resolves a request's 0 to
	// its committed revision; the store never picks one because it cannot
	// tell committed writes from uncommitted ones.
	Rev        int64
	Limit      int64
	KeysOnly   bool
	CountOnly  bool
	SortOrder  pb.RangeRequest_SortOrder
	SortTarget pb.RangeRequest_SortTarget
	// Filters; 0 disables each.
	MinModRev, MaxModRev, MinCreateRev, MaxCreateRev int64
}

// RangeResult is the answer to a Range.
type RangeResult struct {
	// KVs may be shared with the store: callers must not modify them.
	KVs []*mvccpb.KeyValue
	// Count is the number of keys live in the range at the revision, before
	// limit and filters (as etcd counts).
	Count int64
	// More reports that limit cut results off.
	More bool
}

// Range reads [key, end) at opt.Rev with etcd's RangeRequest semantics:
// an empty end reads key alone, end "\x00" reads every key >= key. It returns
// ErrFutureRev above Rev() and ErrCompacted below CompactRev(), and Err()
// when a spilled value cannot be read back.
func (s *Store) Range(key, end []byte, opt RangeOptions) (RangeResult, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rev := opt.Rev
	if rev > s.rev.Load() {
		return RangeResult{}, ErrFutureRev
	}
	if rev < s.compactRev.Load() {
		return RangeResult{}, ErrCompacted
	}

	var res RangeResult
	order := sortOrder(opt)
	filtered := opt.MinModRev != 0 || opt.MaxModRev != 0 || opt.MinCreateRev != 0 || opt.MaxCreateRev != 0
	switch {
	case len(end) == 0:
		if ki := s.lookup(key); ki != nil {
			if kv := ki.at(rev); kv != nil {
				res.Count = 1
				if !opt.CountOnly {
					res.KVs = []*mvccpb.KeyValue{kv}
				}
			}
		}
	case len(end) == 1 && end[0] == 0:
		end = nil
		fallthrough
	default:
		if end != nil && bytes.Compare(key, end) >= 0 {
			return res, nil
		}
		if opt.CountOnly {
			res.Count = int64(s.count(key, end, rev))
			return res, nil
		}
		// etcd reads the whole range only to filter or to sort in an
		// explicit order; otherwise it reads the first limit+1 keys in key
		// order and sorts just those (so a sort target without an order
		// sorts the page, not the range). Ascending by key equals key
		// order, so it takes the short read too.
		if !filtered && opt.Limit > 0 && (opt.SortOrder == pb.RangeRequest_NONE || order == pb.RangeRequest_NONE) {
			res.Count = int64(s.count(key, end, rev))
			fetch := res.Count
			if opt.Limit < fetch {
				fetch = opt.Limit + 1
			}
			res.KVs = make([]*mvccpb.KeyValue, 0, fetch)
			s.idx.ascend(key, end, func(ki *keyIndex) bool {
				if kv := ki.at(rev); kv != nil {
					res.KVs = append(res.KVs, kv)
				}
				return int64(len(res.KVs)) < fetch
			})
			break
		}
		res.KVs = make([]*mvccpb.KeyValue, 0, s.idx.countLive(key, end))
		s.idx.ascend(key, end, func(ki *keyIndex) bool {
			if kv := ki.at(rev); kv != nil {
				res.KVs = append(res.KVs, kv)
			}
			return true
		})
		res.Count = int64(len(res.KVs))
	}
	if filtered {
		res.KVs = slices.DeleteFunc(res.KVs, func(kv *mvccpb.KeyValue) bool {
			return opt.MaxModRev != 0 && kv.ModRevision > opt.MaxModRev ||
				opt.MinModRev != 0 && kv.ModRevision < opt.MinModRev ||
				opt.MaxCreateRev != 0 && kv.CreateRevision > opt.MaxCreateRev ||
				opt.MinCreateRev != 0 && kv.CreateRevision < opt.MinCreateRev
		})
	}
	if opt.SortTarget == pb.RangeRequest_VALUE && order != pb.RangeRequest_NONE {
		if err := s.resolve(res.KVs); err != nil {
			return RangeResult{}, err
		}
	}
	sortKVs(res.KVs, order, opt.SortTarget)
	if opt.Limit > 0 && int64(len(res.KVs)) > opt.Limit {
		clear(res.KVs[opt.Limit:])
		res.KVs = res.KVs[:opt.Limit]
		res.More = true
	}
	res = finish(res, opt)
	if !opt.KeysOnly {
		if err := s.resolve(res.KVs); err != nil {
			return RangeResult{}, err
		}
	}
	return res, nil
}

// finish applies the options that only shape the returned values.
func finish(res RangeResult, opt RangeOptions) RangeResult {
	if opt.CountOnly {
		res.KVs = nil
		return res
	}
	if opt.KeysOnly && len(res.KVs) > 0 {
		// Stored values are shared with other readers: strip copies.
		cp := make([]mvccpb.KeyValue, len(res.KVs))
		for i, kv := range res.KVs {
			cp[i] = withValue(kv, nil)
			res.KVs[i] = &cp[i]
		}
	}
	return res
}

// sortOrder resolves the order etcd applies: results come ascending by key
// already, so a target other than KEY without an order means ascending, and
// ascending by key needs no sort.
func sortOrder(opt RangeOptions) pb.RangeRequest_SortOrder {
	switch {
	case opt.SortTarget != pb.RangeRequest_KEY && opt.SortOrder == pb.RangeRequest_NONE:
		return pb.RangeRequest_ASCEND
	case opt.SortTarget == pb.RangeRequest_KEY && opt.SortOrder == pb.RangeRequest_ASCEND:
		return pb.RangeRequest_NONE
	}
	return opt.SortOrder
}

// sortKVs sorts kvs (ascending by key on entry). Ties stay in ascending key
// order whatever the direction: etcd leaves ties unspecified and produces
// this order for small results. Keys are unique, so breaking ties by key
// gives the stable order with an unstable (faster) sort.
func sortKVs(kvs []*mvccpb.KeyValue, order pb.RangeRequest_SortOrder, target pb.RangeRequest_SortTarget) {
	if order == pb.RangeRequest_NONE || len(kvs) < 2 {
		return
	}
	if target == pb.RangeRequest_KEY {
		// Only DESCEND gets here; keys are unique.
		slices.Reverse(kvs)
		return
	}
	var c func(a, b *mvccpb.KeyValue) int
	switch target {
	case pb.RangeRequest_VERSION:
		c = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.Version, b.Version) }
	case pb.RangeRequest_CREATE:
		c = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) }
	case pb.RangeRequest_MOD:
		c = func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.ModRevision, b.ModRevision) }
	case pb.RangeRequest_VALUE:
		c = func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Value, b.Value) }
	default:
		// Request validation rejects unknown targets; keep key order.
		return
	}
	dir := 1
	if order == pb.RangeRequest_DESCEND {
		dir = -1
	}
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int {
		if r := c(a, b) * dir; r != 0 {
			return r
		}
		return bytes.Compare(a.Key, b.Key)
	})
}

// count returns the number of keys live in [key, end) at rev; end == nil
// is unbounded. The tree counts live keys at the latest revision in
// O(log n); an older revision differs from that by the creations and
// deletions logged since, which is cheaper to subtract than to walk the
// range unless many writes happened since.
func (s *Store) count(key, end []byte, rev int64) int {
	n := s.idx.countLive(key, end)
	if rev == s.rev.Load() {
		return n
	}
	p := s.logSearch(rev + 1)
	if len(s.log)-p > 2*n+64 {
		c := 0
		s.idx.ascend(key, end, func(ki *keyIndex) bool {
			if ki.at(rev) != nil {
				c++
			}
			return true
		})
		return c
	}
	for _, e := range s.log[p:] {
		k := e.kv.Key
		if bytes.Compare(k, key) < 0 || end != nil && bytes.Compare(k, end) >= 0 {
			continue
		}
		// Per key these steps telescope to (live now) - (live at rev).
		switch {
		case tombstone(e.kv):
			n++
		case e.prev == nil:
			n--
		}
	}
	return n
}
