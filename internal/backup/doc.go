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
// It holds the data directory's LOCK while it works, so a netsy started
// on the same directory meanwhile refuses to start. It never reads etcd's
// database format and never deletes anything it did not create.
package backup
