// Package datafile owns the one on-disk format Netsy uses for log entries and
// snapshots: local WAL segments, object-storage WAL chunks and snapshots are
// all the same framing (chunks and snapshots compressed around it, see
// below), so `netsyctl inspect` can dump any of them.
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
// A local segment is preallocated: created at its full size as real zero
// blocks and written over from the front, so its end is zero padding rather
// than the end of the file. For a segment read as itself (not as a chunk),
// zero bytes that start where a record header would and run to the end of
// the file are the clean end of the log, and so are zero bytes right after
// the footer (sealing cuts the padding off, but a crash can come first).
// Padding belongs to no checksum, and Offset and Info.Size stop where it
// starts. Zeros followed anywhere by a nonzero byte are not padding: the
// damage starts where the zeros do and the torn-tail rule above decides,
// so junk after zeros is a torn tail unless a valid record or a footer
// (zero padding after it ignored) follows. A record can never be all zeros,
// since a length of 0 is invalid. A footer whose magic is still zeros is a
// seal a crash cut short and is judged by the same rule. The rule is the
// conservative one: a power loss during the fsync of a batch spanning
// several sectors can leave a zeroed sector followed by later records of
// that same, never acknowledged, batch, and that is reported as
// corruption, since nothing in the file tells it apart from an
// acknowledged sector that came back zeroed.
//
// The package never touches the filesystem by name and never drops data
// silently: every problem is an error naming the file and the byte offset.
// Salvage finds the records that still verify after damage, so that a cut
// can say what it discards; what it finds is never kept as data.
// EncodeSnapshot frames each key version by hand (kvrecord.go) with exactly
// the bytes proto.Marshal writes, and reads a Source that is a Viewer into
// one reused KeyVersion: a snapshot of a million versions allocates
// nothing per version. The format does not depend on either.
// DecodeSnapshot holds the Go collector while it decodes (gctune.Hold; a
// no-op unless the process runs the tuner), at the size the header's
// count projects: a restart's snapshot is most of its heap, and decoding
// it under the usual headroom marked it a dozen times.
// Compression is named in the header. Snapshots (EncodeSnapshot) and
// chunks (SealCompressed) are written zstd-compressed (see compress.go):
// everything after the header is one zstd stream whose decoded bytes are
// the records and footer of the uncompressed file, with the same checksums,
// and offsets in errors count those decoded bytes. So a sealed segment is
// no longer byte for byte a chunk, though it still decodes as one. Files
// without compression (every older snapshot and chunk, every segment) are
// read as before; a compressed segment, or any other compression value, is
// rejected rather than guessed at. A ChunkSealer (one zstd encoder) is
// kept by its owner and seals chunk after chunk; AppendSeal writes each
// body into a buffer its caller reuses, and takes the file checksum over
// the compressed header in the one pass that checks the records, so a
// chunk costs no allocation and one checksum pass. A body never shares
// memory with the frames it was sealed from.
// A FirstEntryReader reads an entry file's header and first record and
// stops (for a compressed chunk, after its first zstd block): where a
// chunk starts, for a search through chunks, without the rest being
// downloaded, decoded or verified. It keeps one zstd decoder, reset for
// each file.
package datafile
