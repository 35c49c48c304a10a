// Package datafile owns the one on-disk format Netsy uses for log entries and
// snapshots: local WAL segments, object-storage WAL chunks and snapshots are
// all the same framing, so a sealed local segment can be uploaded unchanged
// and `netsyctl inspect` can dump any of them.
//
// Layout (all integers little-endian):
//
//	header  16 bytes: magic "NSDF", version, kind, compression, reserved,
//	        flags uint32, CRC32C of the preceding 12 bytes
//	record  length uint32, CRC32C(payload) uint32, payload
//	footer  52 bytes: marker 0xFFFFFFFF (where a record length would be),
//	        records uint64, first/last index uint64, first/last revision int64,
//	        CRC32C of every byte before this field, magic "FDSN"
//
// A segment is appended and fsync'd record by record long before it gets a
// footer, so each record carries its own checksum: after a crash the valid
// prefix is recovered and the damaged end is reported as a torn tail. A torn
// tail is only ever reported for the end of a file that has no footer and no
// valid record after the damage; anything else is corruption. Chunks and
// snapshots are written whole, so they must be sealed and any damage in them
// is corruption.
//
// The package never touches the filesystem by name and never drops data
// silently: every problem is an error naming the file and the byte offset.
// Compression is reserved in the header (zstd later); until it exists any
// value other than none is rejected rather than guessed at.
package datafile
