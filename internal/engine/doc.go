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
//     key-less revokes, lease checkpoints and compactions are logged at
//     the current revision.
//   - Only the writer renews and expires leases, and a renewal is not an
//     entry. Every node counts each lease's deadline down on its own
//     monotonic clock from the last grant, snapshot or lease checkpoint
//     it applied, never from a logged wall-clock time. The writer logs a
//     checkpoint (the time a lease has left) once per checkpoint interval
//     for the leases renewed since their last one, every tenth of a TTL
//     (within LeaseCheckpointAge and 5 min) for the others, and once more,
//     for every renewal since, when it starts draining, after which it
//     takes no renewal. So a follower's TimeToLive trails the writer's by
//     about one interval, a promoted follower keeps the deadlines it
//     tracked (at least one interval from the promotion) instead of
//     granting whole TTLs again, and a restart starts each lease from the
//     last remaining time logged; a checkpoint never makes a lease longer
//     than its TTL.
//   - A follower applies only entries known committed: on Open, what the
//     Storage says is (KnownCommitted: object storage holds it); the rest
//     of the log is held appended but unapplied, as followed entries are,
//     until the Primary commits it (CommitTo) or cuts it
//     (TruncateFollowed). A cut below what was applied rebuilds the state
//     from the Storage instead of serving it; a failed Starting step
//     holds what the Storage then has past the state again. A batch and
//     the commit point it carries are taken in one pass of the loop
//     (FollowCommit). The durable index (DurableIndex, what a follower's
//     receipts report) moves when the Storage reports the fsync, not when
//     the loop next runs; the loop is woken for a sync only when it has
//     work (the writer's commit, an error, or entries the commit point
//     already covers).
//   - The space quota (Config.QuotaBackendBytes) is judged by the writer
//     before a write is evaluated, on the store's space in use
//     (mvcc.Stats.InUse: keys, values and their bookkeeping, in memory and
//     spilled): a write that would pass it is refused before it is logged
//     and raises etcd's NOSPACE alarm; while any NOSPACE is active, puts,
//     txns with a put and lease grants are refused (ErrNoSpace) and
//     deletes, revokes, compactions and reads go on. Alarms are state of
//     the log (an entry raises or clears one, a snapshot carries the
//     active ones), never of a node: every node lists what it applied and
//     a new Primary inherits them with the history (see alarm.go for why
//     not re-derived). Open refuses a store already past its quota.
//   - A local snapshot is due when index + Config.SnapshotPhase crosses a
//     multiple of Config.SnapshotEntries (snapshotDue): nodes of a cluster
//     given different phases (SnapshotPhase of the node ID) snapshot at
//     different indexes of the same log instead of encoding the whole
//     state at once; the interval stays SnapshotEntries. The loop only
//     captures (pointers to the store's versions); the encode and write
//     run on one background goroutine, which reads the versions through
//     one reused KeyVersion (datafile.Viewer) and must never hold the
//     loop.
//   - A snapshot is loaded with its leases restored first, so keys attach
//     to them as the versions load (no pass over every key after). The
//     engine frees the decoded versions as the store takes them only
//     when the Storage says it hands its snapshots over
//     (HandsOverSnapshots: nothing else holds or hands out the same one);
//     a storage that keeps its snapshot is never changed by a load.
//     While a snapshot and the entries after it load, the collector is
//     held to the heap the load will take and settled after (gctune).
//   - A forwarded write's entry carries its request id (WithRequestID);
//     the ids of recent committed entries are indexed (bounded by count
//     and age, rebuilt from the log on open and on every rebuild) so the
//     forwarding node can learn whether a request whose answer it lost
//     was written, and a request whose id is logged (committed or pending)
//     is refused with ErrDuplicateRequest, never applied twice. An id its
//     caller has just made for a first sending (WithNewRequestID: the
//     Primary's own clients' writes) is logged and indexed but not looked
//     up, since nothing can carry it yet, nor kept in the pending ids' map
//     while its entry waits for durability: only the member that made it
//     knows it, and a sending again by that member (WithRequestID) is
//     checked against a scan of the pending entries with new ids, which
//     are all one member's (another member's new id goes to the map).
//   - Every proposal queued for the loop is answered exactly once: by the
//     loop, or, once the loop stopped, by whoever drains the queue first
//     (the leaving loop or a writer that queued after it). So a writer
//     waits on its own proposal and its caller's context only.
//   - The loop wakes its watchers per pass, not per entry: Follow streams
//     learn of appends (AppendNotify) once per pass of the loop that
//     appended, and the commit, durable and append channels are made only
//     when somebody waits on them. A goroutine that waits on appends over
//     and over (the Primary's quorum) keeps one buffered channel instead
//     (WatchAppends): poked per pass only while it says it wants to be,
//     never blocking the loop, and keeping the poke for a watcher that
//     read the log and has not started waiting yet. The write path's allocations
//     per write are pinned by BenchmarkPut, BenchmarkPutPending and
//     BenchmarkFollowBatch (run with -benchmem; they report cpu-ns/op);
//     BenchmarkPutSequentialWAL times one writer's puts through a real
//     local log (the loop, the log's writer goroutine, write, fsync,
//     commit: what a sequential client waits on), with and without the
//     fsync, so what the hand-offs cost shows apart from the disk.
//   - The client Watch streams a commit wakes share one Events read of
//     the store per commit notification (eventsCache in feed.go): kept
//     until the commit signal next fires, never for a range below the
//     compaction floor, and never past a deposition (checked first).
//
// The engine never talks to clients (internal/etcdapi does) and never knows
// where durability comes from: a local WAL, object storage or a replica
// quorum all sit behind Storage.
package engine
