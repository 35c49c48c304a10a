package engine

import "errors"

// Sentinel errors of the write and lease paths. The strings are etcd's: the
// API layer maps each to the matching etcd gRPC error through one table.
var (
	ErrKeyNotFound      = errors.New("etcdserver: key not found")
	ErrLeaseNotFound    = errors.New("etcdserver: requested lease not found")
	ErrLeaseExist       = errors.New("etcdserver: lease already exists")
	ErrLeaseTTLTooLarge = errors.New("etcdserver: too large lease TTL")
	// ErrStopped is returned once the engine is closing or closed.
	ErrStopped = errors.New("etcdserver: server stopped")
	// ErrTimeout means the write was submitted but not confirmed durable in
	// time; its outcome is unknown, exactly as etcd's request timeout.
	ErrTimeout = errors.New("etcdserver: request timed out")
	// ErrUnavailable means durable storage refused or could not take the write.
	ErrUnavailable = errors.New("netsy: durable storage unavailable")
	// ErrDeposed means another node took over as the writer of this
	// node's object storage: this node's state may be stale, so it serves
	// no writes, linearizable reads, watches or lease renewals (clients
	// retry elsewhere); serializable reads still work.
	ErrDeposed = errors.New("netsy: this node was deposed: another writer took over its object storage")
	// ErrNotPrimary means this engine is not the writer (a replica, or a
	// Primary stepping down): the request was not evaluated, so it may be
	// sent to the Primary instead.
	ErrNotPrimary = errors.New("etcdserver: not leader")
	// ErrLeaderChanged means the write was evaluated but its writer stepped
	// down before it became durable: its outcome is unknown, as etcd's.
	ErrLeaderChanged = errors.New("etcdserver: leader changed")
	// ErrDuplicateRequest means a forwarded request came again whose
	// first sending is already logged (see WithRequestID): it was not
	// applied again, and its outcome is in the log.
	ErrDuplicateRequest = errors.New("netsy: duplicate forwarded request: its first sending is already logged")
	// ErrNoLeader means this node has no Primary to send the write to.
	ErrNoLeader = errors.New("etcdserver: no leader")
	// ErrNoSpace refuses a write that adds data while the NOSPACE alarm
	// is active, or that would take the store over its quota.
	ErrNoSpace = errors.New("etcdserver: mvcc: database space exceeded")
	// ErrQuotaTooSmall refuses to open a store that already holds more
	// than its space quota.
	ErrQuotaTooSmall = errors.New("space quota is smaller than the data")
	// ErrAlarmNotSupported refuses an alarm request Netsy cannot honour.
	ErrAlarmNotSupported = errors.New("netsy: alarm not supported")
)
