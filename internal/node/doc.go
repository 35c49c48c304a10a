// Package node wires one netsy process together: the data directory and its
// identity, the local log, the engine, the etcd client API and the HTTP
// health and metrics endpoints. It owns start-up order and shutdown order;
// it implements no database behaviour itself.
//
// The cluster roles are internal/roles: node builds them over the engine,
// the log, the object store and a Transport over its peer connection pool,
// registers the peer services they give it on the peer port, asks them on
// shutdown to leave the cluster, and reads their state for /healthz,
// /readyz, /cluster/* and the metrics. It decides nothing about roles
// itself: no lease rule, no deposition rule, no local-or-remote choice.
//
// It watches the data directory it locked (datadir.go): a directory
// deleted or replaced under the running process fails the engine for good
// (the open files would go on taking fsyncs no restart can find), and the
// roles are told so that a Primary steps down. /healthz (health.go) is 503
// while the engine failed, the node is deposed, or the log refuses writes
// because object storage does not take them.
//
// It also puts the TLS that internal/tlsconf builds on the ports (tls.go):
// the client port accepts client identities, the peer port and every
// connection to a peer peer identities of this cluster. A request that a
// node forwards to the Primary goes over the peer port under the
// forwarding node's peer identity; the client's own identity was checked
// by the node it connected to. The client port is shared, as etcd's is:
// internal/portmux hands gRPC connections to the gRPC server and HTTP/1.1
// ones to etcd's JSON gateway (etcdapi.Gateway), both under the client
// port's TLS. The HTTP port stays plaintext: it serves
// health, metrics, profiles and the read-only cluster view, never keys or
// values.
//
// /metrics carries each package's own netsy_* metrics and, for dashboards
// and alerts written for etcd, etcd's names for what Netsy has an
// equivalent of (etcdmetrics.go; the roles and the client API export the
// rest): node only reads them at scrape time, and the write path keeps
// nothing for them but counters. The object store the node opens is
// wrapped to count and time every request (storemetrics.go); the wrapper
// passes results through unchanged.
//
// A node started with --read-only-at R (readonly.go) is another start
// order, not a role: it rebuilds the state at R from the bucket with
// backup.OpenAt and serves it on the client and HTTP ports only. It must
// never write to the bucket or take part in the cluster (no s3lect, no
// registration, no claim of the log, no uploads or GC, no peer port), and
// refuses every write with FailedPrecondition before it reaches the
// engine; its data directory is locked and holds only scratch. Started at
// a time T (--read-only-at with an RFC 3339 time), it first turns T into
// R with objwal.RevisionAt, reading the bucket only, and refuses a T
// before the window or in the future.
//
// On a branch's store (netsyctl branch) the first node to start builds
// the state at the branch's revision from the parent's objects
// (backup.StartBranch) and writes it as the store's own first snapshot
// before it opens the log; from then on the branch is an ordinary store.
package node
