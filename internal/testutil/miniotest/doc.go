// Package miniotest runs a real, throwaway MinIO server for one test: the
// S3-compatible store Netsy's s3 backend and end-to-end tests are checked
// against, because MinIO's conditional-write quirks (no If-Match on DELETE,
// MD5 ETags, 404 for If-Match on a missing key) are exactly what a fake would
// get wrong.
//
// Binary lookup: $NETSY_MINIO_BIN, else <repo>/.cache/bin/minio (built by
// `bash deploy/minio/minio.sh install`). When it is missing the test is
// skipped, unless NETSY_REQUIRE_MINIO=1 (make test sets it): then Start runs
// the install step itself and fails the test if that does not produce a binary.
//
// The server listens on 127.0.0.1 at a random port in 20000–32000, keeps its
// data in t.TempDir(), and is killed by PID in t.Cleanup — and by the kernel
// if the test binary dies first (Linux parent-death signal), so a timed-out
// test run never leaves a MinIO behind. Stop or Kill and then Restart make an
// outage: the server comes back on the same address with its data.
//
// This package must never be imported by non-test code.
package miniotest
