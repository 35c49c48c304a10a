// Package compactor compacts the log on a schedule, as etcd's
// --auto-compaction-mode and --auto-compaction-retention do, for a cluster
// whose clients never compact (Kubernetes compacts for itself; most other
// clients do not, and their history would grow without bound).
//
// It owns the schedule only: which revision to compact to, and when. The
// compaction itself is an ordinary Compact request to the engine, a logged
// entry every node applies, so nothing here is replicated or remembered.
//
// Schedules, as etcd 3.6 runs them:
//   - periodic, retention P: the current revision is sampled every
//     min(P, 1h)/10; the first compaction comes P after the start, to the
//     revision sampled P earlier, and later ones every min(P, 1h), each to
//     the revision sampled P before it. So at P = 10s history older than
//     about 10 s is compacted within about 11 s, and at P = 24h every hour,
//     to the revision of 24 h ago.
//   - revision, retention N: every 5 minutes, compact to the current
//     revision minus N, unless that is not positive or was done already.
//
// A failed compaction is tried again at the next step; a revision already
// compacted counts as done.
//
// Only the Active Primary runs a Compactor (internal/roles starts it when
// the node becomes Active and closes it when it stops being Active); a new
// Primary starts its own schedule from scratch, as a restarted etcd
// leader does. It never reads the wall clock (only the injected clock),
// never writes anything but Compact requests, and its one goroutine stops
// on Close.
package compactor
