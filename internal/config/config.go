package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/netsy-io/netsy/internal/compactor"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/etcdapi"
	"github.com/netsy-io/netsy/internal/mvcc"
)

// Config is everything a node is started with.
type Config struct {
	// DataDir holds the local log segments, snapshots and node identity.
	DataDir string
	// ClientAddr is the host:port of the etcd v3 client API.
	ClientAddr string
	// HTTPAddr is the host:port serving /healthz, /readyz and /metrics.
	HTTPAddr string
	// ProgressNotifyInterval is how often idle watches with progress_notify
	// receive a progress event.
	ProgressNotifyInterval time.Duration
	// Metrics is etcd's --metrics: MetricsBasic, or MetricsExtensive to
	// add the client port's grpc_server_handling_seconds histogram, which
	// costs a clock read and a histogram update on every call.
	Metrics string
	// LogLevel is one of trace, debug, info, warn, error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
	// Name is the etcd member name MemberList reports for this node;
	// empty means NodeID (see MemberName).
	Name string

	// Storage is the permanent store: file:///abs/path or
	// s3://bucket[/prefix]. Empty means file://<data-dir>/objects.
	Storage string
	// S3Endpoint, S3Region and S3PathStyle address an S3-compatible
	// service; credentials come from the standard AWS environment.
	S3Endpoint  string
	S3Region    string
	S3PathStyle bool
	// Quorum is replication.quorum: 0 acknowledges a write once it is in
	// object storage; N > 0 once N replicas have fsync'd it; -1 once a
	// majority has. With fewer replicas than the quorum needs, writes fall
	// back to 0; on a single node -1 needs no replica and acknowledges on
	// the local fsync, uploading in the background.
	Quorum int
	// SnapshotEveryRevisions is how many log entries may follow the last
	// snapshot before the next is taken.
	SnapshotEveryRevisions int64
	// SnapshotKeep is how many snapshots object storage keeps.
	SnapshotKeep int
	// Retention keeps, on top of the newest SnapshotKeep snapshots, every
	// snapshot and WAL chunk a restore of any revision committed within
	// this long needs; 0 keeps only the newest snapshots.
	Retention time.Duration
	// ValueSpillMin is the smallest value kept in files under
	// <data-dir>/values instead of in memory; 0 keeps every value in
	// memory.
	ValueSpillMin int
	// MaxRequestBytes bounds the encoded size of one client write request
	// (etcd's --max-request-bytes, same default).
	MaxRequestBytes int
	// QuotaBackendBytes is the space quota (etcd's --quota-backend-bytes;
	// 0 means DefaultQuotaBackendBytes, as etcd's 0): see QuotaBytes.
	QuotaBackendBytes int64
	// AutoCompactionMode and AutoCompactionRetention are etcd's flags of
	// the same names (see package compactor); retention "0" is off.
	AutoCompactionMode      string
	AutoCompactionRetention string

	// NodeID names this node in the cluster (nodes/{node_id}.json).
	NodeID string
	// PeerAddr is the host:port of the peer protocol.
	PeerAddr string
	// AdvertiseClient and AdvertisePeer are how other nodes and clients
	// reach this one (default: the listen addresses).
	AdvertiseClient string
	AdvertisePeer   string
	// ClusterID names the cluster; nodes of another cluster id on the same
	// bucket are refused.
	ClusterID string
	// ElectorLease and ElectorRenew time the Elector lock (s3lect).
	ElectorLease time.Duration
	ElectorRenew time.Duration
	// HeartbeatInterval is the heartbeat cadence; a node missing two is
	// Degraded, and the Primary's lease is two intervals.
	HeartbeatInterval time.Duration
	// QuorumTimeout is how long a write waits for replica receipts before
	// it falls back to object storage and the late replicas stop counting.
	QuorumTimeout time.Duration
	// PrimaryHandshakeTimeout is how long an election waits for an
	// unreachable previous Primary last seen Draining, to finish its
	// flush (never less than its lease); one last seen Active is waited
	// for until its lease has run out on the Elector's clock.
	PrimaryHandshakeTimeout time.Duration
	// DeregistrationTimeout deregisters a node Degraded this long (0:
	// never).
	DeregistrationTimeout time.Duration

	// TLS secures the client and peer ports (tls.go).
	TLS TLS

	// ReadOnlyAt, when positive, starts a read-only node that serves the
	// state at this revision, rebuilt from the bucket (package node,
	// readonly.go): it never writes to the bucket and takes no part in
	// the cluster. 0 is a normal node.
	ReadOnlyAt int64
	// ReadOnlyAtTime, when set, starts the same read-only node at the last
	// revision committed at or before it, which the node looks up in the
	// bucket's timeline at start (objwal.RevisionAt) and then keeps in
	// ReadOnlyAt. --read-only-at sets one or the other.
	ReadOnlyAtTime time.Time
}

// ReadOnly says whether the node is a read-only one (--read-only-at).
func (c Config) ReadOnly() bool { return c.ReadOnlyAt > 0 || !c.ReadOnlyAtTime.IsZero() }

// DefaultQuotaBackendBytes is the space quota when none is set: 2 GiB,
// etcd's default. It is measured on what the store holds, keys, values
// and the bookkeeping of every version (engine space in use), not on a
// file: at 2 GiB in use the Go heap runs at about 2.5 GiB (the GC
// headroom of package gctune), and a restart, which holds the decoded
// snapshot while the store is rebuilt from it, peaks near twice that. A
// node at its quota so stays near 5 GiB, within a host of 8 GiB (etcd's
// recommended size) and, on the 24 GiB hosts the project is tested on,
// with room for three nodes side by side.
const DefaultQuotaBackendBytes = 2 << 30

// QuotaBytes is the effective space quota.
func (c Config) QuotaBytes() int64 {
	if c.QuotaBackendBytes == 0 {
		return DefaultQuotaBackendBytes
	}
	return c.QuotaBackendBytes
}

// AutoCompaction is the parsed auto-compaction policy.
func (c Config) AutoCompaction() (compactor.Policy, error) {
	return compactor.Parse(c.AutoCompactionMode, c.AutoCompactionRetention)
}

// The --metrics levels, as etcd's.
const (
	MetricsBasic     = "basic"
	MetricsExtensive = "extensive"
)

// MaxRequestBytesLimit is the largest --max-request-bytes accepted: the
// log entry a request becomes must fit one data-file record (64 MiB),
// with room for what the entry adds to the request.
const MaxRequestBytesLimit = 32 << 20

// Default returns the configuration of `netsy` run with no flags.
func Default() Config {
	return Config{
		DataDir:                 "./netsy-data",
		ClientAddr:              "127.0.0.1:2379",
		HTTPAddr:                "127.0.0.1:2381",
		ProgressNotifyInterval:  5 * time.Second,
		Metrics:                 MetricsBasic,
		LogLevel:                "info",
		LogFormat:               "text",
		SnapshotEveryRevisions:  100000,
		SnapshotKeep:            3,
		Retention:               24 * time.Hour,
		ValueSpillMin:           mvcc.DefaultSpillMin,
		MaxRequestBytes:         etcdapi.DefaultMaxRequestBytes,
		AutoCompactionMode:      compactor.ModePeriodic,
		AutoCompactionRetention: "0",
		Quorum:                  -1,
		NodeID:                  defaultNodeID(),
		PeerAddr:                "127.0.0.1:2380",
		ClusterID:               "netsy",
		ElectorLease:            15 * time.Second,
		ElectorRenew:            5 * time.Second,
		HeartbeatInterval:       500 * time.Millisecond,
		QuorumTimeout:           500 * time.Millisecond,
		PrimaryHandshakeTimeout: 3 * time.Second,
		DeregistrationTimeout:   3 * time.Minute,
		TLS:                     TLS{MinVersion: "1.3"},
	}
}

// defaultNodeID is the host name, if it is a valid node id.
func defaultNodeID() string {
	h, err := os.Hostname()
	if err != nil || discovery.ValidateNodeID(h) != nil {
		return "netsy"
	}
	return h
}

// MemberName is the etcd member name of this node: --name, else --node-id.
func (c Config) MemberName() string {
	if c.Name != "" {
		return c.Name
	}
	return c.NodeID
}

// AdvertiseClientURL is the client URL other nodes and clients are given.
func (c Config) AdvertiseClientURL() string {
	if c.AdvertiseClient != "" {
		return c.AdvertiseClient
	}
	if c.ClientTLS() {
		return "https://" + c.ClientAddr
	}
	return "http://" + c.ClientAddr
}

// AdvertisePeerAddr is the peer address other nodes are given.
func (c Config) AdvertisePeerAddr() string {
	if c.AdvertisePeer != "" {
		return c.AdvertisePeer
	}
	return c.PeerAddr
}

// StorageURL is the permanent store's URL with the default resolved.
func (c Config) StorageURL() (string, error) {
	if c.Storage != "" {
		return c.Storage, nil
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return "", fmt.Errorf("--data-dir: %w", err)
	}
	return "file://" + filepath.Join(abs, "objects"), nil
}

// Validate reports the first invalid field by its flag name.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("--data-dir: must not be empty")
	}
	if err := checkHostPort(c.ClientAddr); err != nil {
		return fmt.Errorf("--client-addr: %w", err)
	}
	if err := checkHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	if c.ProgressNotifyInterval <= 0 {
		return fmt.Errorf("--progress-notify-interval: must be positive, got %s", c.ProgressNotifyInterval)
	}
	switch c.Metrics {
	case MetricsBasic, MetricsExtensive:
	default:
		return fmt.Errorf("--metrics: %q is not %s or %s", c.Metrics, MetricsBasic, MetricsExtensive)
	}
	switch strings.ToLower(c.LogLevel) {
	case "trace", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level: %q is not one of trace, debug, info, warn, error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format: %q is not text or json", c.LogFormat)
	}
	if err := discovery.ValidateNodeID(c.NodeID); err != nil {
		return fmt.Errorf("--node-id: %w", err)
	}
	if err := checkName(c.Name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	if err := checkHostPort(c.PeerAddr); err != nil {
		return fmt.Errorf("--peer-addr: %w", err)
	}
	if c.AdvertiseClient == "" && unspecifiedHost(c.ClientAddr) {
		return fmt.Errorf("--advertise-client: required when --client-addr listens on every interface (%s): give the URL clients reach this node at", c.ClientAddr)
	}
	if c.AdvertisePeer == "" && unspecifiedHost(c.PeerAddr) {
		return fmt.Errorf("--advertise-peer: required when --peer-addr listens on every interface (%s): give the host:port other nodes reach this node at", c.PeerAddr)
	}
	if c.AdvertiseClient != "" {
		if err := checkClientURL(c.AdvertiseClient); err != nil {
			return fmt.Errorf("--advertise-client: %w", err)
		}
	}
	if c.AdvertisePeer != "" {
		if err := checkHostPort(c.AdvertisePeer); err != nil {
			return fmt.Errorf("--advertise-peer: %w", err)
		}
	}
	if err := checkClusterID(c.ClusterID); err != nil {
		return fmt.Errorf("--cluster-id: %w", err)
	}
	if c.ElectorLease <= 0 {
		return fmt.Errorf("--elector-lease: must be positive, got %s", c.ElectorLease)
	}
	if c.ElectorRenew <= 0 || c.ElectorRenew > c.ElectorLease/2 {
		return fmt.Errorf("--elector-renew: must be positive and at most half of --elector-lease (%s), got %s", c.ElectorLease, c.ElectorRenew)
	}
	if c.QuorumTimeout <= 0 {
		return fmt.Errorf("--quorum-timeout: must be positive, got %s", c.QuorumTimeout)
	}
	if c.HeartbeatInterval <= 0 {
		return fmt.Errorf("--heartbeat-interval: must be positive, got %s", c.HeartbeatInterval)
	}
	if c.PrimaryHandshakeTimeout < 0 {
		return fmt.Errorf("--primary-handshake-timeout: must not be negative, got %s", c.PrimaryHandshakeTimeout)
	}
	if c.DeregistrationTimeout < 0 {
		return fmt.Errorf("--deregistration-timeout: must be 0 (never) or positive, got %s", c.DeregistrationTimeout)
	}
	if c.Storage != "" && !strings.HasPrefix(c.Storage, "file://") && !strings.HasPrefix(c.Storage, "s3://") {
		return fmt.Errorf("--storage: %q is not file:///absolute/path or s3://bucket[/prefix]", c.Storage)
	}
	if c.Quorum < -1 {
		return fmt.Errorf("--quorum: %d is not 0 (object storage), N > 0 (replicas) or -1 (majority)", c.Quorum)
	}
	if c.SnapshotEveryRevisions <= 0 {
		return fmt.Errorf("--snapshot-every-revisions: must be positive, got %d", c.SnapshotEveryRevisions)
	}
	if c.SnapshotKeep < 1 {
		return fmt.Errorf("--snapshot-keep: must be at least 1, got %d", c.SnapshotKeep)
	}
	if c.Retention < 0 {
		return fmt.Errorf("--retention: must be 0 (keep only the newest snapshots) or a duration, got %s", c.Retention)
	}
	if c.ValueSpillMin < 0 {
		return fmt.Errorf("--value-spill-min: must be 0 (keep values in memory) or a size in bytes, got %d", c.ValueSpillMin)
	}
	if c.MaxRequestBytes <= 0 || c.MaxRequestBytes > MaxRequestBytesLimit {
		return fmt.Errorf("--max-request-bytes: must be between 1 and %d (32 MiB), got %d", MaxRequestBytesLimit, c.MaxRequestBytes)
	}
	if c.QuotaBackendBytes < 0 {
		return fmt.Errorf("--quota-backend-bytes: must be 0 (the default, %d) or a size in bytes, got %d", int64(DefaultQuotaBackendBytes), c.QuotaBackendBytes)
	}
	if _, err := c.AutoCompaction(); err != nil {
		return err
	}
	if c.ReadOnlyAt < 0 {
		return fmt.Errorf("--read-only-at: must be a positive revision (or 0: a normal node), got %d", c.ReadOnlyAt)
	}
	if c.ReadOnlyAt > 0 && !c.ReadOnlyAtTime.IsZero() {
		return errors.New("--read-only-at: a revision or a time, not both")
	}
	if c.ReadOnly() && c.Storage == "" {
		// The default, file://<data-dir>/objects, is a node's own scratch
		// store: the past of a cluster is in the bucket it names.
		return errors.New("--read-only-at: needs --storage, the bucket (or prefix) whose past to serve")
	}
	return c.validateTLS()
}

// checkClusterID accepts what fits a certificate's URI SAN
// (netsy://{cluster_id}/...): letters, digits, '.', '-' and '_'.
func checkClusterID(id string) error {
	if id == "" || len(id) > 63 {
		return fmt.Errorf("%q must be 1 to 63 characters", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("%q may hold only letters, digits, '.', '-' and '_'", id)
		}
	}
	return nil
}

// MaxNameLen is the longest --name in bytes.
const MaxNameLen = 255

// checkName accepts any printable UTF-8 text, as etcd does, within a
// bound; it travels in nodes/{node_id}.json and the peer protocol.
func checkName(name string) error {
	if len(name) > MaxNameLen {
		return fmt.Errorf("longer than %d bytes", MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%q is not valid UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%q holds a control character", name)
		}
	}
	return nil
}

// checkClientURL accepts what an etcd client dials: http:// or https://
// and a host.
func checkClientURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// or https:// URL with a host", s)
	}
	return nil
}

func unspecifiedHost(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host (use 0.0.0.0 to listen on every interface)", s)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q has a bad port: %w", s, err)
	}
	return nil
}

// EnvName is the environment variable that backs a flag.
func EnvName(flagName string) string {
	return "NETSY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Bind registers the node's flags on fs, writing into c.
func (c *Config) Bind(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the local log, snapshots and node identity")
	fs.StringVar(&c.ClientAddr, "client-addr", c.ClientAddr, "host:port of the etcd v3 client API")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "host:port serving /healthz, /readyz and /metrics")
	fs.DurationVar(&c.ProgressNotifyInterval, "progress-notify-interval", c.ProgressNotifyInterval, "interval of watch progress notifications")
	fs.StringVar(&c.Metrics, "metrics", c.Metrics, "as etcd's flag: basic, or extensive to add the grpc_server_handling_seconds histogram of client calls (a clock read and a histogram update on every call)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: trace, debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
	fs.StringVar(&c.Name, "name", c.Name, "this node's etcd member name, reported by MemberList (default: --node-id)")
	fs.StringVar(&c.Storage, "storage", c.Storage, "permanent store: file:///abs/path or s3://bucket[/prefix] (default file://<data-dir>/objects)")
	fs.StringVar(&c.S3Endpoint, "s3-endpoint", c.S3Endpoint, "S3 endpoint URL, e.g. http://127.0.0.1:9000 (default: AWS)")
	fs.StringVar(&c.S3Region, "s3-region", c.S3Region, "S3 region (default from the AWS environment, else us-east-1)")
	fs.BoolVar(&c.S3PathStyle, "s3-path-style", c.S3PathStyle, "address buckets by path (MinIO needs this)")
	fs.IntVar(&c.Quorum, "quorum", c.Quorum, "replication quorum: 0 = acknowledge once in object storage, N = N replicas (a node without replicas acknowledges as 0, with a warning), -1 = majority")
	fs.Int64Var(&c.SnapshotEveryRevisions, "snapshot-every-revisions", c.SnapshotEveryRevisions, "log entries between snapshots")
	fs.IntVar(&c.SnapshotKeep, "snapshot-keep", c.SnapshotKeep, "snapshots kept in object storage")
	fs.DurationVar(&c.Retention, "retention", c.Retention, "keep every object in storage that a restore of a revision committed this long ago needs (0: only the newest --snapshot-keep snapshots)")
	fs.IntVar(&c.ValueSpillMin, "value-spill-min", c.ValueSpillMin, "values of at least this many bytes are read from files under <data-dir>/values instead of held in memory (0: hold every value in memory)")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "largest client write request in bytes, as etcd's flag: 1.5 MiB by default, at most 32 MiB")
	fs.Int64Var(&c.QuotaBackendBytes, "quota-backend-bytes", c.QuotaBackendBytes, "space quota in bytes, as etcd's flag (0: 2 GiB): measured on what the store holds, keys, values and per-version bookkeeping, in memory and spilled (not the bucket); a write past it raises the NOSPACE alarm and writes that add data are refused until it is disarmed. 2 GiB keeps a full node near 5 GiB of memory, restarts included")
	fs.StringVar(&c.AutoCompactionMode, "auto-compaction-mode", c.AutoCompactionMode, "auto-compaction mode, as etcd's flag: periodic or revision; run by the Active Primary only")
	fs.StringVar(&c.AutoCompactionRetention, "auto-compaction-retention", c.AutoCompactionRetention, "auto-compaction retention, as etcd's flag: a duration (10s, 1h) or a number, hours in periodic mode and revisions in revision mode; 0 disables")
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "this node's id in the cluster (default: the host name)")
	fs.StringVar(&c.PeerAddr, "peer-addr", c.PeerAddr, "host:port of the peer protocol (election, replication, forwarding)")
	fs.StringVar(&c.AdvertiseClient, "advertise-client", c.AdvertiseClient, "client URL other nodes and clients are given (default: http://<client-addr>)")
	fs.StringVar(&c.AdvertisePeer, "advertise-peer", c.AdvertisePeer, "host:port other nodes reach the peer port at (default: <peer-addr>)")
	fs.StringVar(&c.ClusterID, "cluster-id", c.ClusterID, "the cluster's name; nodes of another cluster id on the same bucket are refused")
	fs.DurationVar(&c.ElectorLease, "elector-lease", c.ElectorLease, "lease of the Elector lock in object storage")
	fs.DurationVar(&c.ElectorRenew, "elector-renew", c.ElectorRenew, "how often the Elector renews its lock (at most half the lease)")
	fs.DurationVar(&c.QuorumTimeout, "quorum-timeout", c.QuorumTimeout, "how long a write waits for replica receipts before it is acknowledged through object storage instead (the late replica stops counting until it catches up)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "heartbeat cadence; a node missing two heartbeats is Degraded, and the Primary's lease is two intervals")
	fs.DurationVar(&c.PrimaryHandshakeTimeout, "primary-handshake-timeout", c.PrimaryHandshakeTimeout, "how long an election waits for an unreachable previous Primary last seen Draining (never less than its lease; an Active one is waited for until its lease runs out)")
	fs.DurationVar(&c.DeregistrationTimeout, "deregistration-timeout", c.DeregistrationTimeout, "deregister a node Degraded this long (0: never)")
	fs.Var(&revisionOrTime{rev: &c.ReadOnlyAt, t: &c.ReadOnlyAtTime}, "read-only-at", "serve the state at this revision, or at this RFC 3339 time (2026-01-02T15:04:05Z, or as date --rfc-3339=seconds prints it: the last revision committed then), read-only, rebuilt from --storage, to inspect the past with etcdctl or kubectl: every write is refused, nothing is written to the bucket and the node takes no part in the cluster (0: a normal node)")
	c.bindTLS(fs)
}

// revisionOrTime is a flag that takes a revision or an RFC 3339 time: one
// flag, so an operator who found a time in a log or an incident report
// does not have to turn it into a revision first, and the two cannot
// both be given. Setting one clears the other.
type revisionOrTime struct {
	rev *int64
	t   *time.Time
}

func (v *revisionOrTime) String() string {
	if v.t == nil || v.rev == nil {
		return "0"
	}
	if !v.t.IsZero() {
		return v.t.Format(time.RFC3339Nano)
	}
	return strconv.FormatInt(*v.rev, 10)
}

func (v *revisionOrTime) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*v.rev, *v.t = n, time.Time{}
		return nil
	}
	t, err := ParseTime(s)
	if err != nil {
		return fmt.Errorf("%q is neither a revision nor an RFC 3339 time (2026-01-02T15:04:05Z)", s)
	}
	*v.rev, *v.t = 0, t
	return nil
}

// ParseTime reads a point in time as RFC 3339 (2026-01-02T15:04:05Z,
// 2026-01-02T16:04:05.5+01:00) or as `date --rfc-3339=seconds` (or =ns)
// prints it, with a space for the T. An offset is required: a time
// without one would mean a different instant on each machine.
func ParseTime(s string) (time.Time, error) {
	if len(s) > 10 && s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time with an offset (2026-01-02T15:04:05Z or 2026-01-02 15:04:05+00:00)", s)
	}
	return t, nil
}
