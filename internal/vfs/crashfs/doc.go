// Package crashfs is an in-memory vfs.FS that models a disk behind a
// volatile cache, for tests that must show what survives a power loss. It
// follows POSIX fsync semantics strictly, and no further:
//
//   - Every file has its current content (what reads see), its durable
//     content (as of its last File.Sync) and the writes and truncates made
//     since, in order. File.Sync makes the content and the size durable,
//     not the file's name.
//   - A directory's entries (files created, renamed, removed) become
//     durable only when SyncDir is called on that directory (or Sync on the
//     directory opened with Open). A rename between two directories needs
//     both synced. Directories themselves are durable at once: MkdirAll, and
//     Remove of an empty directory, survive any crash. Directories cannot be
//     renamed.
//   - Cut pulls the power cord: from that instant every call on the FS and
//     on every File opened from it fails with an error wrapping
//     ErrPowerLost, and nothing changes any more. CutAfter does the same
//     after a given number of further calls that change the disk, so a
//     test can land the cut between any two of them.
//   - Crash returns a new FS holding what a reboot would find: the durable
//     directory entries, and for each file its durable content plus a
//     prefix of its later writes and truncates, in order, the last one
//     possibly cut short (a torn write), each file chosen independently by
//     the random source. With a nil source it keeps exactly the durable
//     state. Open Files of the old FS are not carried over.
//
// The real disk is kinder in ways tests must not rely on (ext4 commits a
// new name with the next fsync of the file; a rename is journaled whole)
// and harsher in one way this model leaves out: the kernel may write back
// dirty pages of one file out of order, so a crash can keep a later
// unsynced write and lose an earlier one. Writes here survive only as a
// prefix.
//
// Content is stored in 4 KiB pages that are never modified once stored,
// shared copy-on-write between the current and durable content and across
// Crash, and a page of zeros is not stored at all: a preallocated 64 MiB
// segment of zeros costs a table of 16384 nil pointers per copy, and a
// write of zeros is logged without its bytes.
//
// A file's modification time is the FS clock's time (New: the real clock)
// of its creation or of its last write or truncate; after Crash, of the
// last one that survived. A directory's is the zero time.
//
// All calls are safe for concurrent use: one mutex serializes them.
package crashfs
