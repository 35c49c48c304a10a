// Package peer is how the nodes of one cluster reach each other's peer
// port: the network they listen and dial on, a pool of client connections
// keyed by peer address, and the gRPC server options the peer port needs.
// Every role (Elector, Primary, Replica, heartbeats) shares it; none of them
// opens a connection of its own.
//
// # What it owns
//
//   - Network, the seam between the peer port and the wire. TCP is the real
//     one; internal/peer/memnet is an in-process one with faults, so a whole
//     cluster runs in one test process.
//   - Pool: one *grpc.ClientConn per peer address, built over a Network
//     with connect and keepalive settings for a cluster on one LAN: a
//     refused or broken connection is retried after 20 ms, backing off to
//     at most 1 s; a connect attempt gets at least 1 s; an idle connection
//     is pinged every 10 s and given up 5 s after an unanswered ping, so a
//     peer that vanished without closing its sockets is noticed in 15 s.
//     Flow-control windows are fixed (4 MiB a stream, 16 MiB a
//     connection, on both ends), which turns off gRPC's bandwidth-delay
//     pings: they answered nearly every message with a PING and its ack.
//     A ClientConn reconnects on its own, so a peer that restarts or a
//     partition that heals needs nothing from the caller; Forget is for
//     peers that left the cluster.
//   - NewServer and Serve: the peer port's server options (messages up to
//     MaxMessageBytes, enough for an entry batch or a snapshot chunk;
//     client pings allowed every 5 s; no practical stream limit) and a
//     Serving that owns the goroutine running the server.
//   - Refused: the one place an error is classified as "the address
//     refused the connection". A refusal means nothing listens there, so
//     the process is known to be gone; every other failure (timeout, reset,
//     no answer) says nothing about whether the peer is alive. gRPC does
//     not keep the dial error in the chain: a fail-fast RPC on a channel
//     whose last connect attempt was refused fails with Unavailable and the
//     dial error's text in its message, so Refused matches that text.
//
// # What it must never do
//
//   - Know about roles: it carries gRPC, whatever the services.
//   - Retry an RPC on its own, or decide anything from an error beyond
//     classifying it. Whether to retry, wait or fail over is the caller's
//     decision; connection-level reconnects are gRPC's.
//   - Hold state about a peer other than its connection.
package peer
