// Package clustersim holds the deterministic protocol tests of Netsy's
// two-tier election: every node of a cluster runs in one test process, on
// its own simulated clock, over one in-memory bucket and an in-memory
// transport, while a seeded schedule injects partitions, crashes and
// stalls. It has no code outside its tests; nothing may import it.
//
// # What runs, and what is modelled
//
// Each simulated node runs the real tier-1 election (internal/s3lect), the
// real heartbeat sender (internal/heartbeat), the real view of the roles
// (internal/view) and, while it holds the lock, the real Elector
// (internal/elector), wired the way internal/node wires them. The Primary
// life cycle is a small model of internal/primary's rules: a node named
// Primary at a term above every term it took before goes Starting, claims
// the term with a conditional write to the bucket, then becomes Active; it
// steps down when told of a Primary at a higher term; its lease counts
// from the send time of the last heartbeat answered by an Elector whose
// Cluster State names it Primary at the term it holds (becoming Active
// starts none). Its Starting step fails when the bucket holds a claim of
// a higher term, as the engine refuses to promote below its log's term.
// The data path (entries, replication, revisions) is not modelled: every
// node reports the same log position.
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
// The default run takes 500 seeds (100 under -race or -short), a few
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
// the deregistration timeout, and a stale Elector's push rejected.
//
// # Faults
//
// A link between two nodes can be cut in either direction or slowed; a
// node can be cut from the bucket (its calls fail after a while, or never
// answer); a process can crash (its address refuses connections until it
// restarts, with its persisted primary term) or stall as under SIGSTOP
// (timers and deliveries for it wait until it resumes; on resume its
// overdue timers run before the messages that waited for it).
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
//   - Once every fault heals, within a bound: one Elector, one Active
//     Primary with a lease on another node (a node holding both resigns
//     the lock, and the next Elector hears from every node afresh), every
//     node registered, Healthy by its own and the Elector's judgement and
//     agreeing on the Primary; and nothing of that changes for a while
//     afterwards.
package clustersim
