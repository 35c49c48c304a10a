// Package replica is how a node that is not the Primary keeps up and
// serves clients: it follows the Primary over a Follow stream, and its
// Backend answers the etcd API on any node, forwarding to the Primary what
// only the Primary may decide.
//
// Following (Follower):
//   - On a Cluster State naming another node Primary, the node opens a
//     Follow stream to it at once, saying where its log ends (index, the
//     term that wrote it) and its commit point; a broken stream is
//     reopened with backoff (20 ms doubling to 1 s, cut short by a new
//     Primary), resuming from the log's end. A refusal because the
//     Primary is still Starting (peer.ReasonPrimaryStarting) is expected
//     and brief: it is asked again every 50 ms, with no backoff, so the
//     node follows within that of the Primary turning Active.
//   - A node that was the Primary follows only once its own writer role
//     has let go of the log (the engine stopped writing and its heartbeat
//     no longer says Starting, Active or Draining: stepping down releases
//     the log and cuts what no Primary committed), and then by itself,
//     looking again every 20 ms: the Cluster State naming the new Primary
//     may have come while it still wrote, and will not come again.
//   - Every message must carry the term the stream was opened for; any
//     other term ends the stream. The Initial message may cut the log back
//     (entries no Primary committed; a cut below what the engine applied
//     makes it rebuild its state there) or send the node to object storage
//     first (it is further behind than the Primary holds); entries must
//     then continue the log exactly, or the stream ends. Initial's commit
//     point takes the path every Commit takes. Compact is deliberately
//     not acted on: the compaction is an entry, applied at its place in
//     the history once a commit covers it.
//   - Entries are appended to the local log (group-committed fsync) and
//     applied once the Primary's Commit covers them and they are durable
//     here. A Receipt (the highest fsync'd index, with this node's
//     heartbeat embedded when the stream has not carried one, its health
//     changed since the last one, or that one is an interval old) goes
//     out whenever that index advances, and a
//     heartbeat alone when no receipt went out within the cadence; one
//     goroutine sends, so sends never interleave. A send that fails ends
//     the stream and is retried at once on a new one; when the retry
//     fails too, Sent is told (the node's one health decision,
//     heartbeat.Judge), and told again once a send gets through.
//   - Stop ends following before a promotion and returns only once nothing
//     more reaches the engine.
//
// Serving (Backend):
//   - Writes, compaction and lease grants, revokes and keep-alives go to
//     the Primary: the local engine when this node is the Active Primary,
//     else the Primary's peer port. A request the Primary refused without
//     evaluating it (it is not, or no longer, the Primary) waits for the
//     next Primary and is sent there. A Put, DeleteRange or write Txn
//     carries a request id (this node's member id and a sequence that
//     starts at random) that its entry keeps; the Active Primary's own
//     engine takes a first sending's id as new (engine.WithNewRequestID:
//     not looked up, nothing can carry it yet), any later sending's as
//     one to check. When its
//     outcome is unknown (the Primary died or stepped down with it in
//     flight; on the Active Primary itself, only a step-down of its own
//     engine), the node waits until a Primary is Active, applies that
//     Primary's commit point and looks the id up in what it applied
//     (engine.LookupRequest): found, the client gets the response rebuilt
//     from the entry and the history before it (a Txn that reads after
//     it writes cannot be, and gets "leader changed"); not found, the
//     request goes again under the same id (an Active Primary's log is
//     final for older terms, and the engine refuses an id it holds
//     pending or committed, so nothing is applied twice). An index that
//     may have dropped the id answers neither, and the client gets
//     "leader changed". Other kinds (compaction, leases) still answer an
//     unknown outcome with "leader changed". Waiting and resolving are
//     bounded by the client's deadline and ForwardWait; the errors that remain are
//     etcd's retryable ones, never a transport's text. A write forwarded
//     to the Primary is answered OK
//     only once this node has applied the Primary's commit index from the
//     answer; if it has not within ApplyWait (5 s, longer than a read's
//     ReadIndexWait: the write has happened, and a node that stalls for a
//     moment should answer it late rather than as an unknown outcome),
//     the client gets ErrTimeout instead (read-your-writes on every node).
//   - Put, DeleteRange and write Txn reach the Primary over one Forward
//     stream per connection to it (forward.go), opened by the first write
//     that needs it, reopened by the next after it broke, ended by Close.
//     One goroutine at a time sends: a write that finds the stream open,
//     nobody sending and nothing in flight (so the send cannot wait on
//     flow control past the client's deadline) sends from its own
//     goroutine (no goroutine is woken for it), and otherwise the
//     stream's goroutine is woken; either
//     yields once to the goroutines already runnable (a burst of writes
//     queues together, behind the sender, waking nobody), then the writes
//     queued go in one message, with no timer; a writer sends at most two
//     messages before it hands the queue to the stream's goroutine. One
//     goroutine receives and hands each reply to its write. Only the transport differs from an etcd call:
//     the answer is the call's (the Primary's error rebuilt from its
//     status, or the response and the commit index). A broken stream
//     fails the writes it sent as a lost call (unknown outcome, resolved
//     by request id) and those not yet sent as refused unevaluated. A
//     Primary that answers Unimplemented (an older version, in a rolling
//     upgrade) is sent each write as an etcd call (request id in
//     RequestIDHeader, commit index in CommitIndexTrailer) for the rest
//     of its term; compaction and lease requests always are.
//   - ForwardServer is the Primary's side: it evaluates every request of
//     a batch at once, concurrently, through the peer port's etcd KV
//     service with its request id (so they group-commit together, and a
//     node that is not the Active Primary refuses them as the call
//     would), and sends replies, as many in a message as are ready
//     (the sender yields once before taking them, so the replies of one
//     group commit share a message), one sender at a time per stream:
//     the worker whose reply finds nobody sending (for at most two
//     messages), else the stream's send goroutine.
//   - Serializable reads are served locally at once. Linearizable reads are
//     served locally after a read index: the Primary confirms its commit
//     point (concurrent reads share one request that began after they
//     arrived) and the node waits until it has applied that far. A read
//     index refused unevaluated (the Primary is still Starting, or not
//     the Primary) is asked again on a role change or after 10 ms
//     doubling to 100 ms, for at most PrimaryWait after the last role
//     change: a Primary turning Active changes nothing this node's roles
//     see. On the Primary
//     itself the lease (or the seq check) stands in for it.
//   - Lease TimeToLive and Leases are linearizable reads too: the lease
//     set is replicated state, and each lease's deadline counts down on
//     this node's clock from the Primary's last checkpoint of it (see
//     engine), so every node tells about the same remaining time.
//   - Watches read the local committed log, so they carry only committed
//     entries on every node.
//   - etcd's MoveLeader and MemberRemove go to the roles (Roles.MoveLeader,
//     Roles.RemoveMember), which act through the Elector from any node;
//     their refusals are status errors the client gets as they are.
//
// It must never apply an entry the Primary has not committed, append to
// the log while this node's Primary role holds it, answer a linearizable
// read before it has applied the confirmed commit point, answer OK to a
// forwarded write it has not applied, or send a write again unless the
// log shows it unwritten or the receiving Primary refuses duplicates.
package replica
