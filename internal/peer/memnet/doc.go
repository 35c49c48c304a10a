// Package memnet is an in-process network for tests that run a whole
// cluster in one process. Each node sees the network through Host(name),
// so the network knows who dials whom and can cut chosen pairs of nodes.
// Addresses are any non-empty strings ("n1:2380"); an address belongs to
// the host that last listened on it.
//
// # Faults, and what they look like from a node
//
// Faults are set by host name (Down by address) and hold until undone.
// Each models one real failure and produces the error that failure
// produces, so code under test can tell "refused" (the process is known to
// be gone) from "no answer" (nothing is known):
//
//   - Partition(a, b), until Heal(a, b): both directions. Connections
//     between a and b are closed; a new dial between them gets no answer
//     and blocks until its ctx ends, failing with the ctx error in a
//     *net.OpError. A dial still blocked when the fault is undone goes on
//     and connects.
//   - Isolate(a), until Rejoin(a): a partition from every other host.
//   - Down(addr): the process listening on addr is gone. Its listener is
//     closed (Accept fails, so the server's Serve returns), the connections
//     it accepted are closed, and dials are refused at once with
//     syscall.ECONNREFUSED in a *net.OpError, as for any address nothing
//     listens on. Listen on addr again is the restart. Down does not stop
//     the node's own code or its outgoing connections: a test that kills a
//     node also closes that node's components.
//   - Stall(a, b), until Unstall(a, b): the peer is frozen (SIGSTOP).
//     Connections stay open but nothing written after Stall returns is
//     delivered between a and b in either direction until Unstall: writes
//     soon block as a full socket buffer would, reads wait (deadlines still
//     work). A new dial between them blocks as in a partition.
//
// A host's traffic with itself is never cut or stalled (Partition, Stall
// and their inverses panic when both names are the same, as Host does on an
// empty name: a test that asks for that has a bug). Partition and
// isolation are checked before the listener, so a dial to a partitioned
// address that is also down times out rather than being refused, as on a
// real network.
//
// # Connections
//
// A connection is two net.Pipe pairs joined by two relay goroutines, one
// per direction; stalling a connection parks its relays, so deadlines and
// Close keep the semantics of net.Pipe. The relays belong to the Net: they
// end when either side closes or a fault closes the connection, and Close
// waits for them. A closed listener is unregistered, and connections dialed
// to it but never accepted are closed.
//
// # Must never
//
//   - Use wall-clock time or sleep: a dial waits for its ctx or for a fault
//     to change, nothing else.
//   - Leak a goroutine past Close, or deliver across a stalled pair a byte
//     written after the stall began.
package memnet
