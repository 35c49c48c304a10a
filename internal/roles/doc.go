// Package roles wires one node's cluster roles together and owns the truth
// they share: the Elector lock (s3lect), the Elector this node runs for each
// lock term it holds, heartbeats, the view of the Cluster State, the Primary
// life cycle (primary.Primary and its FollowService) and following
// (replica.Follower).
//
// One goroutine, the owner loop, holds the role state no single role owns:
// whether this node is registered and its member id, its own health
// judgement, whether it is leaving, whether its last Follow stream was
// refused, the running Elector, the fence it lost as Primary (its
// deposition) and its event log. The rules over that state live in core
// (core.go), which knows no clock, store or goroutine: it takes events and
// returns effects, and the loop carries them out. Other goroutines post
// messages to the loop, or read the immutable snapshot it publishes after
// each one; nothing else writes role state.
//
// Everything it says to the Elector or to another node goes through one
// seam, Transport (transport.go): asked for the Elector or a node, the
// package answers with its own running Elector or itself when the address
// is its own, and with the Transport otherwise, so no call site decides
// local-or-remote. Errors that cross the wire are told apart by gRPC code
// and peer.Reason, never by their text. The gRPC Transport runs over a
// Conn function; a simulation (internal/clustersim) hands in its own
// Transport, which calls the destination's ElectorServer and LocalNode,
// what the peer port serves, and watches the roles through
// Config.Observer.
//
// Rules it enforces:
//   - A heartbeat answer renews the Primary's lease only when it names this
//     node Primary at the term it holds.
//   - The Elector stays off the Primary: a node that is both while another
//     node is Healthy resigns the Elector lock.
//   - An Elector that has not loaded its map (peer.ReasonNotLoaded) is no
//     Elector yet: heartbeats and registration retry on the next beat (at
//     once when it is this node's own Elector that finished loading), the
//     node does not degrade itself for it, and nothing it says reaches the
//     view. A node beats at once when the lock comes to name another node
//     as the Elector (its first beat usually goes out before the lock's
//     first read), not a heartbeat interval later.
//   - Leaving follows the seed: a Primary hands off or drains, the node is
//     Degraded in every heartbeat and receipt from then on (never Healthy
//     again in this process), and it deregisters with the Elector,
//     retrying a NOT_DURABLE refusal every heartbeat interval while the
//     leave's time lasts. It deletes nodes/{id}.json only after an Elector
//     let it go (or does not know it): otherwise the file stays, and the
//     node registered and counted, until the Elector deregisters it once
//     the bucket holds what it may have acknowledged, or an operator
//     forces it out; a later Elector builds its count from nodes/.
//   - When the Primary role becomes a Replica again, the follower is handed
//     the last Cluster State again: a Starting step's Stop may have paused
//     it after it was told of a newer Primary, and the view hands out no
//     state twice.
//   - Auto-compaction (package compactor) runs only while this node's
//     Primary role is Active: it starts on Active, stops on any other
//     state, and each Active term starts its schedule afresh.
//   - A deposition ends once the Elector names a Primary at a later term:
//     another node, or this one Active again at a later term.
//   - A node whose log failed for good (the engine's Failed: an fsync
//     failure, its data directory lost) reports Degraded in every
//     heartbeat and receipt, so no quorum counts on it and no election
//     picks it; told so (LogLost), an Active Primary drains and becomes a
//     Replica, so the Elector does not defer to a Primary that cannot
//     write.
//   - etcd's cluster RPCs act through the Elector (members.go): MoveLeader
//     is a handoff to the member named, refused (nothing asked of the
//     Elector but its state) for an unknown member or one the Elector
//     judges Degraded, and over only once the new Primary answers it is
//     Active at the new term; MemberRemove deregisters a member without
//     force, and refuses one the Elector judges Healthy (it would register
//     again at its next heartbeat).
//
// It must never open listeners, set up TLS or serve HTTP (internal/node
// does), nor touch the data directory except through what it is handed
// (the engine, the log and the term file's path). No role package imports
// it.
package roles
