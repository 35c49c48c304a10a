// Package vfs is the narrow file-system interface the storage floor (wal,
// objwal) does its local file work through, so that a test can put a disk
// under it that loses what was never fsync'd (package crashfs) where the
// real one cannot: SIGKILL keeps the page cache, a power loss does not.
//
// OS is the real file system, a pass-through to package os: File is
// satisfied by *os.File itself, and every error is the one os returns, so
// callers keep matching errors.Is(err, os.ErrNotExist) and os.ErrExist.
//
// The interface holds what its callers need and nothing more; it grows
// when a caller needs a call, not in advance. Durability is spelled out:
// File.Sync makes a file's content and size durable, SyncDir makes a
// directory's entries (creates, renames, removes) durable, and nothing
// else is promised to survive a power loss.
//
// The package imports nothing of Netsy's and never decides anything about
// what is in the files.
package vfs
