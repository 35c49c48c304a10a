package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// RequestIDHeader is the gRPC metadata key in which a forwarded write
// carries its request id ("member.seq", decimal): the Primary's peer port
// hands it to the engine (CommitIndexInterceptor), whose entry keeps it.
const RequestIDHeader = "netsy-request-id"

// formatRequestID runs once per forwarded write: one allocation, not one
// per number and one for the join (BenchmarkFormatRequestID).
func formatRequestID(id engine.RequestID) string {
	var buf [41]byte // two uint64s in decimal and the dot
	b := strconv.AppendUint(buf[:0], id.Member, 10)
	b = append(b, '.')
	return string(strconv.AppendUint(b, id.Seq, 10))
}

func parseRequestID(s string) (engine.RequestID, bool) {
	m, q, ok := strings.Cut(s, ".")
	if !ok {
		return engine.RequestID{}, false
	}
	member, err1 := strconv.ParseUint(m, 10, 64)
	seq, err2 := strconv.ParseUint(q, 10, 64)
	if err1 != nil || err2 != nil {
		return engine.RequestID{}, false
	}
	return engine.RequestID{Member: member, Seq: seq}, true
}

// randomSeq is where a Backend's request sequence starts: random, with
// room below 2^63 for any number of requests, so that two runs of one node
// do not share ids while the Primary still indexes the first run's.
func randomSeq() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on the platforms Netsy runs on; a
		// fixed start only weakens restarts, never one run.
		return 1 << 40
	}
	return binary.BigEndian.Uint64(b[:]) >> 2
}

// unknownOutcome reports whether err leaves a write's outcome unknown: the
// request may have reached the Primary and been logged, and nothing says
// whether it was. Transport failures (the Primary died or the connection
// broke with the call in flight) and the Primary's own "leader changed",
// "request timed out" and "stopped" are; an answer the Primary evaluated
// (key not found, compacted, ...) is not.
func unknownOutcome(err error) bool {
	if errors.Is(err, engine.ErrLeaseNotFound) {
		// The Primary's answer, decoded (LeaseRenew): it evaluated the
		// request.
		return false
	}
	for _, s := range []error{engine.ErrLeaderChanged, engine.ErrTimeout, engine.ErrStopped, engine.ErrUnavailable, engine.ErrDuplicateRequest} {
		if errors.Is(err, s) {
			return true
		}
	}
	if peer.ReasonOf(err) == peer.ReasonDuplicateRequest {
		return true
	}
	s, ok := status.FromError(err)
	if !ok {
		return true
	}
	switch s.Code() {
	case codes.Unavailable, codes.Unknown, codes.Internal, codes.Canceled, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

// wireError gives errors of the local engine that another node must
// decide on their wire form (the peer port answers with it).
func wireError(err error) error {
	if errors.Is(err, engine.ErrDuplicateRequest) {
		return &peer.CodedError{C: codes.AlreadyExists, R: peer.ReasonDuplicateRequest, Msg: err.Error()}
	}
	return err
}

// finalErr is what a client gets when a write ends in err: etcd's
// retryable errors, never a transport's text naming a peer address the
// client never configured. parent is the client's context, ctx the one
// ForwardWait bounds.
func (b *Backend) finalErr(parent, ctx context.Context, err error) error {
	if parent.Err() != nil {
		return parent.Err()
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: the write's outcome could not be learned in time (%v)", engine.ErrTimeout, err)
	}
	if errors.Is(err, engine.ErrNoLeader) || errors.Is(err, engine.ErrNotPrimary) || errors.Is(err, engine.ErrTimeout) || errors.Is(err, engine.ErrLeaderChanged) {
		return err
	}
	if unknownOutcome(err) {
		return fmt.Errorf("%w (%v)", engine.ErrLeaderChanged, err)
	}
	return err
}

// primaryMoved reports whether the roles no longer name p at term.
func (b *Backend) primaryMoved(p *netsyv1.NodeInfo, term uint64) bool {
	now, t := b.cfg.Roles.Primary()
	return t != term || now == nil || p == nil || now.NodeId != p.NodeId
}

// resolve learns the outcome of the forwarded request id whose sending
// (to the Primary of sentTerm, while this node had applied sentCommit)
// ended without an answer. It waits until a Primary is Active and this
// node has applied that Primary's commit point, then looks the id up in
// what it applied:
//   - found: the request was written, at the entry returned;
//   - not found, the Primary of a newer term: its log is final (what it
//     does not hold was cut), so the request was never written and may be
//     sent again;
//   - not found, the same Primary still: the request may still be pending
//     there; sending it again is safe all the same, as the Primary
//     refuses an id it holds pending or committed (ErrDuplicateRequest)
//     and this resolves again.
//
// An index that may have dropped the id (it is complete only from an
// index after sentCommit) answers neither: the request must not be sent
// again, and the client gets etcd's retryable "leader changed".
func (b *Backend) resolve(ctx context.Context, id engine.RequestID, sentTerm uint64, sentCommit uint64) (engine.LoggedRequest, bool, error) {
	for {
		changed := b.cfg.Roles.Changed()
		if b.cfg.Roles.Active() {
			// This node's own log is final once it is Active.
			return b.lookup(id, sentCommit)
		}
		ri, err := b.readIdx.get(ctx)
		if err == nil && ri.PrimaryTerm >= sentTerm {
			if werr := b.waitApplied(ctx, ri.Index, b.cfg.ReadIndexWait); werr == nil {
				return b.lookup(id, sentCommit)
			}
			if ctx.Err() != nil {
				return engine.LoggedRequest{}, false, ctx.Err()
			}
			continue
		}
		// No Active Primary answers yet (the dead one is still named, or
		// the next one is Starting): wait for the roles to move on.
		select {
		case <-changed:
		case <-ctx.Done():
			return engine.LoggedRequest{}, false, ctx.Err()
		case <-b.cfg.Clock.After(50 * time.Millisecond):
		}
	}
}

func (b *Backend) lookup(id engine.RequestID, sentCommit uint64) (engine.LoggedRequest, bool, error) {
	lr, found, from := b.l.LookupRequest(id)
	if found {
		return lr, true, nil
	}
	if from > sentCommit+1 {
		return lr, false, fmt.Errorf("%w: this node's request index starts at index %d, after the request was sent (at %d): its outcome cannot be told", engine.ErrLeaderChanged, from, sentCommit)
	}
	return lr, false, nil
}

// resolveCommitted answers a write the Primary said it committed, after
// the Primary went away before this node applied it: the entry is in the
// next Primary's log, and this node finds it once it has followed there.
func resolveCommitted[T any](parent, ctx context.Context, b *Backend, id engine.RequestID, sentTerm uint64, rebuild func(context.Context, engine.LoggedRequest) (T, error)) (T, error) {
	var zero T
	lr, found, err := b.resolve(ctx, id, sentTerm, 0)
	if err != nil {
		return zero, b.finalErr(parent, ctx, err)
	}
	if !found {
		// Committed, yet not in the history: this node cannot vouch for
		// it, and never sends it again.
		return zero, fmt.Errorf("%w: the Primary committed the write, but it is not in the history this node applied", engine.ErrTimeout)
	}
	return rebuild(ctx, lr)
}

// The rebuild functions answer a forwarded request from the entry it
// wrote, as the Primary answered it: the header at the entry's revision,
// and what the request asked about the state before it (prev_kv, deleted
// counts, a Txn's branches and reads) read at the revision before the
// entry from this node's own history. A response that cannot be rebuilt
// (that history is compacted, or a Txn reads after writing, which would
// need the txn's own writes) fails with etcd's retryable "leader changed":
// the request is not sent again.

var errCannotRebuild = fmt.Errorf("%w: the write is in the log, but its response cannot be rebuilt", engine.ErrLeaderChanged)

func (b *Backend) rangeBefore(ctx context.Context, lr engine.LoggedRequest, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	rr := *r
	rr.Revision, rr.Serializable = lr.Before(), true
	resp, err := b.l.Range(ctx, &rr)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", errCannotRebuild, err)
	}
	return resp, nil
}

func (b *Backend) rebuildPut(ctx context.Context, r *pb.PutRequest, lr engine.LoggedRequest) (*pb.PutResponse, error) {
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: lr.Revision}}
	if r.PrevKv {
		prev, err := b.rangeBefore(ctx, lr, &pb.RangeRequest{Key: r.Key})
		if err != nil {
			return nil, err
		}
		if len(prev.Kvs) > 0 {
			resp.PrevKv = prev.Kvs[0]
		}
	}
	return resp, nil
}

func (b *Backend) rebuildDelete(ctx context.Context, r *pb.DeleteRangeRequest, lr engine.LoggedRequest) (*pb.DeleteRangeResponse, error) {
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{Revision: lr.Revision}}
	resp.Deleted = int64(lr.Deletes)
	if r.PrevKv {
		prev, err := b.rangeBefore(ctx, lr, &pb.RangeRequest{Key: r.Key, RangeEnd: r.RangeEnd})
		if err != nil {
			return nil, err
		}
		resp.PrevKvs = prev.Kvs
	}
	return resp, nil
}

func (b *Backend) rebuildTxn(ctx context.Context, r *pb.TxnRequest, lr engine.LoggedRequest) (*pb.TxnResponse, error) {
	path := []byte(lr.TxnPath)
	wrote := false
	resp, err := b.rebuildTxnPath(ctx, r, lr, &path, &wrote)
	if err != nil {
		return nil, err
	}
	if len(path) != 0 {
		return nil, fmt.Errorf("%w: the logged txn path does not match the request", errCannotRebuild)
	}
	resp.Header = &pb.ResponseHeader{Revision: lr.Revision}
	return resp, nil
}

// rebuildTxnPath rebuilds one txn of the tree, consuming its branch from
// path; wrote says whether a write ran before (etcd refuses a txn whose
// puts and deletes overlap, so a write's response depends only on the
// state before the txn; a read after a write may see it, and is not
// rebuilt).
func (b *Backend) rebuildTxnPath(ctx context.Context, r *pb.TxnRequest, lr engine.LoggedRequest, path *[]byte, wrote *bool) (*pb.TxnResponse, error) {
	if len(*path) == 0 {
		return nil, fmt.Errorf("%w: the entry does not say which branch the txn took", errCannotRebuild)
	}
	ok := (*path)[0] == 1
	*path = (*path)[1:]
	ops := r.Success
	if !ok {
		ops = r.Failure
	}
	hdr := func() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: lr.Revision} }
	resp := &pb.TxnResponse{Succeeded: ok, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		var out pb.ResponseOp
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			if *wrote {
				return nil, fmt.Errorf("%w: a txn that reads after it writes", errCannotRebuild)
			}
			rr, err := b.rangeBefore(ctx, lr, v.RequestRange)
			if err != nil {
				return nil, err
			}
			rr.Header = hdr()
			out.Response = &pb.ResponseOp_ResponseRange{ResponseRange: rr}
		case *pb.RequestOp_RequestPut:
			pr, err := b.rebuildPut(ctx, v.RequestPut, lr)
			if err != nil {
				return nil, err
			}
			*wrote = true
			out.Response = &pb.ResponseOp_ResponsePut{ResponsePut: pr}
		case *pb.RequestOp_RequestDeleteRange:
			d := v.RequestDeleteRange
			prev, err := b.rangeBefore(ctx, lr, &pb.RangeRequest{Key: d.Key, RangeEnd: d.RangeEnd, KeysOnly: !d.PrevKv})
			if err != nil {
				return nil, err
			}
			dr := &pb.DeleteRangeResponse{Header: hdr(), Deleted: int64(len(prev.Kvs))}
			if d.PrevKv {
				dr.PrevKvs = prev.Kvs
			}
			*wrote = true
			out.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}
		case *pb.RequestOp_RequestTxn:
			tr, err := b.rebuildTxnPath(ctx, v.RequestTxn, lr, path, wrote)
			if err != nil {
				return nil, err
			}
			tr.Header = hdr()
			out.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}
		}
		resp.Responses[i] = &out
	}
	return resp, nil
}

// requestIDFromIncoming reads a forwarded request's id from its metadata.
func requestIDFromIncoming(ctx context.Context) (engine.RequestID, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	return parseRequestID(firstOf(md.Get(RequestIDHeader)))
}
