// Package wal owns the local write-ahead log: segment files of log entries
// under the data directory, their group-commit fsync, and the local
// snapshots that let old segments be deleted.
//
// Invariants it enforces:
//   - Indices are dense across all segments; a segment is named after its
//     first index, and a hole between segments is an error, never skipped.
//   - An entry is reported through OnSync only after the bytes holding it
//     have been fsync'd, and so has every entry before it.
//   - After a failed write or fsync the WAL refuses everything: the kernel
//     may have dropped dirty pages, so retrying could report as durable data
//     that is gone.
//   - Only the torn end of the newest segment is ever truncated on Open's
//     own judgement, and only when nothing valid follows the damage (see
//     package datafile). Any other damage stops Open with a *DamageError
//     naming the file, the offset and the last intact entry: what follows
//     it may have been reported durable. Only a caller that can fetch it
//     from elsewhere asks for the cut instead (Options.CutDamage), and an
//     operator runs the same cut with Repair. A cut removes everything from
//     the first bad record on, in that segment and every newer one, newer
//     segments first so that a crash half-way leaves the damage newest, and
//     it says what it dropped, as far as the records after the damage can
//     still be read.
//   - Segments are preallocated, so an fsync after an append never grows
//     the file: a new segment is the spare (spare.seg.tmp: a header, then
//     zeros up to SegmentBytes, fsync'd) renamed into place. The unsealed
//     newest segment therefore ends in zeros, its clean end by the rule in
//     package datafile; Open cuts a torn tail off and writes zeros back, and
//     sealing cuts the zeros off so that a sealed segment ends with its
//     footer. Local snapshots are not preallocated.
//
// Every file operation goes through Options.FS (package vfs), so a test can
// run the log on a disk that loses what was not fsync'd.
//
//   - SaveSnapshot makes the snapshot durable before it seals the log, so
//     a power loss in between can leave a local snapshot newer than the
//     log's last durable entry. Open accepts that (the snapshot covers the
//     missing entries); the log then restarts after the snapshot once the
//     caller saves it again (objwal does so when it redoes an interrupted
//     restore), since Append needs the index after the last entry held.
//
// It never decides what is in an entry, never talks to object storage, and
// never deletes a segment a snapshot does not cover. Two goroutines, started
// by Open and stopped by Close, do all file writes: the writer writes
// segments, and the spare goroutine writes the zeros of the next spare so
// that they never sit on the write path.
package wal
