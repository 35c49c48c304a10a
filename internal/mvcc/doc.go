// Package mvcc owns the in-memory multi-version key-value state every node
// serves reads and watches from: an ordered index of keys, each key's
// versions since the compaction floor, and the revision log of events.
//
// Invariants the package enforces:
//
//   - One writer, many readers. Revisions only move forward through Put and
//     Delete (one revision per write transaction, its ops numbered by sub)
//     and backward only through Rollback of writes that never became
//     durable.
//
//   - A stored *mvccpb.KeyValue is never modified after it is published:
//     histories, the log, events and range results share the pointers, so
//     values are held once and results need no copying.
//
//   - Reads name their revision. The store does not know which writes are
//     committed; the engine passes its committed revision.
//
//   - Compaction keeps every reachable version: a read at or above the
//     floor, and an event replay from the floor, answer as before it.
//
//   - A value is in memory or, when the store was opened with a spill
//     directory, in the spill files (see spill): never both for long, and
//     every read path (Range, Events, the events Put and Delete return,
//     Capture, HashKV) reads spilled values back. PutKV and DeleteKV, the
//     engine's write path, do not: they return the replaced or deleted
//     version as kept, and the caller reads it back with Resolve only
//     when it answers with it. Capture.At hands out a
//     copy the caller keeps; Capture.View lends the read-ahead block
//     until the next call (a snapshot encode reads a million values
//     without a copy or an allocation each), so a viewed value must never
//     be kept or modified.
//
//   - A restore keeps what it loads and never modifies it; with
//     Load.Consume it clears the caller's slice entry by entry as it
//     goes, and only then (the caller says the slice is its own).
//
//   - Stats.InUse is the one measure of the space the store's data takes
//     (keys, values, and the bookkeeping per version and per key measured
//     on the heap, see space.go): the space quota and etcd's size gauges
//     read it, and compaction is what lowers it.
//
// The store is laid out for the collector, which marks everything it
// holds at every collection (issue 22 item 5: at 1 M keys, marking the
// store cost over a second of CPU per collection before, ~0.12 s after):
// a new key is one allocation (its index with its first version and, if
// spilled, the value's place), the hash index of keys (keyMap) holds no
// pointers, and no map is keyed by version. A change that adds a pointer
// or an object per key should be measured with BenchmarkPutKVGrowth.
// Its size is watched too (the heap's goal, and so the RSS, follows the
// live heap, see internal/gctune): a new key's index is one 160-byte
// object holding the key's only slice header and, packed in two words,
// its spilled value's place, and the key map's table costs ~28 bytes per
// key (281 -> 234 live bytes per key at 1.2 M keys, RSS after a 1 M-key
// load 503 -> 403 MB).
//
// The only I/O the package does is to its spill files, a cache it deletes
// at open and close and never fsyncs. It never reads the clock, never logs
// and never decides durability or commit order: the engine does.
package mvcc
