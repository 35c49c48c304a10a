// Package gctune bounds how far the Go heap may grow past the data a node
// holds. Netsy keeps every key and value on the heap, and the Go runtime's
// default (GOGC=100) lets the heap grow to twice the live data before it
// collects: a node holding 4 GiB would use about 8 GiB. After every
// collection the tuner sets the runtime's soft memory limit to the memory
// the live data needs (its bytes, the fragmentation around them and the
// runtime's own) plus a headroom of a quarter of the live data, and at
// least 64 MiB. Small heaps, whose GOGC headroom is below that minimum,
// are left to GOGC; large ones use about 1.25 times their live data. The
// price is more frequent collections on large heaps, each marking the same
// live data; values are byte slices without pointers, so marking them is
// cheap.
//
// The limit is soft: the runtime collects harder to stay under it but
// never fails an allocation, and the limit follows the live data up as
// the node grows, so it cannot starve a growing node.
//
// An operator who sets GOGC or GOMEMLIMIT has made the choice: the tuner
// then does nothing.
//
// It is started by the process (cmd/netsy), never by a library: the limit
// is process-wide. It must never set a limit below what the live data
// needs, and never run anything slow after a collection.
package gctune
