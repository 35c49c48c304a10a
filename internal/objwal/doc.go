// Package objwal makes object storage Netsy's permanent store. It sits
// between the engine and the local write-ahead log (internal/wal, which it
// opens and owns): every entry is fsync'd locally and uploaded as part of a
// WAL chunk object, snapshots are uploaded next to the chunks, and old
// objects are garbage-collected. A node with an empty disk rebuilds itself
// from the bucket alone.
//
// It owns the wal directory (the segments, local snapshots and objwal.json,
// a checkpoint of how far the local log is known to agree with the bucket)
// and the wal/ and snapshots/ keys of the bucket. Other keys (leader/,
// nodes/, members.json) belong to other roles and are never touched;
// branches/ (pins, written by package backup) is only read, by GC.
//
// # Layout
//
//	wal/{seq:020d}            a datafile chunk (zstd-compressed since issue
//	                          22; older ones are read as they are): a dense
//	                          run of entries, or none (a claim, see below)
//	snapshots/{rev:020d}      a datafile snapshot; its header's wal_seq is
//	                          the last chunk whose entries it wholly covers
//
// Neither key is a '/'-prefix of another, so the layout is valid on every
// backend.
//
// # Fencing
//
// Chunk sequence numbers are dense and every chunk is created with
// PutIfAbsent, so a seq can be written once, by one writer. That is the
// whole fence between two nodes that both think they are the writer:
//
//   - Before Open returns, it brings the local log up to the bucket's and
//     then claims the next seq with a chunk carrying every local entry the
//     bucket lacks (an empty chunk if there are none). Losing that race means
//     another writer is active: Open catches up again and retries.
//   - At run time a chunk whose PutIfAbsent is refused is read back. The same
//     bytes mean an earlier attempt of ours landed and only its answer was
//     lost; anything else means another writer has taken the seq. The log is
//     then fenced: ErrFenced is reported through OnSync, which the engine
//     treats as permanent, so none of the entries in that chunk (or after it)
//     is ever acknowledged by this node.
//   - Transient errors retry the same seq with the same bytes, forever, so a
//     retry can never turn into a second, different chunk at another seq.
//   - The bucket is the truth. Open fetches every entry the bucket holds
//     beyond the local log before anything is served or written, including
//     entries the checkpoint says were fsync'd here but the disk lost (a
//     torn or cut tail). Damage in the local log with valid records after
//     it is cut there only with Options.CutDamage, for a log whose
//     acknowledged entries are all in the bucket or on a quorum of
//     replicas; with AckOnFsync the entries after the damage may exist
//     nowhere else, so the cut is refused and the wal's damage error
//     stops Open. When a chunk contradicts a local entry, the mode
//     decides: in ModeSync the local entry was never acknowledged (only
//     what is in the bucket is), so the local tail is truncated from there
//     with a warning; in ModeAsync it was acknowledged on its fsync, so Open
//     stops with ErrHistoryConflict naming the local segment and the chunk.
//     Entries this node knows it uploaded (recorded in the local metadata
//     file) are never compared again: a bucket that lacks them is a
//     configuration error that stops Open. A local tail the bucket lacks
//     and does not contradict is uploaded by the claim, and logged.
//   - A chunk is uploaded only if its first index follows the last index
//     the bucket holds; anything else fails the log for good rather than
//     fork the history.
//   - Garbage collection never deletes a chunk younger than MinWALAge, so a
//     deposed writer's delayed PUT still collides with the object that fenced
//     it. Young is judged twice, and either keeps the chunk: by the bucket's
//     LastModified against this node's wall clock, and by this node's
//     monotonic clock since it uploaded the chunk (or since Open, for one it
//     did not upload), so a wall clock stepped forward never deletes a chunk
//     early. It never deletes the newest chunk this node wrote, so a restarting
//     node always finds the highest seq by listing and cannot reuse one.
//
// # Writer and follower
//
// A log opened with Options.Follower catches up with the bucket and stops
// there: entries another node wrote are appended to the local log only
// (the Primary uploads them), snapshots are saved locally only, and a
// local tail the bucket does not yet hold is kept for the Primary to
// judge: KnownCommitted stops at the bucket's tip (or a local snapshot),
// so the engine holds that tail unapplied. A follower uploads no chunk,
// so its checkpoint cannot follow its uploads: each time it saves a
// local snapshot it moves the checkpoint up to it, to the newest bucket
// snapshot at or below it (read from its header) and then to the last
// chunk that starts by the snapshot's next index (a binary search that
// reads only a chunk's first record per step and remembers, for the
// chunks after the checkpoint, where each it read starts, so each chunk
// is read about once; the snapshot headers it remembers are dropped once
// GC deleted their snapshots). A restart then keeps what it holds and
// reads only the chunks after the checkpoint's, comparing (and cutting
// where they differ) only the entries past its local snapshot. The
// checkpoint's own chunk need not be there: GC deletes through the
// oldest kept snapshot's wal_seq, often a follower's checkpoint, and
// only when the chunk after it is gone too does a restart fall back to
// the newest bucket snapshot (dropping the local entries after the
// checkpoint). With AckOnFsync (a lone node acknowledging on its fsync)
// the whole local log is known committed.
//
// In quorum mode the Primary acknowledges before it uploads, so a
// follower's snapshot may cover entries the bucket does not hold yet.
// Those are history (never compared with the bucket) but not uploaded:
// the snapshot deletes only the local segments its checkpoint covers
// too (the bucket's lag, a chunk or two, stays until the next snapshot),
// and catch-up tells what the bucket holds (its true end, raised by
// every chunk read) from what needs no comparing. A claim uploads the
// local entries after the bucket's end, those the snapshot covers
// included, so the bucket's history stays dense. A follower whose log no
// longer holds them (written before snapshots kept them, or lost) opens
// and follows, but its claim is refused with ErrSnapshotAheadOfBucket
// before anything is written, until the bucket holds them.
//
// Claim makes it the writer (as Open does without Follower): it
// waits for the local log to be durable, catches up again and claims the
// next seq. Release gives the role up, uploading everything pending first
// when asked to (Draining), forgetting a fence, and cutting local entries
// that neither the bucket nor the caller's committed index holds.
// TruncateAfter cuts what a follower holds beyond its Primary's history,
// never what the bucket or a local snapshot holds. Role changes run on the
// maintenance goroutine, so they never meet a snapshot or a checkpoint
// half-way.
//
// # Durability
//
// In ModeSync an entry is reported durable once it is both fsync'd locally
// and inside an uploaded chunk; the upload and the fsync run in parallel.
// One PUT is in flight at a time and everything appended meanwhile rides in
// the next one (group commit). In ModeAsync an entry is durable once
// fsync'd, and chunks are cut by size or age in the background; the bucket
// may lag the acknowledged state by up to a chunk's age. In ModeQuorum (a
// Primary with replicas) chunks go up as in ModeAsync, and an entry is
// durable once fsync'd locally and either uploaded or reported by the
// caller as replicated (SetReplicated: a quorum of replicas holds it
// fsync'd). ModeSync counts replication too, so switching to it (the
// quorum fallback) only makes the uploads eager: whichever of the upload
// and the receipts comes first acknowledges an entry.
//
// The write path reuses its memory: the uploader takes the pending
// buffer with its batch and hands it back as the next pending buffer once
// the chunk is sealed and uploaded, seals each chunk into one body buffer
// that only it holds, and keeps one zstd encoder for the life of the log.
// No buffer is handed back while a chunk still needs it: one chunk is in
// flight at a time, its PUT and every retry of it return before the next
// batch is taken, and a store keeps no body once a call returns. (Over
// HTTP, Go's transport may go on writing a request body after the server
// answered early, refusing it; bytes of the next chunk sent that way reach
// a request already refused, never a stored object.) Kept
// buffers larger than 1 MiB (the spare and the body) are dropped whenever
// nothing is left to upload, so a burst does not pin its memory.
//
// Snapshots are saved locally and uploaded only once every chunk up to
// their index is in the bucket, and only after the metadata file records
// that the local log agrees with the bucket at least that far, so a local
// snapshot never covers entries a restart could not check against the
// bucket. The upload streams the local file just saved (retries rewind
// it), and a restore decodes a snapshot as it downloads, so the encoded
// form of a snapshot is never held in memory; each such transfer may take
// longer than one ordinary call, in proportion to its size. A restore
// always starts from a snapshot plus the chunks after its wal_seq, and any
// hole, damaged object or out-of-order entry stops Open with an error
// naming the object: a state with a hole is never served.
//
// # Retention
//
// With Options.Retention, garbage collection also keeps the newest
// snapshot whose last entry was committed before the window's start (the
// anchor), every snapshot after it and every chunk after its wal_seq, so
// every revision committed inside the window can be rebuilt; while no
// snapshot of known time precedes the window, it deletes no chunk. The
// window ends at the lower of the wall clock and the wall clock at Open
// moved on by the monotonic clock, so a forward wall step cannot shorten
// it. The young-chunk and newest-chunk rules apply on top. Stats reports
// the oldest restorable point: the oldest kept snapshot, or the first
// entry while the bucket holds the history from index 1.
//
// # Branch pins
//
// A branch of this bucket (package backup) writes branches/{id}.json, a
// Pin naming the snapshot and the run of chunks it still reads. GC reads
// every pin right before it deletes and keeps those objects (it deletes
// no chunk at or above the lowest pinned seq), whatever the retention;
// deleting the pin releases them to the next GC. A pin that does not
// decode stops GC from deleting anything.
//
// # Commit time
//
// The writer stamps each entry it is given with commit_time_ms, its wall
// clock in unix ms but never below the newest stamp the log holds (a new
// writer reads that stamp from its log first), before the entry is framed
// for the local log and the chunk; the engine hands the same entry to the
// replicas afterwards, so they hold the stamp too. A follower keeps the
// stamps it is given. Snapshot headers carry their last entry's stamp.
// RevisionAt, TimeOf and Window read the bucket alone and binary-search
// the chunks (timeline.go).
//
// objwal never evaluates or changes entries (beyond stamping the commit
// time of the ones it writes), never acknowledges an entry
// that a deposed writer could have lost, never deletes an object on the
// write path, and never retries a seq with different bytes.
package objwal
