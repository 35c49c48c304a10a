// Package s3put measures how fast an S3 endpoint takes conditional PUTs
// (If-None-Match: *) from a bare client: PUTs per second, latency
// percentiles and the measuring process's CPU per PUT. netsybench uses it
// for the MinIO baseline of its sync-mode table and cmd/s3putlat for its
// client comparison, so both measure the same way.
//
// A run is clients loops of n PUTs each, every PUT to its own key with a
// body that carries its counter (MinIO's ETag is the body's MD5, so no two
// bodies are equal). The default body size is that of a WAL chunk of ~54
// 256-byte entries.
//
// It owns only the measuring loop and the minio-go PUT; it must never
// start, stop or configure a server, and it is imported only by the
// benchmark commands under bench/, never by netsy itself.
package s3put
