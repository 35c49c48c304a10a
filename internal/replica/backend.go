package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Local is the local engine, as the Backend uses it.
type Local interface {
	Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error)
	Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error)
	DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error)
	Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error)
	Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error)
	LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error)
	LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error)
	LeaseRenew(ctx context.Context, id int64) (int64, error)
	LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error)
	LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error)
	CurrentRevision() int64
	CompactRevision() int64
	Events(from, to int64, limit int) ([]*mvccpb.Event, int64, error)
	CommitNotify() <-chan struct{}
	WatchErr() error
	Status(ctx context.Context) (*pb.StatusResponse, error)
	Hash(ctx context.Context) (*pb.HashResponse, error)
	HashKV(ctx context.Context, rev int64) (*pb.HashKVResponse, error)
	Snapshot(ctx context.Context, w io.Writer) (int64, error)
	CommittedIndex() uint64
	IsWriter() bool
	// LookupRequest finds the committed entry a forwarded request wrote
	// (see engine.Engine.LookupRequest).
	LookupRequest(id engine.RequestID) (req engine.LoggedRequest, found bool, completeFrom uint64)
}

// Roles is what the Backend needs to know about the cluster.
type Roles interface {
	// Primary returns the Primary this node knows and its term, or nil.
	Primary() (*netsyv1.NodeInfo, uint64)
	// Changed returns a channel closed when the roles next change.
	Changed() <-chan struct{}
	// Active reports whether this node is the Active Primary.
	Active() bool
	// ConfirmLinearizable confirms this Active Primary may answer a
	// linearizable read from memory now.
	ConfirmLinearizable(ctx context.Context) error
	// Members lists the registered nodes, for MemberList.
	Members() []*netsyv1.NodeInfo
	// Identity is the header identity: cluster id, this node's member id.
	Identity() (clusterID, memberID uint64)
	// MoveLeader hands the Primary role to the node with memberID and
	// returns once it is Active; RemoveMember deregisters the node with
	// memberID and returns the members left. Their errors are gRPC status
	// errors for the client.
	MoveLeader(ctx context.Context, memberID uint64) error
	RemoveMember(ctx context.Context, memberID uint64) ([]*netsyv1.NodeInfo, error)
}

// BackendConfig configures a Backend.
type BackendConfig struct {
	Local Local
	Roles Roles
	// Conn returns a connection to a peer address; nil makes the Backend
	// local only (what the peer port serves: a forwarded request is never
	// forwarded again).
	Conn func(addr string) (*grpc.ClientConn, error)
	// PrimaryWait bounds how long a request waits for a Primary to be
	// known or to take over (default 5 s).
	PrimaryWait time.Duration
	// ReadIndexWait bounds how long a linearizable read waits for this
	// node to apply the confirmed commit point (default 1 s); past it the
	// read fails with engine.ErrTimeout, it is never forwarded.
	ReadIndexWait time.Duration
	// ApplyWait bounds a forwarded write's wait, once the Primary has
	// answered it, for this node to apply the Primary's commit index
	// (default 5 s, and never past the client's deadline); past it the
	// write fails with engine.ErrTimeout (its outcome is unknown to the
	// client, as when a Primary times a write out). It is longer than
	// ReadIndexWait because the write has already happened: a node that
	// follows but stalls for a moment (a snapshot encode or a collection
	// on a loaded machine) should answer OK late, not an error that tells
	// its client nothing; a read that fails early is simply retried.
	ApplyWait time.Duration
	// ForwardWait bounds, from a write's first answer that was not the
	// write's (a refusal, a lost answer), how long it waits for the next
	// Primary and resolves an unknown outcome, unless the client's
	// deadline comes first (default 15 s): past it the client gets
	// engine.ErrTimeout. It must stay well below the request
	// index's age bound (engine: 10 minutes), so that a request is never
	// looked up after its id could have been dropped.
	ForwardWait time.Duration
	Clock       clock.Clock
}

// Backend is the etcd API's backend on every node; see the package doc.
type Backend struct {
	cfg BackendConfig
	// seq numbers the requests this node forwards (with its member id,
	// their request ids); it starts at a random value, so a restarted
	// node does not reuse the ids of its previous run.
	seq      atomic.Uint64
	l        Local
	readIdx  batcher[*netsyv1.ReadIndexResponse]
	identity func() (uint64, uint64)
	// fwd carries forwarded writes to the Primary (nil on the peer port's
	// Backend, which never forwards).
	fwd *forwarder

	// timers are waitApplied's stopped timers, kept for reuse (read.go).
	timers timerPool
}

// NewBackend returns a Backend.
func NewBackend(cfg BackendConfig) *Backend {
	if cfg.PrimaryWait <= 0 {
		cfg.PrimaryWait = 5 * time.Second
	}
	if cfg.ReadIndexWait <= 0 {
		cfg.ReadIndexWait = time.Second
	}
	if cfg.ApplyWait <= 0 {
		cfg.ApplyWait = 5 * time.Second
	}
	if cfg.ForwardWait <= 0 {
		cfg.ForwardWait = 15 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	b := &Backend{cfg: cfg, l: cfg.Local}
	b.seq.Store(randomSeq())
	b.readIdx.do, b.readIdx.clk = b.fetchReadIndex, cfg.Clock
	if cfg.Conn != nil {
		b.fwd = newForwarder(cfg.Clock)
	}
	return b
}

// Close ends the Backend's Forward streams (writes in flight on them end
// as if the connection broke) and waits for their goroutines. Writes
// after Close go to the Primary as etcd calls of their own.
func (b *Backend) Close() {
	if b.fwd != nil {
		b.fwd.close()
	}
}

// errNoPrimary is returned when no Primary took over in time.
var errNoPrimary = engine.ErrNoLeader

// primaryConn waits (bounded) until a Primary other than this node is
// known and returns a connection to it; nil when this node is the Active
// Primary.
func (b *Backend) primaryConn(ctx context.Context, avoid string) (*grpc.ClientConn, error) {
	// The common case, a Primary known at once, arms no timer: the
	// PrimaryWait bound (a timer and a context per write, which was
	// measurable: BenchmarkBackendPutOnPrimary) is only for waiting.
	changed := b.cfg.Roles.Changed()
	if conn, ok, err := b.knownPrimary(avoid); ok {
		return conn, err
	}
	ctx, cancel := clock.WithTimeout(ctx, b.cfg.Clock, b.cfg.PrimaryWait)
	defer cancel()
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, errNoPrimary
			}
			return nil, ctx.Err()
		}
		changed = b.cfg.Roles.Changed()
		if conn, ok, err := b.knownPrimary(avoid); ok {
			return conn, err
		}
	}
}

// knownPrimary is primaryConn's answer when it needs no wait (ok): this
// node is the Active Primary (nil), another Primary than avoid is known
// (a connection to it), or this Backend never forwards (ErrNotPrimary).
func (b *Backend) knownPrimary(avoid string) (conn *grpc.ClientConn, ok bool, err error) {
	if b.cfg.Roles.Active() {
		return nil, true, nil
	}
	if p, _ := b.cfg.Roles.Primary(); p != nil && p.NodeId != avoid && b.cfg.Conn != nil {
		if _, self := b.cfg.Roles.Identity(); p.MemberId != self {
			conn, err := b.cfg.Conn(p.PeerAddr)
			return conn, true, err
		}
	}
	if b.cfg.Conn == nil {
		return nil, true, engine.ErrNotPrimary
	}
	return nil, false, nil
}

// notEvaluated reports whether err says the request was refused before
// it was evaluated (the target is not the Primary), so it may go again.
func notEvaluated(err error) bool {
	if errors.Is(err, engine.ErrNotPrimary) || errors.Is(err, engine.ErrNoLeader) || errors.Is(err, errNotSent) {
		return true
	}
	if peer.ReasonOf(err) == peer.ReasonNotPrimary {
		return true
	}
	// A Primary of an older build says so only in the text.
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Message() {
	case rpctypes.ErrGRPCNotLeader.Error(), engine.ErrNotPrimary.Error():
		return true
	}
	// The connection could not be made: nothing was sent.
	return peer.Refused(err)
}

// write runs a write where the Primary is: locally when this node is the
// Active Primary, else through the Primary's peer port. A refusal before
// evaluation waits for the next Primary and goes again. A write whose
// outcome is unknown (the Primary died, or stepped down, with it in
// flight) is resolved when rebuild can answer it (see resolve): found in
// the next Primary's log, it is answered from there; never written, it is
// sent once more. Past its first answer, the write is bounded by the
// client's deadline and ForwardWait.
func write[T any](ctx context.Context, b *Backend, local func(context.Context) (T, error), remote remoteFunc[T], rebuild func(context.Context, engine.LoggedRequest) (T, error)) (T, error) {
	var zero T
	// The ForwardWait bound starts when the first answer was not the
	// write's: the common path arms no timer of its own (one per write
	// is measurable), and the Primary's write timeout bounds it.
	parent := ctx
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	bounded := false
	bound := func() {
		if !bounded {
			bounded = true
			ctx, cancel = clock.WithTimeout(parent, b.cfg.Clock, b.cfg.ForwardWait)
		}
	}
	var id engine.RequestID
	if b.cfg.Conn == nil {
		// The peer port's Backend: the node that forwarded the request
		// named it (its id is in ctx) and resolves it.
		rebuild = nil
	}
	if rebuild != nil {
		_, member := b.cfg.Roles.Identity()
		id = engine.RequestID{Member: member, Seq: b.seq.Add(1)}
	}
	avoid := ""
	// sends bounds how often one request goes out: once, once more when
	// the next Primary's log shows it never written, and (when the same
	// Primary answered, which refuses an id it already holds) once again.
	sends := 0
	for {
		conn, err := b.primaryConn(ctx, avoid)
		if err != nil {
			return zero, b.finalErr(parent, ctx, err)
		}
		// A change of roles while the request is out must wake the wait
		// after a refusal, or the wait would miss it.
		changed := b.cfg.Roles.Changed()
		p, sentTerm := b.cfg.Roles.Primary()
		sentCommit := b.l.CommittedIndex()
		var resp T
		var commitIdx uint64
		var hasCommit bool
		sends++
		if conn == nil {
			// The first sending's id is new (this node just made it), so
			// the engine need not look it up in what it logged.
			withID := engine.WithRequestID
			if sends == 1 {
				withID = engine.WithNewRequestID
			}
			resp, err = local(withID(ctx, id))
			err = wireError(err)
		} else {
			resp, commitIdx, hasCommit, err = remote(ctx, target{conn: conn, term: sentTerm, id: id, named: rebuild != nil})
		}
		if err == nil && conn != nil {
			// As on etcd, a write answered by a node is applied there: a
			// serializable read or a watch on this node that follows it
			// sees it. The Primary says how far it had committed. A node
			// that has not applied that far within ApplyWait (it is
			// not following, or lags) answers an error instead of OK: the
			// write happened, but an OK its client could not read back on
			// this node would break read-your-writes.
			if hasCommit {
				if werr := b.waitApplied(ctx, commitIdx, b.cfg.ApplyWait); werr != nil {
					if rebuild == nil || !b.primaryMoved(p, sentTerm) || ctx.Err() != nil {
						return zero, fmt.Errorf("the Primary applied the write, but %w", werr)
					}
					bound()
					// The Primary committed it and then went away before
					// this node applied it: the next Primary's log has
					// it, and this node applies it by following there.
					return resolveCommitted(parent, ctx, b, id, sentTerm, rebuild)
				}
			}
		}
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return zero, b.finalErr(parent, ctx, err)
		}
		bound()
		if notEvaluated(err) {
			// Not the Primary (any more): wait for the roles to move on.
			if p, _ := b.cfg.Roles.Primary(); p != nil {
				avoid = p.NodeId
			}
			select {
			case <-changed:
				avoid = ""
			case <-ctx.Done():
				return zero, b.finalErr(parent, ctx, ctx.Err())
			case <-b.cfg.Clock.After(50 * time.Millisecond):
				avoid = ""
			}
			continue
		}
		if !unknownOutcome(err) || b.cfg.Conn == nil {
			// The peer port's Backend answers as its engine did: the
			// forwarding node decides from the code and reason.
			return resp, err
		}
		if conn == nil && !errors.Is(err, engine.ErrLeaderChanged) {
			// This node's own engine answered: only a step-down leaves
			// the outcome to the next Primary's log. A timed-out write
			// may still commit here, and a failed engine's error says
			// what clients must know (object storage is unavailable).
			return resp, err
		}
		if rebuild == nil {
			// An outcome this request kind cannot learn from the log:
			// etcd's retryable answer, never the transport's text.
			return zero, fmt.Errorf("%w (the Primary went away with the request in flight: %v)", engine.ErrLeaderChanged, err)
		}
		lr, found, rerr := b.resolve(ctx, id, sentTerm, sentCommit)
		switch {
		case rerr != nil:
			return zero, b.finalErr(parent, ctx, rerr)
		case found:
			return rebuild(ctx, lr)
		case sends >= 3:
			return zero, fmt.Errorf("%w: the request was not found written after being sent %d times", engine.ErrLeaderChanged, sends)
		}
		// Not written: send it again, under the same id.
		avoid = ""
	}
}

// CommitIndexTrailer is the gRPC trailer in which a Primary answering a
// forwarded write says its commit index (see CommitIndexInterceptor).
const CommitIndexTrailer = "netsy-commit-index"

// CommitIndexInterceptor is the Primary's side of forwarding: on the peer
// port, every successful etcd API call is answered with the engine's
// commit index in the CommitIndexTrailer trailer, so the node that
// forwarded it can wait until it has applied that far (read-your-writes
// on replicas); and a forwarded write's request id (RequestIDHeader)
// goes with it to the engine, whose entry keeps it.
func CommitIndexInterceptor(committed func() uint64) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if id, ok := requestIDFromIncoming(ctx); ok {
			ctx = engine.WithRequestID(ctx, id)
		}
		resp, err := handler(ctx, req)
		if err == nil && strings.HasPrefix(info.FullMethod, "/etcdserverpb.") {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(CommitIndexTrailer, strconv.FormatUint(committed(), 10)))
		}
		return resp, err
	}
}

func firstOf(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func (b *Backend) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	return write(ctx, b, func(ctx context.Context) (*pb.PutResponse, error) { return b.l.Put(ctx, r) },
		streamed(b, netsyv1.ForwardKind_FORWARD_PUT, r, func() *pb.PutResponse { return &pb.PutResponse{} },
			func(ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) (*pb.PutResponse, error) {
				return pb.NewKVClient(c).Put(ctx, r, opts...)
			}),
		func(ctx context.Context, lr engine.LoggedRequest) (*pb.PutResponse, error) {
			return b.rebuildPut(ctx, r, lr)
		})
}

func (b *Backend) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return write(ctx, b, func(ctx context.Context) (*pb.DeleteRangeResponse, error) { return b.l.DeleteRange(ctx, r) },
		streamed(b, netsyv1.ForwardKind_FORWARD_DELETE_RANGE, r, func() *pb.DeleteRangeResponse { return &pb.DeleteRangeResponse{} },
			func(ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
				return pb.NewKVClient(c).DeleteRange(ctx, r, opts...)
			}),
		func(ctx context.Context, lr engine.LoggedRequest) (*pb.DeleteRangeResponse, error) {
			return b.rebuildDelete(ctx, r, lr)
		})
}

func (b *Backend) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return write(ctx, b, func(ctx context.Context) (*pb.CompactionResponse, error) { return b.l.Compact(ctx, r) },
		unary(func(ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) (*pb.CompactionResponse, error) {
			return pb.NewKVClient(c).Compact(ctx, r, opts...)
		}), nil)
}

func (b *Backend) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return write(ctx, b, func(ctx context.Context) (*pb.LeaseGrantResponse, error) { return b.l.LeaseGrant(ctx, r) },
		unary(func(ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) (*pb.LeaseGrantResponse, error) {
			return pb.NewLeaseClient(c).LeaseGrant(ctx, r, opts...)
		}), nil)
}

func (b *Backend) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return write(ctx, b, func(ctx context.Context) (*pb.LeaseRevokeResponse, error) { return b.l.LeaseRevoke(ctx, r) },
		unary(func(ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) (*pb.LeaseRevokeResponse, error) {
			return pb.NewLeaseClient(c).LeaseRevoke(ctx, r, opts...)
		}), nil)
}

func (b *Backend) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	return write(ctx, b, func(ctx context.Context) (int64, error) { return b.l.LeaseRenew(ctx, id) },
		unary(func(ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) (int64, error) {
			resp, err := netsyv1.NewNodeClient(c).LeaseRenew(ctx, &netsyv1.LeaseRenewRequest{Id: id})
			if err != nil {
				if s, ok := status.FromError(err); ok && s.Message() == engine.ErrLeaseNotFound.Error() {
					return 0, engine.ErrLeaseNotFound
				}
				return 0, err
			}
			return resp.Ttl, nil
		}), nil)
}

// LeaseTimeToLive and LeaseLeases are linearizable reads of the local
// state: grants and revokes are entries, and the remaining time counts
// down from the last lease checkpoint this node applied, within about a
// checkpoint interval of the Primary's (see engine.Config). A lease
// revoked or granted before the request is seen as such.
func (b *Backend) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	if err := b.linearizable(ctx); err != nil {
		return nil, err
	}
	return b.l.LeaseTimeToLive(ctx, r)
}

func (b *Backend) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	if err := b.linearizable(ctx); err != nil {
		return nil, err
	}
	return b.l.LeaseLeases(ctx, r)
}

// Txn: a write goes to the Primary; a read-only txn is a read.
func (b *Backend) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if engine.IsWriteTxn(r) {
		return write(ctx, b, func(ctx context.Context) (*pb.TxnResponse, error) { return b.l.Txn(ctx, r) },
			streamed(b, netsyv1.ForwardKind_FORWARD_TXN, r, func() *pb.TxnResponse { return &pb.TxnResponse{} },
				func(ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
					return pb.NewKVClient(c).Txn(ctx, r, opts...)
				}),
			func(ctx context.Context, lr engine.LoggedRequest) (*pb.TxnResponse, error) {
				return b.rebuildTxn(ctx, r, lr)
			})
	}
	if !engine.SerializableTxn(r) {
		if err := b.linearizable(ctx); err != nil {
			return nil, err
		}
	}
	return b.l.Txn(ctx, r)
}

// waitRoles waits (bounded) for the roles to change from when changed
// was taken: a change between taking it and the wait is not missed.
func (b *Backend) waitRoles(ctx context.Context, changed <-chan struct{}) error {
	ctx, cancel := clock.WithTimeout(ctx, b.cfg.Clock, b.cfg.PrimaryWait)
	defer cancel()
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The watch side reads the local committed log.
func (b *Backend) CurrentRevision() int64 { return b.l.CurrentRevision() }
func (b *Backend) CompactRevision() int64 { return b.l.CompactRevision() }
func (b *Backend) Events(from, to int64, limit int) ([]*mvccpb.Event, int64, error) {
	return b.l.Events(from, to, limit)
}
func (b *Backend) CommitNotify() <-chan struct{} { return b.l.CommitNotify() }
func (b *Backend) WatchErr() error               { return b.l.WatchErr() }

// Status reports this node, with the Primary as leader and its term as
// the raft term (what Identity puts in the header).
func (b *Backend) Status(ctx context.Context) (*pb.StatusResponse, error) {
	st, err := b.l.Status(ctx)
	if err != nil {
		return nil, err
	}
	p, term := b.cfg.Roles.Primary()
	st.Leader, st.RaftTerm = 0, max(term, 1)
	if p != nil {
		st.Leader = p.MemberId
	}
	return st, nil
}

func (b *Backend) Hash(ctx context.Context) (*pb.HashResponse, error) { return b.l.Hash(ctx) }
func (b *Backend) HashKV(ctx context.Context, rev int64) (*pb.HashKVResponse, error) {
	return b.l.HashKV(ctx, rev)
}
func (b *Backend) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	return b.l.Snapshot(ctx, w)
}

// MemberList lists every registered node with its member id, name (its
// --name, else its node id) and URLs.
func (b *Backend) MemberList(context.Context) (*pb.MemberListResponse, error) {
	resp := &pb.MemberListResponse{Header: &pb.ResponseHeader{Revision: b.l.CurrentRevision()}}
	resp.Members = etcdMembers(b.cfg.Roles.Members())
	return resp, nil
}

// MoveLeader hands the Primary role to the member (Roles.MoveLeader).
func (b *Backend) MoveLeader(ctx context.Context, memberID uint64) error {
	return b.cfg.Roles.MoveLeader(ctx, memberID)
}

// MemberRemove deregisters the member (Roles.RemoveMember) and lists the
// members left.
func (b *Backend) MemberRemove(ctx context.Context, memberID uint64) (*pb.MemberRemoveResponse, error) {
	left, err := b.cfg.Roles.RemoveMember(ctx, memberID)
	if err != nil {
		return nil, err
	}
	return &pb.MemberRemoveResponse{
		Header:  &pb.ResponseHeader{Revision: b.l.CurrentRevision()},
		Members: etcdMembers(left),
	}, nil
}

// etcdMembers is nodes as etcd's MemberList shows members.
func etcdMembers(nodes []*netsyv1.NodeInfo) []*pb.Member {
	var out []*pb.Member
	for _, m := range nodes {
		name := m.Name
		if name == "" {
			name = m.NodeId
		}
		out = append(out, &pb.Member{
			ID:         m.MemberId,
			Name:       name,
			PeerURLs:   []string{"http://" + m.PeerAddr},
			ClientURLs: m.ClientUrls,
		})
	}
	return out
}

// Identity is the header identity; the raft term is the primary term.
func (b *Backend) Identity() (clusterID, memberID, raftTerm uint64) {
	c, m := b.cfg.Roles.Identity()
	_, term := b.cfg.Roles.Primary()
	return c, m, max(term, 1)
}
