// Package engine is the single-node database: it serializes every write in
// one loop, turns each write into exactly one log entry, applies it to the
// MVCC store and acknowledges it once the log reports the entry durable.
//
// Invariants the engine enforces:
//   - Writes are evaluated against the latest applied state (including
//     entries not yet durable), so the log is one serial history.
//   - Clients never see a write before it is durable: reads, watches and
//     response headers use the committed revision, which only advances when
//     the Storage reports the entry synced.
//   - An entry carries resolved mutations (final values, existing keys), so
//     replay on restart or on a follower never re-evaluates a request.
//   - Revisions move only for entries that change keys; lease grants,
//     key-less revokes and compactions are logged at the current revision.
//   - A follower applies only entries known committed: on Open, what the
//     Storage says is (KnownCommitted: object storage holds it); the rest
//     of the log is held appended but unapplied, as followed entries are,
//     until the Primary commits it (CommitTo) or cuts it
//     (TruncateFollowed). A cut below what was applied rebuilds the state
//     from the Storage instead of serving it; a failed Starting step
//     holds what the Storage then has past the state again.
//   - A forwarded write's entry carries its request id (WithRequestID);
//     the ids of recent committed entries are indexed (bounded by count
//     and age, rebuilt from the log on open and on every rebuild) so the
//     forwarding node can learn whether a request whose answer it lost
//     was written, and a request whose id is logged (committed or pending)
//     is refused with ErrDuplicateRequest, never applied twice.
//
// The engine never talks to clients (internal/etcdapi does) and never knows
// where durability comes from: a local WAL, object storage or a replica
// quorum all sit behind Storage.
package engine
