package etcdapi

import (
	"context"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Backend is what the etcd API layer needs from the node: the engine on a
// single node, the engine plus forwarding to the Primary in a cluster.
//
// Responses returned by a Backend carry a Header with Revision set; the API
// layer fills ClusterId, MemberId and RaftTerm from Identity. Errors are the
// sentinels of internal/engine and internal/mvcc (matched with errors.Is) or a
// context error; anything else is reported as codes.Unknown.
type Backend interface {
	KVBackend
	LeaseBackend
	WatchBackend
	MaintenanceBackend
}

// KVBackend executes key-value requests that have passed validation.
type KVBackend interface {
	Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error)
	Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error)
	DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error)
	Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error)
	Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error)
}

// LeaseBackend owns leases.
type LeaseBackend interface {
	LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error)
	LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error)
	// LeaseRenew refreshes a lease and returns its granted TTL in seconds.
	LeaseRenew(ctx context.Context, id int64) (ttl int64, err error)
	LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error)
	LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error)
}

// WatchBackend exposes the committed revision log that watches read from.
type WatchBackend interface {
	// CurrentRevision is the committed revision: every event at or below it
	// can be read with Events.
	CurrentRevision() int64
	// CompactRevision is the compaction floor.
	CompactRevision() int64
	// Events returns the committed events with from <= mod_revision <= to in
	// revision order. It returns whole revisions only and stops after the
	// revision at which the result reaches limit events (limit <= 0: no
	// limit); next is the first revision not returned. PrevKv is set on every
	// event whose key existed before (callers strip it when not asked for).
	// from < CompactRevision() returns mvcc.ErrCompacted. Returned values are
	// shared and must not be modified.
	Events(from, to int64, limit int) (evs []*mvccpb.Event, next int64, err error)
	// CommitNotify returns a channel that is closed when the committed
	// revision next advances (or a compaction happens). Read it before
	// CurrentRevision to never miss a change. It is also closed when
	// WatchErr starts returning an error.
	CommitNotify() <-chan struct{}
	// WatchErr returns nil while this node may serve watches, and an error
	// once it must not (its history may be stale: another node took over
	// as the writer). Every watch stream then ends with that error.
	WatchErr() error
}

// MaintenanceBackend serves the Maintenance and Cluster services.
type MaintenanceBackend interface {
	// Status fills everything but the header identity (version string
	// included).
	Status(ctx context.Context) (*pb.StatusResponse, error)
	Hash(ctx context.Context) (*pb.HashResponse, error)
	HashKV(ctx context.Context, rev int64) (*pb.HashKVResponse, error)
	// Snapshot writes a consistent snapshot data file to w and returns the
	// number of bytes written.
	Snapshot(ctx context.Context, w io.Writer) (int64, error)
	MemberList(ctx context.Context) (*pb.MemberListResponse, error)
	// Alarm lists (GET, from this node's state), raises or clears
	// (ACTIVATE, DEACTIVATE, made where writes are) the cluster's alarms.
	Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error)
	// MemberRemove takes the member out of the cluster and lists the
	// members left.
	MemberRemove(ctx context.Context, memberID uint64) (*pb.MemberRemoveResponse, error)
	// MoveLeader hands the Primary role to the member and returns once it
	// serves as the Primary.
	MoveLeader(ctx context.Context, memberID uint64) error
	// Identity returns the values for response headers.
	Identity() (clusterID, memberID, raftTerm uint64)
}
