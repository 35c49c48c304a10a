//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// The monitoring artifacts: deploy/prometheus/netsy-rules.yaml and
// deploy/grafana/netsy-dashboard.json (symlinks to the Helm chart's files,
// which are the real ones).
const (
	rulesFile     = "deploy/prometheus/netsy-rules.yaml"
	rulesTestFile = "deploy/prometheus/netsy-rules_test.yaml"
	dashboardFile = "deploy/grafana/netsy-dashboard.json"
)

// promtool is scripts/build-promtool.sh's binary (built on first use).
func promtool(t *testing.T) string {
	t.Helper()
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-promtool.sh"))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/build-promtool.sh: %v\n%s", err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out))
}

// TestMonitoringRules: the alert rules pass `promtool check rules`, and
// their unit tests pass: each etcd alert fires on the series a Netsy node
// exports for its condition and stays silent on a healthy cluster, as do
// Netsy's own alerts. The symlinks in deploy/ lead to the chart's files.
func TestMonitoringRules(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for link, real := range map[string]string{
		rulesFile:     "deploy/helm/netsy/files/netsy-rules.yaml",
		dashboardFile: "deploy/helm/netsy/files/netsy-dashboard.json",
	} {
		dest, err := os.Readlink(filepath.Join(root, link))
		if err != nil || filepath.IsAbs(dest) || filepath.Join(filepath.Dir(link), dest) != real {
			t.Errorf("%s: want a relative symlink to %s, have %q (%v)", link, real, dest, err)
		}
	}
	tool := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
	} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Each upstream etcd alert has a test that expects it to fire.
	tests := string(repoFile(t, rulesTestFile))
	for _, alert := range []string{"etcdNoLeader", "etcdHighNumberOfLeaderChanges", "etcdHighFsyncDurations",
		"etcdHighNumberOfFailedProposals", "etcdDatabaseQuotaLowSpace"} {
		if !regexp.MustCompile(`alertname: ` + alert + `\n\s+exp_alerts:\n\s+- exp_labels`).MatchString(tests) {
			t.Errorf("%s: no test expects it to fire", alert)
		}
	}
}

// TestMonitoringMetricsExported: every metric name a dashboard panel, a
// dashboard variable or an alert rule reads is exported by a running
// 3-node cluster on MinIO (the union of its nodes' /metrics: some are
// exported by the Primary or by a replica only).
func TestMonitoringMetricsExported(t *testing.T) {
	skipUnlessNetsy(t)
	used := monitoringMetricNames(t)
	if len(used) < 30 {
		t.Fatalf("only %d metric names found in the dashboard and rules: the tokenizer is broken: %v", len(used), used)
	}
	srv := miniotest.Start(t)
	// The dashboard's client-latency panel reads the handling-time
	// histogram, which netsy, as etcd, exports only at extensive (the
	// chart sets it when it deploys the dashboard).
	c := startCluster(t, 3, srv, "--metrics", "extensive")
	// The Elector moves off the Primary: every role is then held by the
	// node that keeps it, and the replicas heartbeat a remote Elector.
	c.waitState(30*time.Second, func(v clusterview.View) bool {
		return v.Primary != nil && v.Elector != nil && v.Primary.NodeID != v.Elector.NodeID
	})
	cli := c.client(c.running()...)
	for i := range 5 {
		mustPut(t, cli, fmt.Sprintf("monitoring/%d", i), "v")
	}
	var missing []string
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		exported := map[string]bool{}
		for _, s := range c.nodes {
			for name := range scrapeFamilies(t, s) {
				exported[name] = true
			}
		}
		missing = missing[:0]
		for _, name := range used {
			if !exported[name] && !exported[histogramBase(name)] {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 || time.Since(start) > 10*time.Second {
			break
		}
	}
	if len(missing) > 0 {
		t.Fatalf("metrics the dashboard or the rules read that no node exports: %v", missing)
	}
}

// scrapeFamilies parses s's /metrics into its metric families.
func scrapeFamilies(t *testing.T, s *procutil.Server) map[string]bool {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(metricsText(t, s)))
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	out := map[string]bool{}
	for name, mf := range mfs {
		if len(mf.Metric) > 0 {
			out[name] = true
		}
	}
	return out
}

// histogramBase is the histogram a series name belongs to (m for
// m_bucket, m_sum, m_count), or name itself.
func histogramBase(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base
		}
	}
	return name
}

// monitoringMetricNames is every metric name in the rules' expressions
// and in the dashboard's queries, sorted.
func monitoringMetricNames(t *testing.T) []string {
	t.Helper()
	var exprs []string
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(repoFile(t, rulesFile), &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(repoFile(t, dashboardFile), &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*(.+?)\s*,\s*\w+\s*\)$`)
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			exprs = append(exprs, m[1])
		}
	}
	names := map[string]bool{}
	for _, e := range exprs {
		for _, n := range promqlMetricNames(e) {
			names[n] = true
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var (
	// promqlStrings, promqlMatchers and promqlRanges are the parts of an
	// expression that hold no metric name: string literals, label
	// matchers, range and subquery brackets.
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	// promqlLabelLists are the label lists of grouping and vector matching.
	promqlLabelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// promqlIdent is an identifier, with what follows it (a call's
	// parenthesis tells a function from a metric name).
	promqlIdent = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	// promqlNumber keeps identifiers inside numbers (1e3, 0x1f) out.
	promqlNumber = regexp.MustCompile(`\b\d[0-9.eE+\-xXa-fA-F]*`)
)

// promqlKeywords are PromQL's words that are not metric names.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "atan2": true, "inf": true, "nan": true,
}

// promqlMetricNames is a small tokenizer for the PromQL these files use:
// it drops strings, label matchers, ranges and label lists, then keeps the
// identifiers that are neither keywords nor called as functions.
func promqlMetricNames(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, " ")
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlRanges.ReplaceAllString(e, " ")
	e = promqlLabelLists.ReplaceAllString(e, " ")
	e = promqlNumber.ReplaceAllString(e, " ")
	var out []string
	for _, m := range promqlIdent.FindAllStringSubmatch(e, -1) {
		name := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[0]), "("))
		if m[1] != "" || promqlKeywords[strings.ToLower(name)] {
			continue
		}
		out = append(out, name)
	}
	return out
}

// TestPromQLMetricNames pins the tokenizer on the shapes the files use.
func TestPromQLMetricNames(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	for expr, want := range map[string][]string{
		`etcd_server_has_leader{job=~".*netsy.*"} == 0`:                                                      {"etcd_server_has_leader"},
		`increase((max without (instance) (a_total{job=~"x"}) or 0*absent(a_total{job=~"x"}))[15m:1m]) >= 4`: {"a_total", "a_total"},
		`histogram_quantile(0.99, sum by (le, grpc_method) (rate(h_bucket{grpc_type="unary"}[5m]))) > 0.5`:   {"h_bucket"},
		`sum by (job) (p{job=~"$job"} == bool 3) < 1`:                                                        {"p"},
		`rate(a[$__rate_interval]) / rate(b_count[$__rate_interval])`:                                        {"a", "b_count"},
		`(last_over_time(x[5m]) / last_over_time(y[5m]))*100 > 95`:                                           {"x", "y"},
		`sum by (instance, op) (rate(r{result="error",op='a,b'}[5m])) > 1e3`:                                 {"r"},
	} {
		if got := promqlMetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", expr, got, want)
		}
	}
}
