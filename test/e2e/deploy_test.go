//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// The deployment artifacts (deploy/systemd, the Dockerfile and
// scripts/build-static.sh, deploy/kubernetes) are what an operator runs
// netsy with; these tests hold them to the binary they deploy.

// repoFile reads a file of the repository.
func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// setting is one line of netsy --print-config: a value and its source.
type setting struct{ value, source string }

// printConfig runs netsy args... --print-config with exactly env as its
// environment (nothing of the test's leaks in: a NETSY_* variable there
// would change the result) and returns the settings it printed. A refused
// configuration fails the test with netsy's reason.
func printConfig(t *testing.T, env []string, args ...string) map[string]setting {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, procutil.BuildNetsy(t), append(args, "--print-config")...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("netsy %s --print-config: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(stdout.Bytes(), &doc); err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		t.Fatalf("--print-config is not one YAML mapping (%v):\n%s", err, stdout.String())
	}
	m := doc.Content[0]
	settings := map[string]setting{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		settings[k.Value] = setting{value: v.Value, source: strings.TrimPrefix(v.LineComment, "# ")}
	}
	return settings
}

// acceptedExposure names the checks of systemd-analyze security that
// deploy/systemd/netsy.service leaves open on purpose, each with why. Every
// other check must pass: a hardening option dropped or misspelt fails the
// test by the name systemd gives it.
var acceptedExposure = map[string]string{
	"PrivateNetwork":                        "netsy serves the network",
	"RestrictAddressFamilies_AF_INET_INET6": "the client, peer and HTTP ports and object storage are TCP",
	"RestrictAddressFamilies_AF_UNIX":       "allowed by the unit: glibc's name service modules reach nscd or systemd-resolved over a Unix socket",
	"IPAddressDeny":                         "clients and peers come from addresses the unit cannot know",
	"PrivateUsers":                          "not set by the unit: the node runs as its own system user",
	"PrivateMounts":                         "not set by the unit (ProtectSystem=strict already gives it a read-only view)",
	"RootDirectoryOrRootImage":              "the unit runs the installed binary in the host's root",
	"DeviceAllow":                           "ProtectClock=yes leaves /dev/rtc readable",
	"SystemCallFilter_resources":            "@system-service includes @resources (setrlimit for LimitNOFILE, ioprio)",
}

// unitExposure is the overall exposure systemd-analyze security gives the
// unit, in tenths as its --threshold takes it (1.5, "OK", on systemd 252);
// a weaker unit scores higher and fails.
const unitExposure = "15"

// TestSystemdUnit checks deploy/systemd/netsy.service with systemd's own
// tools, on a copy whose ExecStart runs the netsy binary under test:
// systemd-analyze verify has no complaint at all (an unknown or misspelt
// key or value is only a warning to systemd, so any output fails), the
// hardening the unit claims holds under systemd-analyze security (exposure
// at most unitExposure, every check passing but acceptedExposure), and
// netsy accepts ExecStart's flags with --data-dir the unit's state
// directory.
func TestSystemdUnit(t *testing.T) {
	skipUnlessNetsy(t)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: `make tools` installs it (Debian package systemd)")
	}
	const installed = "/usr/local/bin/netsy"
	unit := string(repoFile(t, "deploy/systemd/netsy.service"))
	directives := map[string][]string{}
	for _, line := range strings.Split(unit, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			directives[k] = append(directives[k], v)
		}
	}
	if len(directives["ExecStart"]) != 1 {
		t.Fatalf("the unit has %d ExecStart lines, want 1", len(directives["ExecStart"]))
	}
	execStart := strings.Fields(directives["ExecStart"][0])
	if execStart[0] != installed || strings.ContainsAny(directives["ExecStart"][0], `"'\$%`) {
		t.Fatalf("ExecStart=%s: want %s with plain flags (the header installs it there; the test splits on spaces)",
			directives["ExecStart"][0], installed)
	}
	netsy := procutil.BuildNetsy(t)
	file := filepath.Join(t.TempDir(), "netsy.service")
	if err := os.WriteFile(file, []byte(strings.Replace(unit, "ExecStart="+installed, "ExecStart="+netsy, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	analyzeRun := func(args ...string) (stdout, stderr []byte, err error) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, analyze, args...)
		var e bytes.Buffer
		cmd.Stderr = &e
		stdout, err = cmd.Output()
		return stdout, e.Bytes(), err
	}

	t.Run("verify", func(t *testing.T) {
		stdout, stderr, err := analyzeRun("verify", file)
		if err != nil || len(bytes.TrimSpace(stdout)) > 0 || len(bytes.TrimSpace(stderr)) > 0 {
			t.Fatalf("systemd-analyze verify: %v\n%s%s", err, stdout, stderr)
		}
	})

	t.Run("security", func(t *testing.T) {
		out, stderr, err := analyzeRun("security", "--offline=yes", "--threshold="+unitExposure, "--json=short", file)
		var checks []struct {
			Set         bool   `json:"set"`
			Name        string `json:"name"`
			JSONField   string `json:"json_field"`
			Description string `json:"description"`
		}
		if jerr := json.Unmarshal(out, &checks); jerr != nil || len(checks) == 0 {
			t.Fatalf("systemd-analyze security: %v, %v\n%s%s", err, jerr, out, stderr)
		}
		for _, c := range checks {
			if _, ok := acceptedExposure[c.JSONField]; !c.Set && !ok {
				t.Errorf("%s (%s): %s", c.Name, c.JSONField, c.Description)
			}
		}
		if err != nil {
			t.Errorf("systemd-analyze security --threshold=%s: %v (the unit is more exposed than it was)", unitExposure, err)
		}
	})

	t.Run("flags", func(t *testing.T) {
		if got := directives["StateDirectory"]; len(got) != 1 || got[0] != "netsy" {
			t.Fatalf("StateDirectory=%v, want netsy (/var/lib/netsy)", got)
		}
		args := execStart[1:]
		for i, a := range args {
			// The config file is the operator's; an empty one stands in.
			if a == "--config-file" && i+1 < len(args) {
				empty := filepath.Join(t.TempDir(), "netsy.yaml")
				if err := os.WriteFile(empty, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				args[i+1] = empty
			}
		}
		settings := printConfig(t, nil, args...)
		if got := settings["data-dir"]; got != (setting{"/var/lib/netsy", "flag"}) {
			t.Errorf("data-dir %+v, want /var/lib/netsy from the flag: the StateDirectory", got)
		}
	})
}
