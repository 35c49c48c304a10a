// Package clustersim holds the deterministic protocol tests of Netsy's
// two-tier election: every node of a cluster runs in one test process, on
// its own simulated clock, over one in-memory bucket and an in-memory
// transport, while a seeded schedule injects partitions, crashes and
// stalls. It has no code outside its tests; nothing may import it.
//
// # What runs, and what is modelled
//
// Each simulated node runs what internal/node runs, for real: a process
// registers nodes/{id}.json, opens objwal (on the node's way to the
// bucket, in a data directory that survives its crashes) and the engine,
// and starts internal/roles, which runs the tier-1 election (s3lect), the
// Elector for every lock term it holds, heartbeats, the view, the Primary
// life cycle and following. Its peer port serves the netsy peer services
// and the etcd API for forwarded requests over real gRPC on memnet, and a
// client API backend (replica.Backend) forwards writes to the Primary and
// asks it for read indexes there. Follow streams, forwarded writes and
// read indexes ride memnet; the Elector and Node services (what roles asks
// through its Transport) ride the world's links instead, as messages with
// latency that call the destination's Roles.ElectorServer and
// Roles.LocalNode, requests and answers copied and errors carried as gRPC
// statuses. The roles tell the recorder what they do through
// roles.Config.Observer.
//
// What is modelled: the network's latency applies to the Elector and Node
// calls only (memnet carries the data path at once); a cut link holds
// messages until it heals, as TCP retransmits, and memnet mirrors the
// world's cuts and stalls (both directions cut: a partition; one way, or a
// side stalled: traffic held); a stalled process holds its timers and the
// calls to it, while goroutines already running go on (memnet holds its
// streams). The client is a few puts and linearizable gets through random
// nodes. What node.Start does besides (the registration check and
// takeover, TLS, the client and HTTP listeners) does not run.
//
// # Time and determinism
//
// "True" time is the simulation's; every node reads it through its own
// clock, with an offset of up to a day and a rate between 0.8 and 1.25 of
// true time (no clock more than 25% faster than another). Timers of every
// clock, message deliveries and store calls are events in one queue,
// ordered by true time. The driver takes one event at a time and runs it,
// then waits (testing/synctest.Wait) until every goroutine of every node is
// blocked again before it takes the next: the code under test keeps its own
// goroutines, and still nothing runs concurrently with anything that a
// later event could observe. Nothing sleeps; a run of minutes of true time
// takes milliseconds.
//
// True time is the synctest bubble's: the driver sleeps (in the bubble, no
// real wait) until the next event is due, so the timers of code that reads
// the bubble's clock rather than a node's (gRPC's backoff and keepalive)
// fire in order with the queue.
//
// The default run takes 150 seeds (40 under -race or -short), about 20
// seconds; -clustersim.seeds=N runs more for a soak, -clustersim.seed=S
// one seed with its trace.
//
// A seed fixes the cluster (size, quorum rule, clocks, link latencies) and
// the whole fault schedule. Goroutines that one event wakes together (an
// Elector's parallel pushes) still race each other, and Go's select picks
// among ready cases at random, so a rerun of a failing seed replays the
// same scenario but not always the same interleaving: rerun it a few times
// with -clustersim.seed and -clustersim.trace.
//
// Besides the seeded runs, named scenarios (scenario_test.go) script one
// fault each on fixed clocks and assert what must follow: an Elector or a
// Primary crash, a stalled Primary's lease waited out, the
// previous-Primary handshake, the contact rules blocking and unblocking,
// the deregistration timeout, and a stale Elector's push rejected; one
// more settles a cluster and writes through a replica. The eight
// failures each have one (issue_test.go, TestIssueScenarioN_...): a stale
// minority after automatic deregistration, a paused Primary rejoining, a
// new Elector before its load, wall-clock steps, a refused connection, a
// graceful leave, deferred election rounds, and a restart under the same
// id (the takeover of a registration with changed addresses is
// node.Start's, not run here: internal/node and internal/discovery test
// it). -clustersim.trace prints a scenario's trace even when it passes.
//
// # Faults
//
// A link between two nodes can be cut in either direction, slowed, or
// made to drop messages; a node can be cut from the bucket (its calls fail
// after a while, or never answer); a process can crash (its address
// refuses connections until it restarts; its calls fail at once, and its
// components close on their own goroutine while the world goes on); its
// address can refuse while the process lives; it can stall as under
// SIGSTOP (timers and deliveries for it wait until it resumes; on resume
// its overdue timers run before the messages that waited for it); and its
// wall clock can be stepped by up to ±30 s (durations keep to its rate).
//
// # Invariants checked on every run
//
//   - Never two Electors acting at once, by true time, a stalled process
//     not counting as acting; a later Elector always has a higher term.
//   - Never two nodes that are Active Primary with a valid lease (by their
//     own clocks) at the same true instant.
//   - A primary term is taken up by one node only, and no term exceeds
//     members.json's. A node may still go Starting at a term below one
//     taken up before (a push that waited out its stall), but it never
//     holds a lease at a term below the highest taken up.
//   - No view accepts a Cluster State from an Elector term below one it
//     accepted before (a stale Elector's push is rejected).
//   - No acknowledged write is missing from the final Primary's history
//     (its value at the revision it was acknowledged at), and no
//     linearizable read returned a revision of its key older than a write
//     acknowledged before the read began; and no put (each writes a value
//     of its own) is in that history twice.
//   - Once every fault heals, within a bound: one Elector, one Active
//     Primary with a lease on another node (a node holding both resigns
//     the lock, and the next Elector hears from every node afresh), every
//     node registered, Healthy by its own and the Elector's judgement,
//     agreeing on the Primary and ready to serve (a replica follows it);
//     nothing of that changes for a while afterwards; and a write
//     succeeds.
package clustersim
