// Package objstore defines the boundary to Netsy's permanent store: a bucket
// of immutable-per-write objects addressed by key, with conditional writes as
// first-class calls. The backends live in sibling packages: mem (unit tests),
// fs (the embedded default, a local directory) and s3 (AWS S3, MinIO and
// other S3-compatible services); open builds one from a --storage URL,
// storetest is the conformance suite every backend passes, and faulty wraps
// any Store to fail or delay chosen calls in other packages' tests.
//
// The contract every backend keeps, pinned by storetest:
//
//   - PutIfAbsent is If-None-Match: * and PutIfMatch is If-Match: etag. They
//     are the only way to write, so every write is conditional and exactly
//     one of N racing writers from the same precondition wins; the losers get
//     ErrPreconditionFailed.
//   - PutIfMatch on a key that does not exist fails with
//     ErrPreconditionFailed, never ErrNotFound. MinIO and S3 answer 404 there;
//     the s3 backend folds it into the precondition error so a CAS caller has
//     exactly one "you lost, reload" error to handle, and a deleted key cannot
//     be mistaken for a transient failure worth retrying blindly.
//   - Delete is unconditional and deleting a missing key succeeds. There is
//     no conditional delete because MinIO ignores If-Match on DELETE; a
//     protocol that needs to give something up writes a "released" marker
//     with PutIfMatch instead.
//   - An ETag is opaque, without surrounding quotes, and equals for the same
//     object in Get, List and the Put that wrote it. It is the MD5 of the body
//     on every backend (as MinIO and single-part S3 uploads do), so two writes
//     of the same bytes share an ETag: callers that CAS must make every body
//     unique (a term, counter or node id inside it), or an A→B→A sequence
//     would let a stale If-Match succeed.
//   - List returns keys in byte-wise lexicographic order, strictly after
//     startAfter, restricted to prefix, at most limit entries (limit <= 0:
//     all). Keys are flat strings; '/' has no special meaning to List.
//   - Keys are validated identically everywhere (ValidateKey) so a key that
//     works in unit tests against mem also works against MinIO and on disk.
//   - No key may be a '/'-prefix of another ("a" next to "a/b"). MinIO
//     accepts both writes and serves both with Get, but its List silently
//     omits every key under "a/" while "a" exists. ValidateKey cannot see
//     other keys, so this is a rule for layouts, not a runtime check on the
//     real backends; mem refuses such a write with ErrInvalidKey so a layout
//     that would lose objects on MinIO fails in unit tests first.
//
// An error from a write — including ErrPreconditionFailed — does not prove the
// write did not happen: a response lost in the network and retried by the
// SDK reads as a precondition failure although the first attempt landed. A
// caller that must know reads the object back and compares the body with the
// unique body it wrote.
//
//   - GetReader and PutIfAbsentFrom are Get and PutIfAbsent with the body
//     streamed, for objects (snapshots) too large to hold in memory. They
//     keep the same contract: a streamed create that fails, however far it
//     got through the body, leaves no object, and a streamed read reports
//     damage or a broken transfer as an error, never as a short body.
//
// This package must never import a backend, talk to object storage, or hold
// state; it is the vocabulary the rest of Netsy and the backends share.
package objstore
