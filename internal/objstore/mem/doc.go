// Package mem is an in-memory objstore.Store for unit tests of the packages
// above objstore (election, WAL upload, discovery). It keeps the objstore
// contract exactly — MD5 ETags like MinIO, so an A→B→A body sequence repeats
// an ETag here just as it would in production — and takes LastModified from
// an injected clock so tests with a fake clock stay deterministic.
//
// It must never be used for data that has to survive the process, and never
// hand out slices that alias its stored bodies.
package mem
