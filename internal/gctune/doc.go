// Package gctune bounds how far the Go heap may grow past the data a node
// holds. Netsy keeps every key and small value on the heap, and the Go runtime's
// default (GOGC=100) lets the heap grow to twice the live data before it
// collects: a node holding 4 GiB would use about 8 GiB, while a node
// holding 10 MiB collects every 10 MiB of garbage, which under write load
// is a measurable share of its CPU. After every collection the tuner sets
// the GC percent so that the next collection comes when the heap has grown
// by a headroom of a third of the live data, and at least 24 MiB: large
// heaps run at about 1.33 times their live data, small ones collect once
// per 24 MiB of garbage. (64 MiB came first; with values spilled to files
// the live heap of 100k keys × 1 KiB is ~40 MB, and a 64 MiB floor made
// headroom the larger part of the process's memory. Measured on 2 cores
// with put-64: 4 collections per 40k puts at 64 MiB, 9–10 at 32, 13–14 at
// 24, 20 at 16; CPU per put moved within the noise (55–65 µs) for all but
// 16; RSS after 100k × 1 KiB was 101–115, 95–102 and 91–95 MB at 32, 24
// and 16.) The price is more frequent collections on large
// heaps, each marking the same live data; values are byte slices without
// pointers, so marking them is cheap. An eighth instead of a quarter was
// measured at 1 M keys × 256 B (one node, 64 clients, after the store was
// laid out with few pointers per key, see internal/mvcc): RSS after the
// load 464 -> 430 MB, but CPU for the load 72 -> 83 s and 237 -> 336
// collections, so the quarter stayed. Once the store took 17% less heap
// per key (internal/mvcc: 281 -> 234 live bytes per key, RSS after the 1 M
// load 478 -> 413 MiB) a third replaced the quarter, giving part of that
// back for CPU: the collector's cost per put is its marking of the live
// data over the garbage allowed between collections, so at 1 M keys,
// where marking is most of the CPU that grows with the keys (a third of
// a loading node's CPU in its last 200k puts against a tenth in its
// first), a larger headroom is what lowers it. Measured with netsybench
// scale-1m (one node, 2 shared cores, back to back): CPU per 1000 puts
// 0.064 -> 0.051 s, RSS after the load 413 -> 444 MiB (etcd's in the
// same runs: 537 and 482); in process at 1.3 M keys with ~6 KB of garbage
// per put, 27 -> 20 collections per 300k puts, collector CPU ~13 -> ~9.6
// µs per put, peak heap 410 -> 446-457 MiB.
//
// It steers GOGC's goal rather than the soft memory limit. A first version
// set the limit to the same figure: with GOGC's goal still on, a small
// node kept collecting every time its heap doubled; with GOGC off, put
// throughput gained only ~2% against ~6–12% for the GC percent (put-64,
// 2 cores), most likely because the runtime returns memory to the OS
// eagerly when the heap runs close to a limit.
//
// A load whose size is known beforehand (a snapshot at restart) holds the
// collector (Hold): the heap may grow to the load's estimated size before
// the next collection, so data growing from nothing is marked about once
// rather than at every third it grows by. A hold ends with Release
// (retune now) or Lapse (at the next collection, when another load takes
// the result over), and a restart ends with Settle, one collection that
// gives back what the decoded input took, run on the Tuner's own
// goroutine (started with it, stopped by Stop) so the restart serves
// meanwhile. Measured on a 1 M key restart (BenchmarkRestart in
// internal/engine): 14–15 collections to 3; a node restarting on a 1 M
// key data directory (2 cores, shared): CPU until the first read 9.3–13.3
// to 7.1–8.0 s, RSS then 586–654 to 493–510 MiB.
//
// An operator who sets GOGC or GOMEMLIMIT has made the choice: the tuner
// then does nothing, and so do Hold and Settle.
//
// It is started by the process (cmd/netsy), never by a library: the GC
// percent is process-wide, and so is the running Tuner that Hold and
// Settle steer; libraries may call them, and without a running Tuner
// (tests, netsyctl) they do nothing. It must never run anything slow
// after a collection.
package gctune
