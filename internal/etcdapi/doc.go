// Package etcdapi serves the etcd v3 gRPC API (KV, Watch, Lease,
// Maintenance, Cluster, Auth) on the client port over a Backend.
//
// It owns request validation with etcd's exact error codes and strings, the
// one table that maps Backend errors to etcd's gRPC errors, the identity
// fields of every response header, and the per-stream bookkeeping of watch
// and lease keep-alive streams.
//
// It must never touch storage, evaluate a request against the keyspace, or
// keep state beyond one stream's lifetime (beyond the counters Collectors
// exports): everything durable or shared lives behind Backend.
//
// The space quota and alarms are the engine's, kept as state of the log
// (see package engine): this package only serves Alarm over the Backend,
// maps engine.ErrNoSpace to etcd's "etcdserver: mvcc: database space
// exceeded" (ResourceExhausted), and exports etcd's space gauges from the
// same Status that `etcdctl endpoint status` reads (SpaceCollector).
//
// The client port's HTTP/2 flow-control windows are fixed (ServerOptions):
// a stream's window holds the largest request, and no bandwidth-delay
// PING follows a request, so a client writing one request at a time costs
// one response write per request.
//
// Watch invariants, enforced by one loop per stream that alone calls Send:
//   - Each watcher has a cursor, the first revision it has not been sent. The
//     loop reads Backend.Events from the cursor up to the committed revision
//     it read at the top of the iteration, so history replay and live events
//     are the same code path: no gaps, no duplicates, and a slow client is
//     caught up from history rather than dropped.
//   - Watchers at the same cursor share one Events read (and the engine
//     shares one read between the streams a commit wakes).
//   - After each commit the loop waits on as few channels as can matter
//     (each is locked twice per wake-up): the commit signal, one channel
//     carrying both requests and the receive error (the client leaving
//     shows as that error), the server's stop, and only when needed the
//     hold timer, the progress ticker (while a watcher asked for
//     progress) and the stream's context (once the client half-closed).
//     The events counter moves once per pass, not per response.
//   - Every response built in one iteration carries that iteration's
//     committed revision in its header, so header revisions on a stream never
//     go backwards and are always >= the revisions of the events they carry.
//   - Pacing: each response is a gRPC message the client decodes and
//     dispatches, which costs more than the events it carries, so the
//     server budgets one event response per WatchResponseCost over all
//     streams. Each stream keeps an account (time paid in, every stream's
//     responses charged, at most 10 ms saved); while it is in debt it
//     holds for the debt (at most 20 ms) and revisions committed
//     meanwhile go out together, one response per watcher. Cursors are
//     untouched, so a hold delays events but never drops, splits or
//     repeats them, and a held stream is not caught up (no progress).
//   - A progress response for revision R (RequestProgress or progress_notify)
//     is only sent once the watchers it speaks for have been sent every event
//     <= R, so it never overtakes an event.
//
// JSON gateway (Gateway): etcd's own generated handlers
// (go.etcd.io/etcd/api/v3/etcdserverpb/gw) on grpc-gateway's runtime, with
// the marshaler options etcd 3.6 uses, so paths, field names, int64 as
// strings, base64 bytes and error bodies are etcd's; the output is
// compacted so that every build prints etcd's bytes. The handlers reach the
// services through an in-process gRPC server of their own (no socket), so
// the gateway is no way around the client port's TLS; the HTTP client's
// verified certificate rides along as metadata that HTTP clients cannot
// set, and becomes the peer identity of the call.
//
// Snapshot stream framing: the data file Backend.Snapshot writes, then zero
// bytes up to a multiple of 512, then the SHA-256 of all of that. This is
// what `etcdctl snapshot save` insists on (it rejects a download whose size
// is not 512*n+32); SnapshotDataSize checks and strips it again.
package etcdapi
