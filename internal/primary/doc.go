// Package primary is this node's Primary life cycle: Replica → Starting →
// Active → Draining → Replica, the Primary's lease, and the Primary's side
// of the replication protocol (Follow streams, read index, forwarded lease
// renewals).
//
// Rules it enforces:
//   - Starting is the preflight. The replica role stops feeding the
//     engine, the term is recorded on local disk, and the engine is
//     promoted with object storage's claim as its Starting step (objwal
//     catches up with the bucket and claims the next wal seq, the fence)
//     before it accepts a write. A Starting step that fails after the
//     claim (the engine refuses a term below its log's) gives the writer
//     role back before the node is a Replica again, and so does one that
//     finds, once its claim is made, that a newer primary term was handed
//     out meanwhile (Config.HighestTerm): that term's Primary may have
//     claimed first, and its lease-based reads would miss what this node
//     acknowledged after it.
//   - A term is taken up once per node: a Cluster State naming this node
//     Primary at a term it held before (it restarted, or drained) is not
//     acted on; the node stays a Replica at that term, which tells the
//     Elector to run its audit again. TookTerm reports the term file's
//     term, raised only once it is durable and the state is Starting, so
//     that it, read before the state, with a Replica state proves to the
//     Elector that this node's Primary of that term is over (its lease
//     need not be waited out).
//   - A Primary steps down at once (no flush) when the Cluster State names
//     another Primary at a higher term, or when object storage fences it
//     (its chunk's seq was taken); it drains (flushes to object storage,
//     then steps down) when the Elector asks for a handoff.
//   - The lease: the Primary counts, on its own monotonic clock (Clock.Now
//     readings kept as time.Time, never wall nanoseconds, so a step of the
//     wall clock changes nothing), from the send time of the last
//     heartbeat answered by an Elector whose Cluster State names this node
//     Primary at the term it holds (the wiring calls Answered only for
//     those); becoming Active starts no lease by itself. While that is within the lease window it answers
//     linearizable reads from memory; after it, every linearizable read
//     waits for a check that no chunk exists at its next wal seq (one
//     check serves every read that arrived before it started), so an
//     Elector outage costs latency, not availability. A taken seq makes it
//     step down.
//   - A replica's receipts count toward the quorum only while it is a
//     member listed by the Cluster State that last vouched for the count
//     (below; a node that left is out of the count as soon as the lower
//     count is, before it learns it left), follows at this term, was heard within two heartbeat intervals, met the
//     last quorum deadline and its own last heartbeat (a receipt embeds
//     one whenever the replica's health changed) says Healthy: a Loading node, one cut from the Elector
//     and a leaving one (it reports Degraded from its first step, SPEC
//     §5.2) complete no quorum write, whatever index they acknowledge.
//     Too few counted replicas make writes go through object storage.
//   - Majority quorum counts from the registered nodes a Cluster State
//     vouches for: one naming this node Primary at the term it holds and
//     listing it among a nonzero count. Any other state (an Elector that
//     had not loaded, a stale state, one naming another Primary or none)
//     may raise the count, never lower it; until a state vouched for one,
//     writes are acknowledged through object storage.
//   - Follow streams send every entry in index order from where the
//     replica's log agrees with ours (same term at its last index), cutting
//     a diverged replica back to its own commit point, and in any case
//     below its last index when we hold another term's entry there (a
//     replica that applied it rebuilds its state); entries older than
//     what this node still holds send the replica to object storage first.
//     Every message carries the primary term. Commits follow the engine's
//     commit point. Woken by an append or a commit, a stream yields once
//     before reading, so a burst shares a message (no timer); streams
//     sending the same entries share one encoding of them. A slow
//     replica slows only its own stream (gRPC flow control); nothing is
//     dropped. Only the Active Primary serves
//     them; while Starting at the term asked for it refuses with
//     peer.ReasonPrimaryStarting, so the replica asks again soon instead
//     of backing off as from a fault.
//
// It must never accept a write before the claim succeeded, answer a
// linearizable read on a lapsed lease without the seq check, or stream an
// entry out of order.
package primary
