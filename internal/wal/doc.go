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
//   - Only the torn end of the newest segment is ever truncated, and only
//     when nothing valid follows the damage (see package datafile). Any other
//     damage stops Open with an error naming the file.
//
// It never decides what is in an entry, never talks to object storage, and
// never deletes a segment a snapshot does not cover. One goroutine, started
// by Open and stopped by Close, does all segment writes.
package wal
