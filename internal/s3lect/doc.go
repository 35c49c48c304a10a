// Package s3lect is tier 1 of Netsy's election: it decides which node is
// the Elector, using one object in the bucket as a lock. What the Elector
// then does (choosing the Primary) is tier 2 and lives elsewhere; tier 2
// feeds back what it hears from the Elector through Observed and Suspect,
// so that in a steady cluster only the Elector touches the lock.
//
// It owns one key, leader/elector.json (Key), and touches nothing else in
// the bucket. Its body is JSON:
//
//	{"version":1,"holder_id":"n1","holder_addr":"10.0.0.1:2380","term":7,
//	 "lease_ms":15000,"counter":1234,"released":false,"written_at":"..."}
//
// # Writes
//
// Every write carries a counter one above the highest this node has seen,
// so no two bodies are ever equal and an ETag (MinIO's is the body's MD5)
// never comes back: a conditional write on an ETag seen earlier can only
// succeed if nothing was written since. Retries of a failed renewal or
// release resend the same bytes, so at most one of them lands.
//
//   - Acquire an absent lock: PutIfAbsent. Its term is one above the highest
//     this node has seen and above Config.MinTerm, so a lock an operator
//     deleted does not bring an old term back.
//   - Take over a released or stale lock: PutIfMatch on the ETag this node
//     saw, with the next term.
//   - Renew: the holder's PutIfMatch on its own last ETag; same term.
//   - Resign: PutIfMatch writing the holder's lock again with released set.
//
// The lock is never deleted (MinIO ignores If-Match on DELETE).
//
// # Rules
//
//  1. Staleness is measured only on the observer's own monotonic clock: a
//     version of the lock is stale for a node once that node first saw it a
//     full lease ago (its own Lease, or the holder's lease_ms if longer) and
//     has not seen another since. "Saw" means a read answered with that
//     ETag, or tier 2 reporting that write's counter (Observed): both happen
//     after the write landed. A different version starts the count again.
//     written_at, or any other machine's clock, decides nothing.
//  2. A node acquires only a lock that is absent, released or stale for it,
//     or one held in its own node id and address by a process that is not
//     acting on it (itself restarted: one process per node id and address).
//     A live lock of another node is never taken, so a joining node cannot
//     unseat a working Elector.
//  3. The holder may act until HolderFraction (0.8) of its lease has passed
//     on its own clock since it sent its last successful write. An observer
//     waits a whole lease from a moment after that write landed, so the
//     holder stops first as long as no observer's clock runs more than 25%
//     faster than the holder's. The holder renews every Renew and retries
//     failures with backoff; when its validity runs out first, or a renew is
//     refused (someone else wrote), its Leadership.Ctx is cancelled at once,
//     before anything else happens, and it becomes an observer like any
//     other node. Leadership.Valid checks the same deadline against the
//     clock when asked: a process that was stopped (SIGSTOP) resumes with
//     its validity gone but its Ctx live until the election's goroutine
//     runs, and other goroutines may run first.
//  4. Resign cancels the Leadership.Ctx first and only then writes the
//     released marker, which others may take over at once. The resigner
//     does not acquire for one lease afterwards, so the handoff goes to
//     another node when there is one.
//  5. The holder never reads the lock: its write answers carry its ETag.
//     Other nodes read once at start, then only while they lack fresh
//     evidence of a live holder, every Poll. Evidence is tier 2 hearing from
//     the holder (Observed) and counts for 2 Renew from when this node first
//     saw that counter; a live holder writes a new one every Renew, so a
//     holder that stopped renewing stops being evidence even if it still
//     answers. Suspect reads at once and keeps polling until a read shows a
//     counter other than the one known when it was called. Observed reports
//     are matched to reads by holder, term and counter; the CAS always uses
//     the ETag of a read.
//  6. A lock object that does not decode (bad JSON, wrong version, missing
//     fields) is logged at error level with its key and treated as held by
//     an unknown node under that ETag: rule 1 applies, so it is replaced
//     once it has not changed for a lease. An unreachable store makes
//     nobody holder; a holder cut off from it loses by rule 3.
//
// The package is a deterministic core (core.go: decisions from this
// node's clock readings and store answers, no goroutines, no clock, no
// store) and a driver (election.go: one goroutine that owns the core,
// makes one store call at a time and enforces the deadlines the core sets,
// abandoning a call that outlives its deadline). Observed is stamped when
// the driver processes it, never earlier than the report arrived.
//
// s3lect must never: delete the lock; judge staleness from a timestamp in
// the lock or any clock but the node's own; take over a lock it has not
// seen unchanged for a lease unless it is released; give two different
// bodies the same counter; let a node act as Elector without a live Leadership.Ctx; or read the
// bucket on the holder.
package s3lect
