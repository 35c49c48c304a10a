// Package faultproxy is a TCP proxy for tests that cuts traffic on
// command: one Proxy per upstream (a node's peer port, MinIO), listening on
// a loopback address the test advertises in place of the upstream's, so the
// test decides at run time, with connections open, what the network does
// between the processes.
//
// Modes (SetMode, for every connection; SetSourceMode for the connections
// of one source, told apart by the Classify option):
//
//   - Pass carries bytes both ways.
//   - Drop is a blackhole: connections stay open and new ones are
//     accepted (the kernel completes the handshake), but no byte moves in
//     either direction. Bytes are held, not discarded: when the cut heals
//     they are delivered, as TCP's retransmissions would deliver them.
//   - Reset closes every connection with an RST (on both sides) and
//     accepts new ones only to reset them.
//   - Refuse closes the listener, so dials get ECONNREFUSED as from a
//     REJECT rule or a restarted process; open connections are reset.
//     Leaving Refuse listens again on the same address.
//   - ToUpstream and ToClient are one-way cuts: bytes flow only from the
//     client to the upstream, or only back. A connection opened during a
//     one-way cut (or during Drop) reaches the upstream only once the
//     proxy is back in Pass, because a TCP handshake needs both
//     directions.
//
// A source's mode overrides the proxy's; Refuse cannot close the
// listener for one source only, so for a source it resets (accepts and
// RSTs) instead. On one host every process dials from 127.0.0.1, so the
// address does not say who dialed: OwnerPID and ChildPIDs (Linux, from
// /proc) name a connection by the test's child process that opened it,
// which lets a test cut one node's outbound connections on its peers'
// proxies.
//
// Ownership: the Proxy owns its listener, one accept goroutine per
// listener, and per connection one goroutine that dials the upstream and
// two that copy bytes; Close stops and waits for all of them.
//
// It must never be imported by non-test code, and it never decides what to
// cut: the test does.
package faultproxy
