// Package s3 is the objstore.Store for AWS S3 and S3-compatible services
// (MinIO, R2, GCS's S3 API), built on aws-sdk-go-v2. PutIfAbsent sends
// If-None-Match: * and PutIfMatch sends If-Match with the quoted ETag; those
// two headers are the whole of Netsy's fencing in object storage, so a
// service that ignores them on PUT cannot be used.
//
// All keys live under an optional prefix inside one bucket; the prefix is
// invisible to callers (List strips it). Endpoint, region, path-style
// addressing and static credentials come from Options; anything left empty
// falls back to the SDK's standard sources (AWS_REGION, AWS_ENDPOINT_URL_S3,
// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, shared config, instance roles).
//
// When the SDK finds no credentials it falls back to the EC2 instance
// role; if that lookup fails too, the error is ErrNoCredentials (wrapped
// with objstore.ErrMisconfigured) naming the variables to set, never the
// metadata service's HTTP status mistaken for the bucket's answer. The
// SDK's own logger is silenced: it prints to stderr outside the node's log.
//
// Service errors become objstore errors in exactly one function, mapErr.
// Two service behaviours are folded there to keep the objstore contract:
// MinIO and S3 answer 404 NoSuchKey (not 412) to If-Match on a missing key,
// which becomes ErrPreconditionFailed; and S3 may answer 409
// ConditionalRequestConflict while racing writes are in flight, which is
// the same loss and also becomes ErrPreconditionFailed. The MinIO behaviours
// this relies on are pinned against a real server in this package's tests.
//
// Request checksums are sent only when the service requires them, because
// several S3-compatible services reject the SDK's default trailing
// checksums; Netsy's data files carry their own CRC. For the same reason of
// per-request cost, the SigV4 payload hash is sent as UNSIGNED-PAYLOAD where
// the channel already protects the body: over HTTPS (the SDK's own choice)
// and to a plain-HTTP loopback endpoint. Plain HTTP to any other host keeps
// the SHA-256 payload hash, the only thing there that stops a body being
// altered in flight (a CRC catches corruption, not tampering). Each request
// also goes without the SDK's User-Agent and invocation-id headers, which
// cost allocations on every call and serve only AWS-side telemetry.
//
// This package must never issue a conditional DELETE (MinIO ignores If-Match
// there) or a multipart upload (its ETag is not the body's MD5 and it cannot
// be made create-only on every service).
package s3
