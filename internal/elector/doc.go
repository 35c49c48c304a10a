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
//  2. Until members.json and the nodes/ registrations are loaded it has no
//     authority: it answers no Cluster State to anyone (Heartbeat,
//     GetClusterState and RegisterNode fail with ErrNotLoaded, a retryable
//     Unavailable; a registration is recorded all the same), pushes
//     nothing and elects nothing. On taking over it first asks every
//     registered node for its state (each question bounded by one
//     heartbeat interval, as a round's are: a node that does not answer
//     in time is unknown, as one that refuses is) and adopts a Primary
//     that says it is Active.
//  3. A node is Degraded once two heartbeats in a row are missing (or it
//     says so itself, or, for the Primary, once it is 1.5 heartbeats late
//     and does not answer a probe), Healthy again on its next heartbeat.
//     Degraded is detection only: it ends no wait of rule 5. A node
//     Degraded for longer than the deregistration timeout (0: never) is
//     deregistered (removed from the map, its nodes/ file deleted; its
//     member id stays) only once object storage holds every entry it may
//     have acknowledged or receipted (rule 3a). Until then it stays
//     counted, so the contact rule waits for it (a previous Primary that
//     does not answer excepted: its lease is waited out instead, rule
//     4b): otherwise a stale minority could be elected after the Primary
//     and its up-to-date replicas died with entries the bucket lacks. Under quorum 0 the rule
//     holds by construction (no entry is acknowledged before the bucket
//     has it), so nothing is waited for. Why a node waits is logged and
//     emitted once per reason and shown in its
//     NodeStatus.deregistration_wait. The same rule holds for an
//     operator's Deregister of a node that does not answer, unless forced
//     (the answer's last_index is the target below, and the answer says
//     what may be lost). A live node (heard from within the degradation
//     window, or answering as itself) leaves once the tip is at or above
//     its latest report (a leaving node reports Degraded, so its Primary
//     writes synchronously from then on): a write it receipted may be held
//     by it and the Primary alone, and with it gone the count no longer
//     covers it. Until then, and for a node that does not answer, the
//     refusal is FailedPrecondition with ReasonNotDurable. The Primary
//     (current, or previous while a round replaces it) leaves only once it
//     answers as itself that it no longer acts as one: its heartbeats may
//     reach the Elector, renewing its lease, while the Elector cannot
//     reach it. Forced, it stays the previous Primary of the next round,
//     whose handshake and lease wait (rules 4a and 5) still apply. An
//     unknown node is NotFound (ReasonUnknownNode).
//     a. A node's last report is no bound on what it holds: a replica
//     fsyncs and receipts entries after its last heartbeat to the Elector,
//     and a Primary acknowledges entries for up to its lease window after
//     its last one. What bounds it is this: everything a silent node N
//     could have acknowledged or receipted was appended, before N went
//     silent, by the Primary N followed or by N itself as Primary; and the
//     Primary the Elector names, if it is not N, is that Primary or was
//     elected with N still counted, so it holds all of it. So the Elector
//     records, per Degraded node, the mark: the highest log index (latest
//     or committed) in the second heartbeat in a row it receives, after it
//     marked N Degraded, from the Active Primary at the current term whose
//     replication status does not count N's receipts toward its quorum,
//     if that Primary is not N (and, if N last said it was a Primary, is
//     at a higher term). N silent here may still follow the Primary and
//     receipt (cut from the Elector only): while the Primary counts its
//     receipts it may acknowledge entries past any index with them, so a
//     report that counts N voids the mark. Once the Primary does not count
//     N, no later acknowledgement rests on N's receipts, and every earlier
//     one is at or below the Primary's committed index (the second report
//     in a row is taken because a report reads its committed index and
//     its replication status a moment apart). The mark is frozen (a busy
//     Primary's later growth would otherwise keep N counted forever) and
//     starts over if N is Degraded again. N leaves only once the bucket's durable tip
//     (Config.DurableTip, read off the loop at most every
//     DurableTipInterval, and only while a node waits on it) is at or
//     above max(N's last reported index, latest or committed, and its
//     mark). A node with no mark stays counted whatever the tip: a dead
//     Primary (or one that last said it was) until a successor, elected
//     under the contact rule with it still registered (counted in N), is
//     Active and reports;
//     a dead replica until the Primary reports. A node this Elector never
//     heard from (down when it took over) is bounded by its mark alone:
//     what it may have receipted was appended by the Primary it followed,
//     which the marking Primary is or was elected with it counted (one
//     that is or was the Primary still waits for a successor's report);
//     otherwise it would stay counted for good, and under a static quorum
//     no election could succeed once the Primary died. An unknown tip
//     proves nothing and also waits. Loss of the
//     Primary and every replica that receipted its last entries therefore
//     stops the cluster until one of them returns or an operator forces
//     them out, stating what may be lost.
//  4. An election starts when there is no Primary, when the Primary is
//     Degraded or says it is no longer Active, or for a handoff. A round
//     that fails is retried RetryInterval (500 ms) after it ended, not
//     sooner; a round that must wait for a lease (rule 5) is followed by
//     the next at the instant the wait ends.
//     a. The previous Primary is asked first. Active, Starting or Draining
//     defers the election; a Replica (restarted or drained) lets it go
//     on. If it cannot be reached, however the call fails, the election
//     waits out its lease (rule 5); one last seen Draining is also given
//     the handshake timeout since the Elector last heard from it. A
//     heartbeat of its saying it is a Replica during that wait starts
//     the next round at once (it restarted quicker than its lease).
//     b. Nodes are asked for their state: none under quorum 0, every
//     registered node under a static quorum, a majority of them under
//     majority quorum; too few answers fail the round. A previous Primary
//     that did not answer in step a is not counted (its lease was waited
//     out instead), or a dead Primary would stop the cluster for good: it
//     stays registered until a successor reports (rule 3a). Then a static
//     quorum needs every other node, and majority quorum N - floor(N/2)
//     of the N-1 others: an entry acknowledged under majority quorum is
//     on the Primary and floor(N/2) replicas, so at most N-1-floor(N/2)
//     of the others lack it. A previous Primary that answered as a
//     Replica counts as one answer among all N.
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
//     A round that defers, waits or fails changes nothing: the Cluster
//     State keeps its version and keeps naming the previous Primary, and
//     nothing is pushed (its replicas keep following it).
//  5. The Primary's lease. A Primary renews its lease only from a
//     heartbeat answer that names it Primary at its term (SPEC §5.4). The
//     Elector records when it last gave such an answer; for a Primary it
//     has not answered, when it took over (the Elector before it may have
//     answered until then). A successor is elected only once the lease
//     wait, 1.25 lease windows, has passed since that instant on the
//     Elector's clock, unless the previous Primary itself answers that it
//     is a Replica (it gave the lease up; a restarted process is always a
//     Replica). An Elector that does not know who took up the highest term
//     handed out (no node named that term's Primary when it loaded) waits
//     from its start, unless the round hears, from the node itself, that
//     its data directory took up that term (Heartbeat.took_primary_term,
//     its term file) and that it is a Replica: that node's earlier process
//     (or itself, before it stepped down) held the term and no longer acts
//     at it, since the term file is written before a term is acted on, read
//     before the state, and a term is never taken up twice. A remembered
//     report, another node's answer or a term file older than the term
//     keeps the wait. A refused connection ends nothing early: a live Primary
//     behind a REJECT rule, a network policy or a restarted listener
//     refuses too. While a round runs, the previous Primary's own
//     heartbeats are refused (ErrElectingSuccessor): the round checked its
//     lease when it started and hands out the successor's term when it
//     ends, so an answer naming it in between would renew the lease past
//     the check. Every other node's answer still names it.
//
// The elector must never elect while the previous Primary may still hold
// its lease, write members.json without a precondition, push a state with
// a term it did not take from members.json, answer a Cluster State before
// it has loaded, or act after its lock is lost.
//
// # Failover time
//
// The lease wait is 1.25 lease windows because the Primary counts its
// lease on its clock and the Elector on its own: a Primary whose clock
// runs 25% slower than the Elector's has given its lease up first. The
// margin is not smaller on purpose: CLOCK_MONOTONIC is slewed by time
// daemons (chrony's default maximum slew rate is 83,333 ppm, so two nodes'
// monotonic clocks may differ in rate by about 17% while one corrects a
// large offset), and the simulation (internal/clustersim) runs clocks up
// to 25% apart.
//
// The lease window is the node's to choose (Config.LeaseWindow; the
// Primary must be given the same one). A node (internal/roles) uses one
// and a half heartbeat intervals, 750 ms by default, and its Primary
// heartbeats every half interval while Active, so the lease lapses only
// when three answers in a row are missing. The lease wait is then
// 937.5 ms. When the Primary's process dies the last answer is U old, U
// in [0, 250 ms); its address refuses, so it is detected by the probe
// (sooner when the replicas report their streams refused); a round finds
// the lease not yet out, and the next one starts exactly 937.5 ms after
// the last answer: from the kill that is 0.69 to 0.94 s. (A silent
// Primary is Degraded after 2 missed heartbeats and the round's handshake
// with it takes one more heartbeat interval to time out.) The round (one
// state request per node, one members.json write), the push and the new
// Primary's Starting (reconcile, claim the next wal seq) come on top, some
// tens of milliseconds against MinIO. Answering the Primary more often
// shortens nothing by itself (the last answer is then younger when it
// dies); it is what lets the lease be shorter without lapsing more often.
package elector
