package engine

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/mvcc"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// MaxLeaseTTL is etcd's upper bound on a lease TTL, in seconds.
const MaxLeaseTTL = 9000000000

// op is one request for the write loop. Each kind evaluates itself in the
// loop and keeps its own typed response, so nothing is passed as any.
type op interface {
	// evaluate runs in the loop goroutine. It answers p at once (an
	// evaluation error, a no-op) or leaves it waiting for durability.
	evaluate(e *Engine, p *proposal)
	// logs reports whether the op may append a log entry, and so whether
	// storage backpressure applies to it.
	logs() bool
}

// proposal is one client request handed to the write loop. The loop
// answers it (err, or success with the op's response filled) once the
// result is durable, or at once on an evaluation error.
type proposal struct {
	op      op
	err     error
	waitIdx uint64
	done    chan struct{}

	// deadline is when the writer stops waiting with ErrTimeout. The loop
	// enforces it on its ticker (see expireWaits) instead of every writer
	// arming a timer of its own: one timer per write was measurable.
	deadline time.Time
	// finished is set by the loop when it answers; a write answered with
	// ErrTimeout may still commit later, and must not be answered twice.
	// (The two flags sit together: a putOp stays in the 224-byte size
	// class.)
	finished bool
	// newID says reqID was made for this first sending
	// (WithNewRequestID), so it cannot be logged already.
	newID bool
	// reqID is the forwarded request's id (zero for others): its entry
	// carries it.
	reqID RequestID
}

// finish answers the writer; only the loop goroutine calls it, or, once
// the loop stopped, drainProposals.
func (p *proposal) finish(err error) {
	if p.finished {
		return
	}
	p.finished = true
	if p.err == nil {
		p.err = err
	}
	// The one send p.done ever takes (it holds one): see doneChan.
	p.done <- struct{}{}
}

// doneChan returns a channel for a writer to wait on, recycled
// (Engine.doneChans) instead of one made per write (96 B and a close). A
// channel goes back only from the writer that received its one answer:
// finish sends once (finished), so after that receive nobody sends on it
// again, and the proposal that still names it is never finished again. A
// writer that stopped waiting (its context ended) leaves the channel to
// the collector: the answer may still come.
func (e *Engine) doneChan() chan struct{} {
	if c, ok := e.doneChans.Get().(chan struct{}); ok {
		return c
	}
	return make(chan struct{}, 1)
}

// submit hands o to the loop and waits for its answer.
func (e *Engine) submit(ctx context.Context, o op) error {
	return e.submitProposal(ctx, &proposal{op: o})
}

// submitProposal hands p, whose op is set, to the loop and waits for its
// answer. The hot ops (Put, DeleteRange, Txn) carry their proposal inside
// them, so a write allocates one object for both.
func (e *Engine) submitProposal(ctx context.Context, p *proposal) error {
	o := p.op
	if f := e.failed.Load(); f != nil {
		if o.logs() {
			e.writesFailed.Add(1)
		}
		return *f
	}
	p.reqID, p.newID = requestIDFrom(ctx)
	p.done, p.deadline = e.doneChan(), e.cfg.Clock.Now().Add(e.cfg.WriteTimeout)
	// The queue has room nearly always: a plain send is much cheaper than
	// a select over three channels, which is only needed when it is full.
	select {
	case e.proposals <- p:
	default:
		select {
		case e.proposals <- p:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.ctx.Done():
			return ErrStopped
		}
	}
	if e.stopped.Load() {
		// The loop is gone, or leaving: whoever drains first answers
		// what it will never take (see run).
		e.drainProposals()
	}
	// Every proposal in the queue is answered (by the loop, or by the
	// drain once it stopped), so the writer waits on its own channel and
	// its caller's, not on the engine's context, which every writer
	// would share: one channel lock all of them contend for.
	var err error
	select {
	case <-p.done:
		err = p.err
		e.doneChans.Put(p.done)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil && o.logs() && writeFailure(err) {
		e.writesFailed.Add(1)
	}
	return err
}

// putOp is a Put with its proposal, response and header in one
// allocation: the write path's objects live exactly as long as each other
// (until the caller drops the response).
type putOp struct {
	p    proposal
	req  *pb.PutRequest
	resp *pb.PutResponse
	out  pb.PutResponse
	hdr  pb.ResponseHeader
}

func (o *putOp) logs() bool { return true }
func (o *putOp) evaluate(e *Engine, p *proposal) {
	e.evaluateWrite(p, func(w *writeTxn) (err error) {
		o.resp, err = w.applyPut(o.req, &o.out)
		return err
	}, func(rev int64) {
		o.hdr.Revision = rev
		o.resp.Header = &o.hdr
	})
}

// deleteOp is a DeleteRange with its proposal and header (as putOp).
type deleteOp struct {
	p    proposal
	req  *pb.DeleteRangeRequest
	resp *pb.DeleteRangeResponse
	hdr  pb.ResponseHeader
}

func (o *deleteOp) logs() bool { return true }
func (o *deleteOp) evaluate(e *Engine, p *proposal) {
	e.evaluateWrite(p, func(w *writeTxn) (err error) {
		o.resp, err = w.applyDelete(o.req)
		return err
	}, func(rev int64) {
		o.hdr.Revision = rev
		o.resp.Header = &o.hdr
	})
}

// txnOp is a write Txn with its proposal and header (as putOp).
type txnOp struct {
	p    proposal
	req  *pb.TxnRequest
	resp *pb.TxnResponse
	hdr  pb.ResponseHeader
}

func (o *txnOp) logs() bool { return true }
func (o *txnOp) evaluate(e *Engine, p *proposal) {
	e.evaluateWrite(p, func(w *writeTxn) (err error) {
		o.resp, err = w.applyTxn(o.req)
		return err
	}, func(rev int64) {
		o.hdr.Revision = rev
		o.resp.Header = &o.hdr
		setNestedHeaders(o.resp, rev)
	})
}

type compactOp struct {
	req  *pb.CompactionRequest
	resp *pb.CompactionResponse
}

func (o *compactOp) logs() bool                      { return true }
func (o *compactOp) evaluate(e *Engine, p *proposal) { e.handleCompact(o, p) }

type leaseGrantOp struct {
	req  *pb.LeaseGrantRequest
	resp *pb.LeaseGrantResponse
}

func (o *leaseGrantOp) logs() bool                      { return true }
func (o *leaseGrantOp) evaluate(e *Engine, p *proposal) { e.handleLeaseGrant(o, p) }

type leaseRevokeOp struct {
	req  *pb.LeaseRevokeRequest
	resp *pb.LeaseRevokeResponse
}

func (o *leaseRevokeOp) logs() bool { return true }
func (o *leaseRevokeOp) evaluate(e *Engine, p *proposal) {
	if !e.lease.exists(o.req.ID) {
		p.finish(ErrLeaseNotFound)
		return
	}
	o.resp = &pb.LeaseRevokeResponse{}
	e.revokeLease(o.req.ID, p, func(rev int64) { o.resp.Header = &pb.ResponseHeader{Revision: rev} })
}

// snapshotOp captures the applied state; it is answered once everything
// it covers is durable.
type snapshotOp struct{ snap *datafile.Snapshot }

func (o *snapshotOp) logs() bool { return false }
func (o *snapshotOp) evaluate(e *Engine, p *proposal) {
	o.snap = e.captureSnapshot()
	e.waitForLast(p)
}

// barrierOp is answered once every write accepted before it is durable.
type barrierOp struct{}

func (barrierOp) logs() bool                      { return false }
func (barrierOp) evaluate(e *Engine, p *proposal) { e.waitForLast(p) }

// Put sets a key.
func (e *Engine) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	o := &putOp{req: r}
	o.p.op = o
	if err := e.submitProposal(ctx, &o.p); err != nil {
		return nil, err
	}
	return o.resp, nil
}

// DeleteRange deletes keys.
func (e *Engine) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	o := &deleteOp{req: r}
	o.p.op = o
	if err := e.submitProposal(ctx, &o.p); err != nil {
		return nil, err
	}
	return o.resp, nil
}

// Txn runs a transaction. Read-only transactions are served from the
// committed state without entering the write loop.
func (e *Engine) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if !IsWriteTxn(r) {
		if !SerializableTxn(r) {
			if err := e.Deposed(); err != nil {
				return nil, err
			}
		}
		cur := e.committedRev.Load()
		resp, err := e.readTxn(r, cur)
		if err != nil {
			return nil, err
		}
		resp.Header = &pb.ResponseHeader{Revision: cur}
		return resp, nil
	}
	o := &txnOp{req: r}
	o.p.op = o
	if err := e.submitProposal(ctx, &o.p); err != nil {
		return nil, err
	}
	return o.resp, nil
}

// Compact compacts history at and below r.Revision.
func (e *Engine) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	o := &compactOp{req: r}
	if err := e.submit(ctx, o); err != nil {
		return nil, err
	}
	return o.resp, nil
}

// LeaseGrant creates a lease.
func (e *Engine) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	o := &leaseGrantOp{req: r}
	if err := e.submit(ctx, o); err != nil {
		return nil, err
	}
	return o.resp, nil
}

// LeaseRevoke revokes a lease and deletes its keys.
func (e *Engine) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	o := &leaseRevokeOp{req: r}
	if err := e.submit(ctx, o); err != nil {
		return nil, err
	}
	return o.resp, nil
}

// Barrier returns once every write accepted before it is durable; its
// result is the committed revision at that point.
func (e *Engine) Barrier(ctx context.Context) (int64, error) {
	if err := e.submit(ctx, barrierOp{}); err != nil {
		return 0, err
	}
	return e.committedRev.Load(), nil
}

// handle evaluates one proposal in the loop.
func (e *Engine) handle(p *proposal) {
	if f := e.failed.Load(); f != nil {
		p.finish(*f)
		return
	}
	if (!e.writer.Load() || e.draining) && p.op.logs() {
		// Only the writer logs; a snapshot or a barrier reads what is
		// applied here.
		p.finish(ErrNotPrimary)
		return
	}
	if p.op.logs() && !p.reqID.zero() && !p.newID && e.duplicate(p.reqID) {
		// A request sent again whose first sending is logged: applying
		// it again would write it twice. The sender learns the outcome
		// from the log. A first sending (newID) is not looked up: on a
		// Primary's local path that was a tenth of the loop's CPU per
		// write (duplicate 0.27 s of run's 2.26 s, put-256 profile).
		p.finish(ErrDuplicateRequest)
		return
	}
	if p.op.logs() {
		if bp, ok := e.cfg.Storage.(backpressurer); ok {
			if err := bp.Backpressure(); err != nil {
				p.finish(fmt.Errorf("%w: %v", ErrUnavailable, err))
				return
			}
		}
	}
	if c, ok := p.op.(coster); ok && e.checkQuota(p, c.cost()) {
		return
	}
	p.op.evaluate(e, p)
}

// writeTxn accumulates the ops of one write while applying them to the
// store at a single new revision. The loop has one (Engine.wtxn), reset
// by newWriteTxn for every write: a write is evaluated and logged within
// one call, and nothing keeps the txn afterwards.
type writeTxn struct {
	e    *Engine
	base int64
	rev  int64
	// blk holds the entry the txn logs and its first op; ops starts in
	// it (see entryBlock).
	blk *entryBlock
	ops []*netsyv1.Op
	// moves are the lease attachments the ops change, made when the
	// txn commits.
	moves []leaseMove
	// path is a Txn's branches (see txnPath), logged with a forwarded
	// request so that its sender can rebuild the response.
	path []bool
}

// entryBlock is what a write of one op logs, allocated in one piece: the
// entry, the op and the entry's ops slice. A txn of more ops grows ops
// past the block as append does.
type entryBlock struct {
	ent netsyv1.Entry
	op  netsyv1.Op
	ops [1]*netsyv1.Op
	// rid is the entry's request id when the write was forwarded (most
	// of a cluster's writes are).
	rid netsyv1.RequestID
}

// leaseMove is a key whose lease an op changes, from prev to next (0:
// none).
type leaseMove struct {
	key        []byte
	prev, next int64
}

func (e *Engine) newWriteTxn() *writeTxn {
	base := e.store.Rev()
	w := &e.wtxn
	clear(w.moves)
	*w = writeTxn{e: e, base: base, rev: base + 1, moves: w.moves[:0]}
	return w
}

// addOp returns a new op of the txn's entry.
func (w *writeTxn) addOp() *netsyv1.Op {
	if w.blk == nil {
		w.blk = new(entryBlock)
		w.ops = w.blk.ops[:0]
		w.ops = append(w.ops, &w.blk.op)
		return &w.blk.op
	}
	op := new(netsyv1.Op)
	w.ops = append(w.ops, op)
	return op
}

// moved notes an op's lease change for commit.
func (w *writeTxn) moved(kv, prev *mvccpb.KeyValue) {
	var from, to int64
	if prev != nil {
		from = prev.Lease
	}
	if kv.Version != 0 {
		to = kv.Lease
	}
	if from != to {
		w.moves = append(w.moves, leaseMove{key: kv.Key, prev: from, next: to})
	}
}

// put writes key and returns the version it replaced (nil if none), as
// the store keeps it: its value may be in the spill files (see
// mvcc.Store.PutKV), so it is resolved only for a response that asks.
func (w *writeTxn) put(key, value []byte, lease int64) (prev *mvccpb.KeyValue) {
	kv, prev := w.e.store.PutKV(w.rev, key, value, lease)
	op := w.addOp()
	op.Type, op.Key, op.Value, op.Lease = netsyv1.Op_PUT, key, value, lease
	w.moved(kv, prev)
	return prev
}

// del deletes key and returns the version it deleted (nil if the key was
// not live), as the store keeps it: like put's, it is resolved only for a
// response that asks (mvcc.Store.DeleteKV).
func (w *writeTxn) del(key []byte) (prev *mvccpb.KeyValue) {
	kv, prev := w.e.store.DeleteKV(w.rev, key)
	if kv == nil {
		return nil
	}
	op := w.addOp()
	op.Type, op.Key = netsyv1.Op_DELETE, key
	w.moved(kv, prev)
	return prev
}

// abort undoes whatever the txn applied to the store.
func (w *writeTxn) abort() {
	if len(w.ops) > 0 {
		w.e.store.Rollback(w.base)
	}
}

// finishRev is the revision a response header reports.
func (w *writeTxn) finishRev() int64 { return w.e.store.Rev() }

// commit logs the txn (if it changed anything) and queues p for the
// durability acknowledgement.
func (w *writeTxn) commit(p *proposal, revokes []int64) {
	e := w.e
	if len(w.ops) == 0 && len(revokes) == 0 {
		e.waitForLast(p)
		return
	}
	for _, m := range w.moves {
		e.lease.move(m.key, m.prev, m.next)
	}
	var revoked []*netsyv1.LeaseGrant
	for _, id := range revokes {
		if ttl, ok := e.lease.ttl(id); ok {
			revoked = append(revoked, &netsyv1.LeaseGrant{Id: id, Ttl: ttl})
		}
		e.lease.revoke(id)
	}
	var ent *netsyv1.Entry
	if w.blk != nil {
		ent = &w.blk.ent
	} else {
		ent = new(netsyv1.Entry)
	}
	ent.Index, ent.Revision, ent.Ops, ent.LeaseRevokes = e.lastIdx+1, e.store.Rev(), w.ops, revokes
	if p != nil && !p.reqID.zero() {
		var rid *netsyv1.RequestID
		if w.blk != nil {
			rid = &w.blk.rid
		} else {
			rid = new(netsyv1.RequestID)
		}
		rid.Member, rid.Seq = p.reqID.Member, p.reqID.Seq
		ent.RequestId = rid
		for _, b := range w.path {
			ent.TxnPath = append(ent.TxnPath, boolByte(b))
		}
	}
	e.appendEntry(ent, p, revoked)
}

// evaluateWrite runs apply in one write txn at the next revision, gives
// the response its header through setHeader and logs the txn.
func (e *Engine) evaluateWrite(p *proposal, apply func(*writeTxn) error, setHeader func(rev int64)) {
	w := e.newWriteTxn()
	if err := apply(w); err != nil {
		w.abort()
		p.finish(err)
		return
	}
	if ferr := e.store.Err(); ferr != nil {
		// The store lost a value it spilled, so what it answered may be
		// incomplete: stop taking writes. A restart rebuilds the store
		// from the log.
		w.abort()
		e.failStorage(fmt.Errorf("value spill: %w", ferr))
		p.finish(*e.failed.Load())
		return
	}
	setHeader(w.finishRev())
	w.commit(p, nil)
}

func (w *writeTxn) get(key []byte) *mvccpb.KeyValue {
	rev := w.e.store.Rev()
	if rev == 0 {
		return nil
	}
	res, err := w.e.store.Range(key, nil, mvcc.RangeOptions{Rev: rev})
	if err != nil || len(res.KVs) == 0 {
		return nil
	}
	return res.KVs[0]
}

// applyPut applies r and returns its response: out, or a new one when out
// is nil.
func (w *writeTxn) applyPut(r *pb.PutRequest, out *pb.PutResponse) (*pb.PutResponse, error) {
	value, lease := r.Value, r.Lease
	if r.IgnoreValue || r.IgnoreLease {
		cur := w.get(r.Key)
		if cur == nil {
			return nil, ErrKeyNotFound
		}
		if r.IgnoreValue {
			value = cur.Value
		}
		if r.IgnoreLease {
			lease = cur.Lease
		}
	}
	if lease != 0 && !w.e.lease.exists(lease) {
		return nil, ErrLeaseNotFound
	}
	prev := w.put(r.Key, value, lease)
	resp := out
	if resp == nil {
		resp = &pb.PutResponse{}
	}
	if r.PrevKv {
		resp.PrevKv = w.e.store.Resolve(prev)
	}
	return resp, nil
}

func (w *writeTxn) applyDelete(r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp := &pb.DeleteRangeResponse{}
	rev := w.e.store.Rev()
	if rev == 0 {
		return resp, nil
	}
	// The keys alone: the delete events carry the previous values.
	res, err := w.e.store.Range(r.Key, r.RangeEnd, mvcc.RangeOptions{Rev: rev, KeysOnly: true})
	if err != nil {
		return nil, err
	}
	for _, kv := range res.KVs {
		prev := w.del(kv.Key)
		if prev == nil {
			continue
		}
		resp.Deleted++
		if r.PrevKv {
			resp.PrevKvs = append(resp.PrevKvs, w.e.store.Resolve(prev))
		}
	}
	return resp, nil
}

// applyTxn runs a write txn. As etcd, every compare of the txn tree is
// judged against the state before the txn; the ops then run in order.
func (w *writeTxn) applyTxn(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	path := txnPath(w.e.store, w.e.store.Rev(), r, nil)
	w.path = append([]bool(nil), path...)
	return w.applyTxnPath(r, &path)
}

func (w *writeTxn) applyTxnPath(r *pb.TxnRequest, path *[]bool) (*pb.TxnResponse, error) {
	ok := (*path)[0]
	*path = (*path)[1:]
	ops := r.Success
	if !ok {
		ops = r.Failure
	}
	resp := &pb.TxnResponse{Succeeded: ok, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		var out pb.ResponseOp
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			rr, err := w.e.rangeAt(v.RequestRange, w.e.store.Rev(), w.e.store.Rev())
			if err != nil {
				return nil, err
			}
			out.Response = &pb.ResponseOp_ResponseRange{ResponseRange: rr}
		case *pb.RequestOp_RequestPut:
			pr, err := w.applyPut(v.RequestPut, nil)
			if err != nil {
				return nil, err
			}
			out.Response = &pb.ResponseOp_ResponsePut{ResponsePut: pr}
		case *pb.RequestOp_RequestDeleteRange:
			dr, err := w.applyDelete(v.RequestDeleteRange)
			if err != nil {
				return nil, err
			}
			out.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}
		case *pb.RequestOp_RequestTxn:
			tr, err := w.applyTxnPath(v.RequestTxn, path)
			if err != nil {
				return nil, err
			}
			out.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}
		}
		resp.Responses[i] = &out
	}
	return resp, nil
}

// setNestedHeaders gives every nested response a header at rev, as etcd
// does, so clients that read them see a consistent revision.
func setNestedHeaders(t *pb.TxnResponse, rev int64) {
	for _, r := range t.Responses {
		switch v := r.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			if v.ResponseRange.Header == nil {
				v.ResponseRange.Header = &pb.ResponseHeader{Revision: rev}
			}
		case *pb.ResponseOp_ResponsePut:
			v.ResponsePut.Header = &pb.ResponseHeader{Revision: rev}
		case *pb.ResponseOp_ResponseDeleteRange:
			v.ResponseDeleteRange.Header = &pb.ResponseHeader{Revision: rev}
		case *pb.ResponseOp_ResponseTxn:
			v.ResponseTxn.Header = &pb.ResponseHeader{Revision: rev}
			setNestedHeaders(v.ResponseTxn, rev)
		}
	}
}

// txnPath appends, depth first in execution order, whether each txn of the
// tree that will run takes its success branch, judged at rev.
func txnPath(s *mvcc.Store, rev int64, r *pb.TxnRequest, path []bool) []bool {
	ok := txnSucceeds(s, rev, r)
	path = append(path, ok)
	ops := r.Success
	if !ok {
		ops = r.Failure
	}
	for _, op := range ops {
		if t := op.GetRequestTxn(); t != nil {
			path = txnPath(s, rev, t, path)
		}
	}
	return path
}

// IsWriteTxn reports whether a txn writes anything, in either branch.
func IsWriteTxn(r *pb.TxnRequest) bool {
	return hasWrite(r.Success) || hasWrite(r.Failure)
}

func hasWrite(ops []*pb.RequestOp) bool {
	for _, op := range ops {
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestPut, *pb.RequestOp_RequestDeleteRange:
			return true
		case *pb.RequestOp_RequestTxn:
			if IsWriteTxn(v.RequestTxn) {
				return true
			}
		}
	}
	return false
}

// txnSucceeds reports whether every compare of r holds at rev.
func txnSucceeds(s *mvcc.Store, rev int64, r *pb.TxnRequest) bool {
	for _, c := range r.Compare {
		if !compare(s, rev, c) {
			return false
		}
	}
	return true
}

// compare evaluates one txn compare at rev, as etcd: every key of a range
// must match; a missing key compares as an empty KeyValue, except that a
// value compare on a missing key is false.
func compare(s *mvcc.Store, rev int64, c *pb.Compare) bool {
	var kvs []*mvccpb.KeyValue
	if rev > 0 {
		// Only a value compare needs values; the store may have to read
		// them back from its spill files. A read that fails sets the
		// store's Err, which fails the request.
		res, err := s.Range(c.Key, c.RangeEnd, mvcc.RangeOptions{Rev: rev, KeysOnly: c.Target != pb.Compare_VALUE})
		if err != nil {
			return false
		}
		kvs = res.KVs
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false
		}
		return compareKV(c, &mvccpb.KeyValue{})
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false
		}
	}
	return true
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var r int
	switch c.Target {
	case pb.Compare_VALUE:
		r = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		r = cmp.Compare(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		r = cmp.Compare(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		r = cmp.Compare(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		r = cmp.Compare(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return r == 0
	case pb.Compare_NOT_EQUAL:
		return r != 0
	case pb.Compare_GREATER:
		return r > 0
	case pb.Compare_LESS:
		return r < 0
	}
	return false
}

func (e *Engine) handleCompact(o *compactOp, p *proposal) {
	r := o.req
	cur := e.store.Rev()
	if r.Revision > cur {
		p.finish(mvcc.ErrFutureRev)
		return
	}
	if r.Revision <= e.compactFloor() {
		p.finish(mvcc.ErrCompacted)
		return
	}
	o.resp = &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: cur}}
	ent := &netsyv1.Entry{Index: e.lastIdx + 1, Revision: cur, CompactRevision: r.Revision}
	e.appendEntry(ent, p, nil)
}

// compactFloor is the highest compaction applied or pending.
func (e *Engine) compactFloor() int64 {
	floor := e.compactRev.Load()
	for _, pe := range e.pending {
		if pe.entry.CompactRevision > floor {
			floor = pe.entry.CompactRevision
		}
	}
	return floor
}

func (e *Engine) handleLeaseGrant(o *leaseGrantOp, p *proposal) {
	r := o.req
	if r.TTL > MaxLeaseTTL {
		p.finish(ErrLeaseTTLTooLarge)
		return
	}
	id := r.ID
	if id == 0 {
		id = e.lease.newID()
	}
	if e.lease.exists(id) {
		p.finish(ErrLeaseExist)
		return
	}
	ttl := r.TTL
	if ttl < e.cfg.MinLeaseTTL {
		ttl = e.cfg.MinLeaseTTL
	}
	e.lease.grant(id, ttl)
	rev := e.store.Rev()
	o.resp = &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{Revision: rev}, ID: id, TTL: ttl}
	ent := &netsyv1.Entry{Index: e.lastIdx + 1, Revision: rev, LeaseGrants: []*netsyv1.LeaseGrant{{Id: id, Ttl: ttl}}}
	e.appendEntry(ent, p, nil)
}

// revokeLease deletes a lease's keys at a new revision and logs the revoke.
// p and setHeader are nil for expiry.
func (e *Engine) revokeLease(id int64, p *proposal, setHeader func(rev int64)) {
	w := e.newWriteTxn()
	for _, k := range e.lease.keys(id) {
		w.del(k)
	}
	if setHeader != nil {
		setHeader(w.finishRev())
	}
	w.commit(p, []int64{id})
}

// maxCheckpointAge caps LeaseCheckpointAge's tenth-of-the-TTL rule, as
// etcd's default checkpoint interval; maxCheckpointBatch caps one
// checkpoint entry (the rest stay due for the next one).
const (
	maxCheckpointAge   = 5 * time.Minute
	maxCheckpointBatch = 10000
)

// checkpointLeases logs the remaining time of every lease due for a
// checkpoint (see lessor.due) in one entry. A checkpoint is never needed
// for correctness on the writer, so it gives way: not while draining (the
// drain logs its own), failed, or refused by the storage's backpressure.
func (e *Engine) checkpointLeases() {
	if e.failed.Load() != nil || e.draining {
		return
	}
	if bp, ok := e.cfg.Storage.(backpressurer); ok && bp.Backpressure() != nil {
		return
	}
	e.logCheckpoints(e.lease.due(maxCheckpointBatch, e.lease.minDrift))
}

// logCheckpoints appends one key-less entry carrying cps, if any.
func (e *Engine) logCheckpoints(cps []*netsyv1.LeaseCheckpoint) {
	if len(cps) == 0 {
		return
	}
	ent := &netsyv1.Entry{Index: e.lastIdx + 1, Revision: e.store.Rev(), LeaseCheckpoints: cps}
	e.appendEntry(ent, nil, nil)
}

func (e *Engine) expireLeases() {
	if e.failed.Load() != nil {
		return
	}
	for _, id := range e.lease.expired(1000) {
		e.log.Debug("lease expired", "lease", id)
		e.revokeLease(id, nil, nil)
	}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
