// Package fs is the embedded objstore.Store: a local directory that keeps the
// objstore contract honestly even when several processes open the same
// directory, so a single-machine Netsy cluster (or a test of one) gets real
// create-only and compare-and-swap semantics without an object server.
//
// Layout under the root directory:
//
//	FORMAT                       marker naming the layout version
//	objects/<seg>.dir/…/<last>.obj  one file per object
//	locks/<nn>.lock              flock files, one per key stripe
//	locks/sweep.lock             flock file keeping Open's sweep of tmp/ off new temp files
//	tmp/                         bodies being written
//
// Every key segment gets a suffix — ".dir" for a directory, ".obj" for an
// object — so the key "a" and the keys under "a/" can coexist (S3 allows both)
// and no key can name a lock or temp file or climb out of the root. An object
// file is a 24-byte header (magic, MD5 of the body) followed by the body; the
// ETag is that MD5 in hex, as MinIO's is, and Get verifies it so a corrupted
// file is reported, never served. ObjectBody does the same for an object
// file a tool reads straight from disk (`netsyctl inspect PATH`).
//
// Writes to a key are serialized across goroutines by a per-stripe semaphore
// and across processes by flock on the stripe's lock file (keys hash into 256
// stripes, so the lock files never grow with the number of keys). Under the
// lock a write checks the precondition, writes a temp file, fsyncs it,
// renames it over the object and fsyncs the directory (and, the first time
// a Store writes under a directory, fsyncs each directory on the way into
// its parent, whoever made it), so a reader — which takes no lock — sees
// the old or the new body, never a mix, and an acknowledged write survives
// a power loss. A reader may see a new body a moment before it is
// acknowledged, while the directory's fsync runs; a power loss then can
// still take it back, as it can any write not yet acknowledged. The
// FORMAT marker is durable before anything else under the root is made,
// and a marker cut short is finished by the next Open (no Open can have
// returned before it was whole). Delete takes the same lock so it
// cannot slip between a CAS's check and its rename. A streamed create
// (PutIfAbsentFrom) writes and fsyncs its temp file before taking the lock,
// which then covers only the check and the rename, so a large body never
// holds up other keys of its stripe; a body that fails part-way leaves only
// a temp file, removed at once. GetReader checks the MD5 as the body
// streams and fails the read that reaches the end of a damaged file.
//
// List walks the tree depth-first, visiting each directory's entries in the
// byte order of the keys they hold ("x.dir" sorts as "x/"), and prunes
// subtrees that cannot match the prefix or lie entirely before startAfter;
// it reads only each object's header.
//
// Known limits: flock must work on the filesystem (local disks do; some
// network filesystems do not); empty directories are left behind after
// deletes because removing them would race with concurrent creates. A crash
// mid-write leaves an orphan in tmp/, never read and removed by the next
// Open: a writer holds its temp file flock'd until it is installed, so a
// temp file whose lock is free belongs to nobody. (A writer holds
// locks/sweep.lock shared from creating its temp file until it has locked
// it, and the sweep holds it exclusively; without it a sweep could take a
// file created a moment before for an orphan and fail that write.)
//
// The store does all its file work through a vfs.FS: Open uses the real
// disk, OpenFS any other (a test's crashfs, which keeps only what was
// fsync'd). flock exists only on the real disk, so on any other file
// system the Stores of one process open on the same file system and root
// share an in-memory table in its place: the same stripe locks, and a set
// of the temp files live writers hold for the sweep to leave alone. No
// other process can see that table, so such a root must never be shared
// between processes.
//
// This package must never be used to share one directory between machines,
// and never write an object file in place.
package fs
