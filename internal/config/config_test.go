package config

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/discovery"
)

func parse(args []string, env map[string]string) (Config, error) {
	fs := flag.NewFlagSet("netsy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return Parse(fs, args, func(k string) string { return env[k] })
}

func TestDefaultsAreValid(t *testing.T) {
	c, err := parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c != Default() {
		t.Fatalf("no flags gave %+v, want defaults", c)
	}
}

func TestFlagsEnvAndErrors(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(Config) bool
		wantErr string
	}{
		{name: "flag", args: []string{"--client-addr", "127.0.0.1:23790"}, check: func(c Config) bool { return c.ClientAddr == "127.0.0.1:23790" }},
		{name: "env fallback", env: map[string]string{"NETSY_DATA_DIR": "/tmp/x", "NETSY_PROGRESS_NOTIFY_INTERVAL": "250ms"},
			check: func(c Config) bool { return c.DataDir == "/tmp/x" && c.ProgressNotifyInterval == 250*time.Millisecond }},
		{name: "flag beats env", args: []string{"--log-level=debug"}, env: map[string]string{"NETSY_LOG_LEVEL": "error"},
			check: func(c Config) bool { return c.LogLevel == "debug" }},
		{name: "bad addr", args: []string{"--client-addr", "nonsense"}, wantErr: "--client-addr"},
		{name: "empty host", args: []string{"--http-addr", ":2381"}, wantErr: "--http-addr"},
		{name: "bad duration env", env: map[string]string{"NETSY_PROGRESS_NOTIFY_INTERVAL": "soon"}, wantErr: "NETSY_PROGRESS_NOTIFY_INTERVAL"},
		{name: "zero interval", args: []string{"--progress-notify-interval=0s"}, wantErr: "--progress-notify-interval"},
		{name: "bad level", args: []string{"--log-level=loud"}, wantErr: "--log-level"},
		{name: "bad format", args: []string{"--log-format=xml"}, wantErr: "--log-format"},
		{name: "metrics basic by default, as etcd", check: func(c Config) bool { return c.Metrics == MetricsBasic }},
		{name: "metrics extensive", args: []string{"--metrics", "extensive"}, check: func(c Config) bool { return c.Metrics == MetricsExtensive }},
		{name: "metrics env", env: map[string]string{"NETSY_METRICS": "extensive"}, check: func(c Config) bool { return c.Metrics == MetricsExtensive }},
		{name: "bad metrics", args: []string{"--metrics=all"}, wantErr: "--metrics"},
		{name: "stray arg", args: []string{"extra"}, wantErr: "unexpected argument"},
		{name: "storage s3", args: []string{"--storage", "s3://bucket/pre", "--s3-path-style", "--quorum=-1"},
			check: func(c Config) bool { return c.Storage == "s3://bucket/pre" && c.S3PathStyle && c.Quorum == -1 }},
		{name: "bad storage", args: []string{"--storage", "gs://x"}, wantErr: "--storage"},
		{name: "bad quorum", args: []string{"--quorum=-2"}, wantErr: "--quorum"},
		{name: "bad snapshot keep", env: map[string]string{"NETSY_SNAPSHOT_KEEP": "0"}, wantErr: "--snapshot-keep"},
		{name: "retention default", check: func(c Config) bool { return c.Retention == 24*time.Hour }},
		{name: "retention env", env: map[string]string{"NETSY_RETENTION": "90m"}, check: func(c Config) bool { return c.Retention == 90*time.Minute }},
		{name: "retention off", args: []string{"--retention=0"}, check: func(c Config) bool { return c.Retention == 0 }},
		{name: "negative retention", args: []string{"--retention=-1h"}, wantErr: "--retention"},
		{name: "max request bytes", args: []string{"--max-request-bytes", "4194304"}, check: func(c Config) bool { return c.MaxRequestBytes == 4<<20 }},
		{name: "max request bytes env", env: map[string]string{"NETSY_MAX_REQUEST_BYTES": "1024"}, check: func(c Config) bool { return c.MaxRequestBytes == 1024 }},
		{name: "zero max request bytes", args: []string{"--max-request-bytes=0"}, wantErr: "--max-request-bytes"},
		{name: "negative max request bytes", args: []string{"--max-request-bytes=-1"}, wantErr: "--max-request-bytes"},
		{name: "huge max request bytes", args: []string{"--max-request-bytes=33554433"}, wantErr: "--max-request-bytes"},
		{name: "quota default", check: func(c Config) bool { return c.QuotaBackendBytes == 0 && c.QuotaBytes() == 2<<30 }},
		{name: "quota env", env: map[string]string{"NETSY_QUOTA_BACKEND_BYTES": "1048576"}, check: func(c Config) bool { return c.QuotaBytes() == 1<<20 }},
		{name: "negative quota", args: []string{"--quota-backend-bytes=-1"}, wantErr: "--quota-backend-bytes"},
		{name: "auto-compaction off by default", check: func(c Config) bool { p, err := c.AutoCompaction(); return err == nil && !p.Enabled() }},
		{name: "auto-compaction periodic", args: []string{"--auto-compaction-mode=periodic", "--auto-compaction-retention=2s"},
			check: func(c Config) bool { p, _ := c.AutoCompaction(); return p.Period == 2*time.Second }},
		{name: "auto-compaction revision env", env: map[string]string{"NETSY_AUTO_COMPACTION_MODE": "revision", "NETSY_AUTO_COMPACTION_RETENTION": "1000"},
			check: func(c Config) bool { p, _ := c.AutoCompaction(); return p.Revisions == 1000 }},
		{name: "bad auto-compaction mode", args: []string{"--auto-compaction-mode=daily"}, wantErr: "--auto-compaction-mode"},
		{name: "bad auto-compaction retention", args: []string{"--auto-compaction-mode=revision", "--auto-compaction-retention=5m"}, wantErr: "--auto-compaction-retention"},
		{name: "read-only-at without storage", args: []string{"--read-only-at=7"}, wantErr: "--read-only-at: needs --storage"},
		{name: "read-only-at env", env: map[string]string{"NETSY_READ_ONLY_AT": "42", "NETSY_STORAGE": "s3://b/p"}, check: func(c Config) bool { return c.ReadOnlyAt == 42 }},
		{name: "read-only-at flag", args: []string{"--read-only-at=7", "--storage=file:///x"}, check: func(c Config) bool { return c.ReadOnlyAt == 7 }},
		{name: "negative read-only-at", args: []string{"--read-only-at=-1"}, wantErr: "--read-only-at"},
		{name: "read-only-at time", args: []string{"--read-only-at=2026-01-02T15:04:05.5+01:00", "--storage=file:///x"},
			check: func(c Config) bool {
				return c.ReadOnlyAt == 0 && c.ReadOnly() && c.ReadOnlyAtTime.Equal(time.Date(2026, 1, 2, 14, 4, 5, 5e8, time.UTC))
			}},
		{name: "read-only-at time as date prints it", env: map[string]string{"NETSY_READ_ONLY_AT": "2026-01-02 15:04:05+00:00", "NETSY_STORAGE": "s3://b/p"},
			check: func(c Config) bool { return c.ReadOnlyAtTime.Equal(time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)) }},
		{name: "read-only-at time without storage", args: []string{"--read-only-at=2026-01-02T15:04:05Z"}, wantErr: "--read-only-at: needs --storage"},
		{name: "read-only-at time without offset", args: []string{"--read-only-at=2026-01-02T15:04:05", "--storage=file:///x"}, wantErr: "neither a revision nor an RFC 3339 time"},
		{name: "read-only-at nonsense", args: []string{"--read-only-at=yesterday", "--storage=file:///x"}, wantErr: "neither a revision nor an RFC 3339 time"},
		{name: "read-only-at off", check: func(c Config) bool { return !c.ReadOnly() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(tc.args, tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want mention of %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}
}

func TestStorageURLDefault(t *testing.T) {
	c := Default()
	c.DataDir = "/var/lib/netsy"
	u, err := c.StorageURL()
	if err != nil || u != "file:///var/lib/netsy/objects" {
		t.Fatalf("default storage %q %v", u, err)
	}
	c.Storage = "s3://b"
	if u, _ := c.StorageURL(); u != "s3://b" {
		t.Fatalf("explicit storage %q", u)
	}
}

func TestMaxRequestBytesDefaultIsEtcds(t *testing.T) {
	// etcd's --max-request-bytes defaults to 1.5 MiB.
	if got := Default().MaxRequestBytes; got != 1536*1024 {
		t.Fatalf("default --max-request-bytes %d, want %d", got, 1536*1024)
	}
}

func TestCallerFlagsGetNoEnvFallback(t *testing.T) {
	fs := flag.NewFlagSet("netsy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	version := fs.Bool("version", false, "")
	env := map[string]string{"NETSY_VERSION": "true", "NETSY_NAME": "fromenv"}
	c, err := Parse(fs, nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if *version {
		t.Error("NETSY_VERSION set the caller's own --version flag")
	}
	if c.Name != "fromenv" {
		t.Errorf("NETSY_NAME did not set --name: %q", c.Name)
	}
}

// Every cluster flag's bad value is refused with an error that starts with
// that flag's name.
func TestClusterFlagErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string // the error's prefix
	}{
		{name: "empty node id", args: []string{"--node-id="}, want: "--node-id:"},
		{name: "node id with slash", args: []string{"--node-id", "a/b"}, want: "--node-id:"},
		{name: "node id starting with dash", args: []string{"--node-id", "-n1"}, want: "--node-id:"},
		{name: "long node id", args: []string{"--node-id", strings.Repeat("n", 64)}, want: "--node-id:"},
		{name: "bad node id env", env: map[string]string{"NETSY_NODE_ID": "n 1"}, want: "--node-id:"},
		{name: "peer addr not host:port", args: []string{"--peer-addr", "nonsense"}, want: "--peer-addr:"},
		{name: "peer addr without host", args: []string{"--peer-addr", ":2380"}, want: "--peer-addr:"},
		{name: "peer addr bad port", args: []string{"--peer-addr", "127.0.0.1:http2"}, want: "--peer-addr:"},
		{name: "client on every interface", args: []string{"--client-addr", "0.0.0.0:2379"}, want: "--advertise-client:"},
		{name: "client on every ipv6 interface", args: []string{"--client-addr", "[::]:2379"}, want: "--advertise-client:"},
		{name: "peer on every interface", args: []string{"--peer-addr", "0.0.0.0:2380"}, want: "--advertise-peer:"},
		{name: "advertise client not a URL", args: []string{"--advertise-client", "10.0.0.1:2379"}, want: "--advertise-client:"},
		{name: "advertise client other scheme", args: []string{"--advertise-client", "unix:///run/netsy.sock"}, want: "--advertise-client:"},
		{name: "advertise client without host", args: []string{"--advertise-client", "http://"}, want: "--advertise-client:"},
		{name: "advertise client https without TLS", args: []string{"--advertise-client", "https://10.0.0.1:2379"}, want: "--advertise-client:"},
		{name: "advertise peer a URL", args: []string{"--advertise-peer", "http://10.0.0.1:2380"}, want: "--advertise-peer:"},
		{name: "advertise peer without host", args: []string{"--advertise-peer", ":2380"}, want: "--advertise-peer:"},
		{name: "empty cluster id", args: []string{"--cluster-id="}, want: "--cluster-id:"},
		{name: "cluster id with slash", args: []string{"--cluster-id", "a/b"}, want: "--cluster-id:"},
		{name: "long cluster id", args: []string{"--cluster-id", strings.Repeat("c", 64)}, want: "--cluster-id:"},
		{name: "bad cluster id env", env: map[string]string{"NETSY_CLUSTER_ID": "my cluster"}, want: "--cluster-id:"},
		{name: "zero elector lease", args: []string{"--elector-lease=0"}, want: "--elector-lease:"},
		{name: "negative elector lease", args: []string{"--elector-lease=-15s"}, want: "--elector-lease:"},
		{name: "elector lease not a duration", args: []string{"--elector-lease=15"}, want: "invalid value \"15\" for flag -elector-lease"},
		{name: "zero elector lease env", env: map[string]string{"NETSY_ELECTOR_LEASE": "0s"}, want: "--elector-lease:"},
		{name: "elector lease env not a duration", env: map[string]string{"NETSY_ELECTOR_LEASE": "long"}, want: "--elector-lease (from NETSY_ELECTOR_LEASE="},
		{name: "zero elector renew", args: []string{"--elector-renew=0"}, want: "--elector-renew:"},
		{name: "negative elector renew", args: []string{"--elector-renew=-1s"}, want: "--elector-renew:"},
		{name: "elector renew above half the lease", args: []string{"--elector-lease=10s", "--elector-renew=5001ms"}, want: "--elector-renew:"},
		{name: "elector renew equal to the lease", args: []string{"--elector-lease=10s", "--elector-renew=10s"}, want: "--elector-renew:"},
		{name: "elector renew above the lease", args: []string{"--elector-lease=10s", "--elector-renew=20s"}, want: "--elector-renew:"},
		{name: "default renew above half a short lease", args: []string{"--elector-lease=8s"}, want: "--elector-renew:"},
		{name: "zero heartbeat interval", args: []string{"--heartbeat-interval=0"}, want: "--heartbeat-interval:"},
		{name: "negative heartbeat interval", args: []string{"--heartbeat-interval=-500ms"}, want: "--heartbeat-interval:"},
		{name: "heartbeat interval env not a duration", env: map[string]string{"NETSY_HEARTBEAT_INTERVAL": "fast"}, want: "--heartbeat-interval (from NETSY_HEARTBEAT_INTERVAL="},
		{name: "negative primary handshake timeout", args: []string{"--primary-handshake-timeout=-1s"}, want: "--primary-handshake-timeout:"},
		{name: "primary handshake timeout not a duration", args: []string{"--primary-handshake-timeout=3"}, want: "invalid value \"3\" for flag -primary-handshake-timeout"},
		{name: "negative deregistration timeout", args: []string{"--deregistration-timeout=-1m"}, want: "--deregistration-timeout:"},
		{name: "negative deregistration timeout env", env: map[string]string{"NETSY_DEREGISTRATION_TIMEOUT": "-3m"}, want: "--deregistration-timeout:"},
		{name: "zero quorum timeout", args: []string{"--quorum-timeout=0"}, want: "--quorum-timeout:"},
		{name: "name with a newline", args: []string{"--name", "a\nb"}, want: "--name:"},
		{name: "name not UTF-8", args: []string{"--name", "a\xffb"}, want: "--name:"},
		{name: "long name", env: map[string]string{"NETSY_NAME": strings.Repeat("n", MaxNameLen+1)}, want: "--name:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(tc.args, tc.env)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one starting with %q", err, tc.want)
			}
		})
	}
}

func TestClusterFlagsAccepted(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(Config) bool
	}{
		{name: "node id env", env: map[string]string{"NETSY_NODE_ID": "n1"},
			check: func(c Config) bool { return c.NodeID == "n1" }},
		{name: "cluster id env", env: map[string]string{"NETSY_CLUSTER_ID": "prod-1"},
			check: func(c Config) bool { return c.ClusterID == "prod-1" }},
		{name: "elector lease env", env: map[string]string{"NETSY_ELECTOR_LEASE": "30s"},
			check: func(c Config) bool { return c.ElectorLease == 30*time.Second }},
		{name: "node id flag beats env", args: []string{"--node-id", "from-flag"}, env: map[string]string{"NETSY_NODE_ID": "from-env"},
			check: func(c Config) bool { return c.NodeID == "from-flag" }},
		{name: "cluster id flag beats env", args: []string{"--cluster-id=a"}, env: map[string]string{"NETSY_CLUSTER_ID": "b"},
			check: func(c Config) bool { return c.ClusterID == "a" }},
		{name: "elector lease flag beats env", args: []string{"--elector-lease=20s"}, env: map[string]string{"NETSY_ELECTOR_LEASE": "0s"},
			check: func(c Config) bool { return c.ElectorLease == 20*time.Second }},
		{name: "member name defaults to the node id", args: []string{"--node-id", "n1"},
			check: func(c Config) bool { return c.Name == "" && c.MemberName() == "n1" }},
		{name: "member name", args: []string{"--node-id", "n1", "--name", "etcd member één"},
			check: func(c Config) bool { return c.MemberName() == "etcd member één" }},
		{name: "elector renew exactly half the lease", args: []string{"--elector-lease=10s", "--elector-renew=5s"},
			check: func(c Config) bool { return c.ElectorRenew == 5*time.Second }},
		{name: "primary handshake timeout zero waits only the lease", args: []string{"--primary-handshake-timeout=0"},
			check: func(c Config) bool { return c.PrimaryHandshakeTimeout == 0 }},
		{name: "deregistration timeout zero is never", args: []string{"--deregistration-timeout=0"},
			check: func(c Config) bool { return c.DeregistrationTimeout == 0 }},
		{name: "every interface with advertised addresses", args: []string{
			"--client-addr", "0.0.0.0:2379", "--advertise-client", "http://10.0.0.1:2379",
			"--peer-addr", "0.0.0.0:2380", "--advertise-peer", "10.0.0.1:2380", "--insecure-plaintext"},
			check: func(c Config) bool {
				return c.AdvertiseClientURL() == "http://10.0.0.1:2379" && c.AdvertisePeerAddr() == "10.0.0.1:2380"
			}},
		{name: "advertised addresses default to the listen addresses", args: []string{"--client-addr", "127.0.0.1:12379", "--peer-addr", "127.0.0.1:12380"},
			check: func(c Config) bool {
				return c.AdvertiseClientURL() == "http://127.0.0.1:12379" && c.AdvertisePeerAddr() == "127.0.0.1:12380"
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}
}

func TestClusterDefaults(t *testing.T) {
	c := Default()
	if c.PeerAddr != "127.0.0.1:2380" || c.ClusterID != "netsy" {
		t.Fatalf("peer addr %q, cluster id %q", c.PeerAddr, c.ClusterID)
	}
	if h, err := os.Hostname(); err == nil && discovery.ValidateNodeID(h) == nil && c.NodeID != h {
		t.Fatalf("default node id %q, want the host name %q", c.NodeID, h)
	}
}

func TestParseTimeTakesRFC3339AndWhatDatePrints(t *testing.T) {
	want := time.Date(2026, 11, 28, 8, 4, 49, 0, time.UTC)
	for _, s := range []string{
		"2026-11-28T08:04:49Z",
		"2026-11-28T08:04:49+00:00",      // date -Iseconds
		"2026-11-28 08:04:49+00:00",      // date --rfc-3339=seconds
		"2026-11-28 09:04:49+01:00",      // another offset, the same instant
		"2026-11-28 08:04:49.000000000Z", // date --rfc-3339=ns, in UTC
	} {
		got, err := ParseTime(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "2026-11-28", "2026-11-28 08:04:49", "08:04:49Z", "1764317089"} {
		if got, err := ParseTime(s); err == nil {
			t.Errorf("ParseTime(%q) = %v, want an error", s, got)
		}
	}
}
