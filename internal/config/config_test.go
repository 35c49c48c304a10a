package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
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
		{name: "stray arg", args: []string{"extra"}, wantErr: "unexpected argument"},
		{name: "storage s3", args: []string{"--storage", "s3://bucket/pre", "--s3-path-style", "--quorum=-1"},
			check: func(c Config) bool { return c.Storage == "s3://bucket/pre" && c.S3PathStyle && c.Quorum == -1 }},
		{name: "bad storage", args: []string{"--storage", "gs://x"}, wantErr: "--storage"},
		{name: "bad quorum", args: []string{"--quorum=-2"}, wantErr: "--quorum"},
		{name: "bad snapshot keep", env: map[string]string{"NETSY_SNAPSHOT_KEEP": "0"}, wantErr: "--snapshot-keep"},
		{name: "max request bytes", args: []string{"--max-request-bytes", "4194304"}, check: func(c Config) bool { return c.MaxRequestBytes == 4<<20 }},
		{name: "max request bytes env", env: map[string]string{"NETSY_MAX_REQUEST_BYTES": "1024"}, check: func(c Config) bool { return c.MaxRequestBytes == 1024 }},
		{name: "zero max request bytes", args: []string{"--max-request-bytes=0"}, wantErr: "--max-request-bytes"},
		{name: "negative max request bytes", args: []string{"--max-request-bytes=-1"}, wantErr: "--max-request-bytes"},
		{name: "huge max request bytes", args: []string{"--max-request-bytes=33554433"}, wantErr: "--max-request-bytes"},
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
