package config

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "netsy.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func parseSettings(t *testing.T, args []string, env map[string]string) (Config, map[string]Setting, error) {
	t.Helper()
	fs := flag.NewFlagSet("netsy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c, settings, err := ParseSettings(fs, args, func(k string) string { return env[k] })
	m := map[string]Setting{}
	for _, s := range settings {
		m[s.Name] = s
	}
	return c, m, err
}

func TestConfigFilePrecedence(t *testing.T) {
	file := writeFile(t, `# a node's configuration
log-level: warn        # overridden by the flag
name: from-file        # overridden by the environment
quorum: 0              # from the file
s3-path-style: true
heartbeat-interval: 250ms
tls-min-version: 1.2
`)
	c, s, err := parseSettings(t,
		[]string{"--config-file", file, "--log-level", "debug"},
		map[string]string{"NETSY_NAME": "from-env"})
	if err != nil {
		t.Fatal(err)
	}
	if c.LogLevel != "debug" || c.Name != "from-env" || c.Quorum != 0 || !c.S3PathStyle ||
		c.HeartbeatInterval.String() != "250ms" || c.TLS.MinVersion != "1.2" || c.DataDir != Default().DataDir {
		t.Fatalf("config %+v", c)
	}
	want := map[string]string{
		"log-level":          "flag",
		"name":               "env NETSY_NAME",
		"quorum":             "file " + file + ":4",
		"s3-path-style":      "file " + file + ":5",
		"heartbeat-interval": "file " + file + ":6",
		"data-dir":           "default",
		"config-file":        "flag",
	}
	for name, src := range want {
		if got := s[name].Source.String(); got != src {
			t.Errorf("%s: source %q, want %q", name, got, src)
		}
	}
}

func TestConfigFileFromEnv(t *testing.T) {
	file := writeFile(t, "name: n1\n")
	c, s, err := parseSettings(t, nil, map[string]string{"NETSY_CONFIG_FILE": file})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "n1" || s["config-file"].Source.String() != "env NETSY_CONFIG_FILE" {
		t.Fatalf("name %q, config-file source %v", c.Name, s["config-file"].Source)
	}
}

func TestConfigFileErrors(t *testing.T) {
	cases := []struct{ name, content, want string }{
		{"unknown key", "name: a\n\nlisten-client-urls: http://x\n", `:3: unknown key "listen-client-urls"`},
		{"dashes", "--name: a\n", `:1: unknown key "--name": write the flag name without dashes (name)`},
		{"caller's own flag", "config-file: other.yaml\n", `:1: key "config-file": a config file cannot name another`},
		{"duplicate", "name: a\nquorum: 1\nname: b\n", `:3: key "name" is already set on line 1`},
		{"list", "name:\n  - a\n  - b\n", `:1: name: want a single value`},
		{"null", "name:\n", `:1: name: want a single value`},
		{"bad value", "log-level: info\nquorum: many\n", `:2: quorum: "many"`},
		{"bad duration", "elector-lease: forever\n", `:1: elector-lease: "forever"`},
		{"not a mapping", "- name\n", `:1: want a mapping of flag names to values`},
		{"not yaml", "name: [a\n", "yaml"},
		{"invalid after merge", "quorum: -7\n", "--quorum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, tc.content)
			_, _, err := parseSettings(t, []string{"--config-file", file}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	_, _, err := parseSettings(t, []string{"--config-file", filepath.Join(t.TempDir(), "missing.yaml")}, nil)
	if err == nil || !strings.Contains(err.Error(), "--config-file") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestEmptyConfigFile(t *testing.T) {
	file := writeFile(t, "# nothing set\n")
	c, _, err := parseSettings(t, []string{"--config-file", file}, nil)
	if err != nil || c != Default() {
		t.Fatalf("empty file: %+v %v", c, err)
	}
}

// The printed settings are themselves a config file that gives the same
// configuration.
func TestWriteSettingsRoundTrip(t *testing.T) {
	fs := flag.NewFlagSet("netsy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c1, list, err := ParseSettings(fs, []string{
		"--name", "n1", "--quorum", "2", "--s3-path-style", "--tls-min-version", "1.2",
		"--elector-lease", "9s", "--elector-renew", "3s", "--advertise-peer", "",
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteSettings(&buf, list); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, line := range []string{"name: n1 # flag", "quorum: 2 # flag", "s3-path-style: true # flag",
		`tls-min-version: "1.2" # flag`, "data-dir: ./netsy-data # default", `cert-file: "" # default`} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	c2, _, err := parseSettings(t, []string{"--config-file", writeFile(t, out)}, nil)
	if err != nil {
		t.Fatalf("printed settings as a config file: %v\n%s", err, out)
	}
	// The default node id is the host name either way.
	if c1 != c2 {
		t.Fatalf("round trip:\n%+v\n%+v", c1, c2)
	}
}
