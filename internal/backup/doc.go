// Package backup reads the snapshot files operators save from a node and
// restores one into the data directory and object storage of a new node.
//
// A saved snapshot is a Netsy snapshot data file, either bare (`netsyctl
// snapshot save`) or followed by the zero padding and SHA-256 trailer of
// etcd's Snapshot stream (`etcdctl snapshot save` keeps the stream as it
// came). ReadFile checks the trailer when there is one and every CRC of
// the data file, and recognises a snapshot of etcd's own database (bbolt)
// so it can say that importing one is not supported.
//
// Restore never merges two histories. Before it writes anything it
// refuses a data directory that holds anything and a store (bucket or
// prefix) that already holds wal/ or snapshots/ objects. It then saves the
// snapshot as the local log's only snapshot (package wal) and opens the
// log with objwal, which seeds an empty bucket from a local log that has
// no objwal.json: the snapshot is uploaded with wal_seq 0 and the first
// wal seq is claimed. A node started on the result restores the state at
// the snapshot's revision and index, with its history above the
// compaction floor and its leases (which start a fresh TTL, as after any
// restart); it takes a new identity (cluster and member id) on first
// start, as a restored etcd does.
//
// RestoreAt restores a revision instead of a file: it reads a source
// bucket (never writing it) laid out as package objwal writes it, takes
// the newest snapshot at or below the revision whose following chunks are
// all still there, and replays the chunks up to the revision through
// engine.Open on a read-only Storage, so the apply code is the engine's
// own. The engine runs on a clock that never moves, so leases keep the
// remaining time the log gives them at that revision. Entries logged at
// the revision without a new one (lease grants and checkpoints,
// compactions) are included. The state leaves the engine as one snapshot
// at the revision, is verified by decoding it back, and goes through the
// same seeding as Restore. A revision outside the source's window (its
// oldest usable snapshot, or revision 1 when its log starts at index 1,
// up to its newest entry) is refused before anything is written, with the
// window in the message (ErrOutsideWindow). A time becomes a revision
// before RestoreAt is called.
//
// OpenAt runs the same replay and hands the engine over opened instead of
// seeding anything: it writes nothing to the bucket or to disk (beyond the
// engine's spilled values in a scratch directory the caller names), and
// its engine, a follower on a Storage that refuses appends, never makes a
// write durable. A read-only node (--read-only-at) serves from it.
//
// Crash safety of RestoreAt. Locally, everything is built in
// .<data-dir>.restoring next to the data directory (marked by a RESTORING
// file and locked while in use) and renamed into place as the last step,
// so the data directory appears whole or not at all; a leftover working
// directory is removed by the next run. In the target store, before any
// object is written, RestoreAt creates restore-in-progress.json, and
// deletes it only after the rename. A later run that finds the marker
// deletes what a restore writes there (the seeded snapshot and empty
// claim chunks) and starts over; if the store holds anything else (a
// chunk with entries: a node ran on it), it deletes nothing and names
// every object to delete. A failed run takes back its own objects at
// once when it can. A crash after the rename leaves only the marker,
// which no node reads: the data directory is then complete and a rerun
// refuses it as not empty.
//
// Branches. CreateBranch makes a new, empty store a branch of a parent at
// a revision without copying anything: it plans as RestoreAt does but
// reads only listings and snapshot headers, writes into the parent a pin
// (objwal.Pin at branches/{id}.json, the only object it ever writes
// there) naming the base snapshot and the chunks after it, checks that
// they are all still there (GC may have deleted one between the plan and
// the pin: the pin is then removed and the run fails naming it), and only
// then writes branch.json (the Manifest) into the branch's store. The id
// is derived from the branch's URL, so a rerun finds an earlier run's pin
// and finishes; DeleteBranch removes a pin. StartBranch is what a node
// calls before it opens its log: on a branch store not yet built (and an
// empty wal directory) it replays the parent up to the revision with the
// same replay as RestoreAt, seeds the branch's store and the wal
// directory through Restore (under the same restore-in-progress marker,
// cleaned up by the next start after a crash), and drops the pin: the
// branch then holds its own snapshot and never reads the parent again.
//
// It holds the data directory's LOCK while it works, so a netsy started
// on the same directory meanwhile refuses to start. It never reads etcd's
// database format and never deletes anything it did not create.
package backup
