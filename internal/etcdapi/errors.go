package etcdapi

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/mvcc"
)

// errorTable is the one place Backend errors become what etcd clients
// match on. Order matters only if a Backend wraps two sentinels in one error.
var errorTable = []struct {
	sentinel error
	grpc     error
}{
	{mvcc.ErrCompacted, rpctypes.ErrGRPCCompacted},
	{mvcc.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
	{engine.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
	{engine.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
	{engine.ErrLeaseExist, rpctypes.ErrGRPCLeaseExist},
	{engine.ErrLeaseTTLTooLarge, rpctypes.ErrGRPCLeaseTTLTooLarge},
	{engine.ErrStopped, rpctypes.ErrGRPCStopped},
	{engine.ErrTimeout, rpctypes.ErrGRPCTimeout},
	{engine.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
	{engine.ErrNotPrimary, rpctypes.ErrGRPCNotLeader},
	{engine.ErrLeaderChanged, rpctypes.ErrGRPCLeaderChanged},
	{engine.ErrNoSpace, rpctypes.ErrGRPCNoSpace},
	// Checked before ErrUnavailable, which a deposed engine's write
	// failures also wrap. Unavailable sends clients to another endpoint.
	{engine.ErrDeposed, status.Error(codes.Unavailable, engine.ErrDeposed.Error())},
	// etcd has no equivalent; Unavailable makes clients retry idempotent
	// calls, which is right while object storage is down.
	{engine.ErrUnavailable, status.Error(codes.Unavailable, engine.ErrUnavailable.Error())},
}

// errStopped ends streams when the Server closes.
var errStopped = rpctypes.ErrGRPCStopped

// toGRPCError maps a Backend error to the gRPC error an etcd client expects.
func toGRPCError(err error) error {
	if err == nil {
		return nil
	}
	// Context errors get their own codes and plain messages, as gRPC
	// reports a context that ended on its own.
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, context.Canceled.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	}
	for _, e := range errorTable {
		if errors.Is(err, e.sentinel) {
			return e.grpc
		}
	}
	// The sentinel's wrapping says which alarm request was refused.
	if errors.Is(err, engine.ErrAlarmNotSupported) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	// A Backend that forwards to the Primary returns the Primary's gRPC
	// errors; they already are what the client expects.
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unknown, err.Error())
}

// Unimplemented answers for the parts of the etcd API that Netsy does not
// offer. Each says what is true today and names what does the job instead,
// never a tool or feature that does not exist yet.
var (
	errMemberAdd = status.Error(codes.Unimplemented,
		"netsy: members are not added through the etcd API: a node joins by starting with the cluster's bucket "+
			"(the same --storage, and --s3-endpoint for S3, and the same --cluster-id) and its own --node-id and --peer-addr; "+
			"it registers itself, and etcdctl member list or netsyctl members then lists it")
	errMemberUpdate = status.Error(codes.Unimplemented,
		"netsy: members are not updated through the etcd API: a node's addresses are what it registers when it starts; "+
			"restart it with the new --advertise-peer or --advertise-client (netsyctl members lists what is registered)")
	errMemberPromote = status.Error(codes.Unimplemented,
		"netsy: netsy has no learners to promote: every node that starts with the cluster's bucket is a full member; "+
			"netsyctl handoff --to NODE (or etcdctl move-leader) makes one the Primary")
	errDowngrade = status.Error(codes.Unimplemented,
		"netsy: cluster downgrade is not supported: netsy keeps no cluster version for etcd's downgrade to lower")
	errAuth = status.Error(codes.Unimplemented,
		"netsy: etcd auth (users, roles, passwords) is not supported: client identities come from TLS client certificates "+
			"(--client-cert-auth with --trusted-ca-file; see docs/security.md), and a client whose certificate is accepted may use the whole keyspace")
)
