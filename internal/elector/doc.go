// Package elector is tier 2 of Netsy's election: while this node holds the
// Elector lock (internal/s3lect), it keeps the map of registered nodes,
// judges their health from heartbeats, chooses the Primary by auditing
// node revisions, and pushes Cluster State to every node.
//
// It owns the node map, members.json (through internal/discovery: member
// ids, and the primary term, which it raises with a conditional write
// before it announces a Primary, so no Elector ever reuses one), the
// deregistration of nodes that stayed Degraded, and the event log of role
// changes it makes.
//
// # Rules
//
//  1. An Elector acts only while its lock is held: Run returns, and every
//     call it makes is cancelled, the moment the lock's context ends.
//  2. Until members.json and the nodes/ registrations are loaded it elects
//     nothing. On taking over it first asks every registered node for its
//     state and adopts a Primary that says it is Active.
//  3. A node is Degraded once two heartbeats in a row are missing (or it
//     says so itself), Healthy again on its next heartbeat. A node Degraded
//     for longer than the deregistration timeout (0: never) is deregistered
//     (removed from the map, its nodes/ file deleted; its member id stays)
//     only once object storage holds every entry it may have acknowledged:
//     its last reported index (latest or committed, as this Elector last
//     heard it) is at or below the bucket's durable tip (Config.DurableTip,
//     read off the loop at most every DurableTipInterval, and only while a
//     node waits on it). Until then it stays counted, so the contact rule
//     waits for it: otherwise a stale minority could be elected after the
//     Primary and its up-to-date replicas died with entries the bucket
//     lacks. A node never heard from, or an unknown tip, proves nothing
//     and also waits. Under quorum 0 the rule holds by construction (no
//     entry is acknowledged before the bucket has it), so no tip is read. Why a node waits is logged and emitted once per
//     reason and shown in its NodeStatus.deregistration_wait. The same rule
//     holds for an operator's Deregister of a node that does not answer,
//     unless forced (the answer then says what may be lost); a live node
//     (heard from within the degradation window, or answering as itself)
//     may always leave. An unknown node is NotFound (ReasonUnknownNode).
//  4. An election starts when there is no Primary, when the Primary is
//     Degraded or says it is no longer Active, or for a handoff; it is
//     retried every RetryInterval until it succeeds.
//     a. The previous Primary is asked first. Active, Starting or Draining
//     defers the election; a Replica (restarted or drained) lets it go
//     on. If it cannot be reached, the election waits until both the
//     handshake timeout and the Primary's lease (plus a quarter for
//     clock-rate drift) have passed since the Elector last heard from it
//     (or took over) — unless its address refuses connections: a dead
//     process cannot serve. While a round runs, no heartbeat answer names
//     the previous Primary: an answer after that check would renew its
//     lease past the successor's term.
//     b. Nodes are asked for their state: none under quorum 0, every
//     registered node under a static quorum, a majority of them under
//     majority quorum; too few answers fail the round.
//     c. A single Active node is adopted; more than one fails the round.
//     Any contacted node that is not Degraded and not a Replica fails
//     the round.
//     d. Of the Healthy nodes, the one with the newest log is elected:
//     the term that wrote its last entry, then its log index (then
//     revision, then the newest start time) — or the node a handoff
//     asked for, when it is Healthy. Under a replica quorum (not 0), a
//     contacted Degraded node whose log is newer than the winner's fails
//     the round: replica receipts may have acknowledged entries only it
//     holds, so the election waits for it to recover or be deregistered.
//     e. The primary term is raised in members.json, then Cluster State is
//     pushed to the new Primary first, then to every other node.
//
// The elector must never elect while the previous Primary may still hold
// its lease, write members.json without a precondition, push a state with
// a term it did not take from members.json, or act after its lock is lost.
package elector
