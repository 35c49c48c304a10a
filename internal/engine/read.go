package engine

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/internal/mvcc"
)

// Range reads at the committed revision (or the requested historic one).
// On a single node every committed write is durable and acknowledged
// writes are committed first, so this is linearizable without a barrier.
func (e *Engine) Range(_ context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if !r.Serializable {
		if err := e.Deposed(); err != nil {
			return nil, err
		}
	}
	cur := e.committedRev.Load()
	return e.rangeAt(r, cur, cur)
}

// rangeAt serves r with cur as the newest readable revision.
func (e *Engine) rangeAt(r *pb.RangeRequest, cur, headerRev int64) (*pb.RangeResponse, error) {
	rev := r.Revision
	if rev == 0 {
		rev = cur
	} else if rev > cur {
		return nil, mvcc.ErrFutureRev
	}
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: headerRev}}
	if rev <= 0 {
		return resp, nil
	}
	res, err := e.store.Range(r.Key, r.RangeEnd, mvcc.RangeOptions{
		Rev:          rev,
		Limit:        r.Limit,
		KeysOnly:     r.KeysOnly,
		CountOnly:    r.CountOnly,
		SortOrder:    r.SortOrder,
		SortTarget:   r.SortTarget,
		MinModRev:    r.MinModRevision,
		MaxModRev:    r.MaxModRevision,
		MinCreateRev: r.MinCreateRevision,
		MaxCreateRev: r.MaxCreateRevision,
	})
	if err != nil {
		return nil, err
	}
	resp.Kvs, resp.More, resp.Count = res.KVs, res.More, res.Count
	return resp, nil
}

// readTxn evaluates a transaction without writes at rev.
func (e *Engine) readTxn(r *pb.TxnRequest, rev int64) (*pb.TxnResponse, error) {
	ok := txnSucceeds(e.store, rev, r)
	if err := e.store.Err(); err != nil {
		return nil, err
	}
	ops := r.Success
	if !ok {
		ops = r.Failure
	}
	resp := &pb.TxnResponse{Succeeded: ok, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			rr, err := e.rangeAt(v.RequestRange, rev, rev)
			if err != nil {
				return nil, err
			}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}
		case *pb.RequestOp_RequestTxn:
			tr, err := e.readTxn(v.RequestTxn, rev)
			if err != nil {
				return nil, err
			}
			tr.Header = &pb.ResponseHeader{Revision: rev}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}}
		}
	}
	return resp, nil
}

// SerializableTxn reports whether every range of a read-only txn asks
// for a serializable read (etcd's rule for a txn).
func SerializableTxn(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				if !v.RequestRange.Serializable {
					return false
				}
			case *pb.RequestOp_RequestTxn:
				if !SerializableTxn(v.RequestTxn) {
					return false
				}
			}
		}
	}
	return true
}

// WatchErr is Deposed: a deposed node ends its watch streams.
func (e *Engine) WatchErr() error { return e.Deposed() }

// Events reads the committed revision log for watches. A deposed node
// ends its watches: its history may be missing the new writer's events.
// The watch streams a commit wakes share one read (eventsCache).
func (e *Engine) Events(from, to int64, limit int) ([]*mvccpb.Event, int64, error) {
	if err := e.Deposed(); err != nil {
		return nil, from, err
	}
	if cur := e.committedRev.Load(); to > cur {
		to = cur
	}
	compacted := from < e.compactRev.Load()
	if from > to {
		if compacted {
			return nil, from, mvcc.ErrCompacted
		}
		return nil, from, nil
	}
	if compacted {
		return e.store.Events(from, to, limit)
	}
	gen := e.notifyCh.gen.Load()
	if evs, next, ok := e.feed.events.get(gen, from, to, limit); ok {
		return evs, next, nil
	}
	evs, next, err := e.store.Events(from, to, limit)
	if err == nil {
		e.feed.events.put(gen, from, to, limit, evs, next)
	}
	return evs, next, err
}
