//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// The Helm chart in deploy/helm/netsy is the one source of the Kubernetes
// manifests: deploy/kubernetes is its default render (`make manifests`).
// These tests run helm on it and hold what it renders to netsy and to
// kube-apiserver.

const (
	chartDir = "deploy/helm/netsy"
	// helmKubeVersion is the Kubernetes version the chart is rendered for
	// (a `go install`ed helm assumes v1.20, below the chart's kubeVersion):
	// the kube-apiserver the dry run runs against.
	helmKubeVersion = "v1.34.4"
	// allOnValues turns every optional feature on, with a separate Secret
	// for each TLS role; it is rendered as release allOnRelease.
	allOnValues  = "ci/all-on-values.yaml"
	allOnRelease = "kv"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBin returns the helm binary, running scripts/build-helm.sh (a no-op
// once it is built; `make tools` builds it ahead) once per process.
func helmBin(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		root, err := procutil.RepoRoot()
		if err != nil {
			helmErr = err
			return
		}
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-helm.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmErr = fmt.Errorf("scripts/build-helm.sh: %w\n%s", err, stderr.Bytes())
			return
		}
		helmPath = strings.TrimSpace(string(out))
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// runHelm runs helm args... in the repository and returns its standard
// output and error.
func runHelm(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root, rerr := procutil.RepoRoot()
	if rerr != nil {
		t.Fatal(rerr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	cmd.Dir = root
	// No user's helm settings (repositories, plugins, cache) take part.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// renderChart is `helm template release` of the chart with the chart's
// values files given (relative to the chart) and the --set flags in sets.
func renderChart(t *testing.T, release string, values []string, sets ...string) []byte {
	t.Helper()
	out, stderr, err := runHelm(t, renderArgs(release, values, sets...)...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(renderArgs(release, values, sets...), " "), err, stderr)
	}
	return []byte(out)
}

func renderArgs(release string, values []string, sets ...string) []string {
	args := []string{"template", release, chartDir, "--kube-version", helmKubeVersion}
	for _, v := range values {
		args = append(args, "--values", filepath.Join(chartDir, v))
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// anyObjects decodes a YAML stream into its objects, by "Kind/name",
// untyped: for comparing whole objects and reading kinds k8sObject does
// not model.
func anyObjects(t *testing.T, what string, data []byte) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if o == nil {
			continue
		}
		kind, _ := o["kind"].(string)
		name, _ := dig(o, "metadata", "name").(string)
		key := kind + "/" + name
		if _, dup := objs[key]; dup {
			t.Fatalf("%s: two objects %s", what, key)
		}
		objs[key] = o
	}
	return objs
}

// dig returns the value at the path of map keys in v, or nil.
func dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// TestHelmChart checks the chart with helm and netsy: helm lint --strict
// passes with the default values, with every optional feature on
// (ci/all-on-values.yaml) and with TLS off (ci/plaintext-values.yaml); the
// default render is, object for object, what deploy/kubernetes holds (`make
// manifests-check` compares the text); the TestKubernetesConfig checks hold
// for every pod of the all-on render (five pods, a separate Secret for the
// server, peer and client-CA certificates, extra config keys) and of the
// plaintext one; the ServiceMonitor scrapes /metrics on the http port of
// the headless Service only; the PrometheusRule holds the groups of
// files/netsy-rules.yaml and the dashboard ConfigMap, labelled
// grafana_dashboard "1", files/netsy-dashboard.json as it is; a config key
// the chart sets itself, a misspelt value and an out-of-range one are
// refused. The server-side dry run of the all-on
// render is dryRunHelmChart, run by TestTLSCluster's kube-apiserver.
func TestHelmChart(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	skipUnlessNetsy(t)

	t.Run("lint", func(t *testing.T) {
		for _, values := range [][]string{nil, {allOnValues}, {"ci/plaintext-values.yaml"}} {
			args := []string{"lint", "--strict", chartDir, "--kube-version", helmKubeVersion}
			for _, v := range values {
				args = append(args, "--values", filepath.Join(chartDir, v))
			}
			if out, stderr, err := runHelm(t, args...); err != nil {
				t.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
			}
		}
	})

	t.Run("defaults are deploy/kubernetes", func(t *testing.T) {
		rendered := anyObjects(t, "helm template netsy", renderChart(t, "netsy", nil))
		root, err := procutil.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		committed := map[string]map[string]any{}
		for _, f := range files {
			// The placeholder Secrets are the operator's, not the chart's.
			if filepath.Base(f) == "secrets.yaml" {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for k, o := range anyObjects(t, f, data) {
				committed[k] = o
			}
		}
		if !reflect.DeepEqual(sortedKeys(rendered), sortedKeys(committed)) {
			t.Fatalf("the chart renders %v, deploy/kubernetes holds %v: run make manifests", sortedKeys(rendered), sortedKeys(committed))
		}
		for k, o := range rendered {
			if !reflect.DeepEqual(o, committed[k]) {
				t.Errorf("%s differs between the chart and deploy/kubernetes: run make manifests", k)
			}
		}
	})

	t.Run("all on", func(t *testing.T) {
		out := renderChart(t, allOnRelease, []string{allOnValues})
		name := allOnRelease + "-netsy"
		objs := map[string]k8sObject{}
		addK8sObjects(t, objs, "all-on render", out)
		// The Secrets the chart's README tells the operator to make.
		var values struct {
			Replicas int `yaml:"replicas"`
			TLS      struct {
				ServerSecret   string `yaml:"serverSecret"`
				PeerSecret     string `yaml:"peerSecret"`
				ClientCASecret string `yaml:"clientCASecret"`
			} `yaml:"tls"`
		}
		if err := yaml.Unmarshal(repoFile(t, filepath.Join(chartDir, allOnValues)), &values); err != nil {
			t.Fatal(err)
		}
		podCerts := map[string]string{"ca.crt": "-"}
		for i := range values.Replicas {
			podCerts[fmt.Sprintf("%s-%d.crt", name, i)] = "-"
			podCerts[fmt.Sprintf("%s-%d.key", name, i)] = "-"
		}
		for _, s := range []string{values.TLS.ServerSecret, values.TLS.PeerSecret} {
			objs["Secret/"+s] = k8sObject{Kind: "Secret", Metadata: k8sMeta{Name: s}, Data: podCerts}
		}
		objs["Secret/"+values.TLS.ClientCASecret] = k8sObject{Kind: "Secret", Metadata: k8sMeta{Name: values.TLS.ClientCASecret},
			Data: map[string]string{"ca.crt": "-"}}
		if got := objs["StatefulSet/"+name].Spec.Replicas; got != values.Replicas || got == 3 {
			t.Fatalf("the all-on StatefulSet has %d replicas, want the values' %d (not the default 3)", got, values.Replicas)
		}
		// Each certificate setting reads the Secret of its role.
		wantSecrets := map[string]string{
			"cert-file": values.TLS.ServerSecret, "key-file": values.TLS.ServerSecret,
			"peer-cert-file": values.TLS.PeerSecret, "peer-key-file": values.TLS.PeerSecret,
			"peer-trusted-ca-file": values.TLS.PeerSecret, "trusted-ca-file": values.TLS.ClientCASecret,
		}
		for pod, got := range checkPodConfigs(t, objs, name) {
			if !reflect.DeepEqual(got, wantSecrets) {
				t.Errorf("%s: the certificate settings read Secrets %v, want %v", pod, got, wantSecrets)
			}
		}

		all := anyObjects(t, "all-on render", out)
		for _, want := range []string{"ConfigMap/" + name + "-config", "ConfigMap/" + name + "-dashboard", "Service/" + name,
			"Service/" + name + "-client", "StatefulSet/" + name, "PodDisruptionBudget/" + name, "ServiceMonitor/" + name,
			"PrometheusRule/" + name} {
			if all[want] == nil {
				t.Errorf("the all-on render has no %s: %v", want, sortedKeys(all))
			}
		}

		// The ServiceMonitor selects the release's Services and scrapes the
		// port that only the headless one (every pod) has.
		sm := all["ServiceMonitor/"+name]
		sel, _ := dig(sm, "spec", "selector", "matchLabels").(map[string]any)
		endpoints, _ := dig(sm, "spec", "endpoints").([]any)
		if len(sel) == 0 || len(endpoints) != 1 {
			t.Fatalf("ServiceMonitor: selector %v, endpoints %v", sel, endpoints)
		}
		port, _ := dig(endpoints[0], "port").(string)
		if p := dig(endpoints[0], "path"); p != "/metrics" {
			t.Errorf("ServiceMonitor scrapes path %v, want /metrics", p)
		}
		scraped := 0
		for _, svc := range []string{"Service/" + name, "Service/" + name + "-client"} {
			labels, _ := dig(all[svc], "metadata", "labels").(map[string]any)
			selected := true
			for k, v := range sel {
				selected = selected && labels[k] == v
			}
			ports, _ := dig(all[svc], "spec", "ports").([]any)
			for _, p := range ports {
				if selected && dig(p, "name") == port {
					scraped++
					if svc != "Service/"+name || dig(p, "port") != 2381 {
						t.Errorf("ServiceMonitor scrapes %s port %v, want the headless Service's http port 2381", svc, dig(p, "port"))
					}
				}
			}
		}
		if scraped != 1 {
			t.Errorf("ServiceMonitor port %q matches %d Service ports, want 1 (the headless Service's)", port, scraped)
		}
		if c := objs["StatefulSet/"+name].Spec.Template.Spec.Containers; len(c) != 1 || c[0].port(port) != 2381 {
			t.Errorf("ServiceMonitor port %q is not the container's http port 2381", port)
		}

		var rules map[string]any
		if err := yaml.Unmarshal(repoFile(t, filepath.Join(chartDir, "files", "netsy-rules.yaml")), &rules); err != nil {
			t.Fatal(err)
		}
		if got, want := dig(all["PrometheusRule/"+name], "spec", "groups"), rules["groups"]; want == nil || !reflect.DeepEqual(got, want) {
			t.Errorf("PrometheusRule groups differ from files/netsy-rules.yaml:\n%v\n%v", got, want)
		}

		dash := all["ConfigMap/"+name+"-dashboard"]
		if l := dig(dash, "metadata", "labels", "grafana_dashboard"); l != "1" {
			t.Errorf("dashboard ConfigMap label grafana_dashboard=%#v, want \"1\"", l)
		}
		got, _ := dig(dash, "data", "netsy-dashboard.json").(string)
		want := string(repoFile(t, filepath.Join(chartDir, "files", "netsy-dashboard.json")))
		if got != want || !json.Valid([]byte(got)) {
			t.Errorf("dashboard ConfigMap's netsy-dashboard.json is not files/netsy-dashboard.json as it is (valid JSON: %v)", json.Valid([]byte(got)))
		}
	})

	t.Run("plaintext", func(t *testing.T) {
		objs := map[string]k8sObject{}
		addK8sObjects(t, objs, "plaintext render", renderChart(t, "netsy", []string{"ci/plaintext-values.yaml"}))
		if _, ok := objs["PodDisruptionBudget/netsy"]; ok {
			t.Error("podDisruptionBudget.enabled=false still renders a PodDisruptionBudget")
		}
		checkPodConfigs(t, objs, "netsy")
	})

	t.Run("refuses values it would ignore", func(t *testing.T) {
		for set, want := range map[string]string{
			// The chart writes quorum itself: a second one would be a
			// duplicate key of netsy.yaml.
			"config.quorum=0": "config.quorum",
			// values.schema.json: a misspelt key would otherwise be ignored
			// in silence.
			"tls.enable=false": "'enable' not allowed",
			"quorum=-2":        "/quorum",
		} {
			args := renderArgs("netsy", nil, set)
			if _, stderr, err := runHelm(t, args...); err == nil || !strings.Contains(stderr, want) {
				t.Errorf("helm %s: %v, want a refusal naming %s\n%s", strings.Join(args, " "), err, want, stderr)
			}
		}
	})
}

// dryRunHelmChart installs the monitoring CRDs' stand-ins
// (testdata/monitoring-crds.yaml) in kube-apiserver k and checks the chart's
// all-on render with `kubectl create --dry-run=server --validate=strict`:
// every object is accepted. create, not apply: helm, like create, adds no
// last-applied-configuration annotation, which would copy the dashboard's
// JSON into an annotation and hit the annotations' 256 KiB limit. A ServiceMonitor with a misspelt field is
// refused, so the stand-in schemas do check.
func dryRunHelmChart(t *testing.T, k *kubeAPIServer) {
	t.Helper()
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	k.kubectl("apply", "-f", filepath.Join(root, "test", "e2e", "testdata", "monitoring-crds.yaml"))
	k.kubectl("wait", "--for=condition=Established", "--timeout=30s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

	rendered := renderChart(t, allOnRelease, []string{allOnValues})
	file := filepath.Join(t.TempDir(), "all-on.yaml")
	if err := os.WriteFile(file, rendered, 0o644); err != nil {
		t.Fatal(err)
	}
	out := k.kubectl("create", "--dry-run=server", "--validate=strict", "-f", file)
	objs := anyObjects(t, "all-on render", rendered)
	for _, key := range sortedKeys(objs) {
		o := objs[key]
		// kubectl names an object resource.group/name ("statefulset.apps/kv-netsy",
		// "configmap/kv-netsy-config" for the core group).
		res := strings.ToLower(o["kind"].(string))
		if group, _, ok := strings.Cut(o["apiVersion"].(string), "/"); ok {
			res += "." + group
		}
		if want := res + "/" + dig(o, "metadata", "name").(string) + " created (server dry run)\n"; !strings.Contains(out, want) {
			t.Errorf("kubectl create --dry-run=server of the chart: no %q:\n%s", want, out)
		}
	}

	bad := strings.Replace(string(rendered), "    - port: http\n", "    - prot: http\n", 1)
	if bad == string(rendered) {
		t.Fatal("the all-on render has no ServiceMonitor endpoint `- port: http` to misspell")
	}
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	msg, err := k.command(ctx, "create", "--dry-run=server", "--validate=strict", "-f", file).CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "prot") {
		t.Errorf("a ServiceMonitor endpoint with a misspelt field passed the dry run (%v):\n%s", err, msg)
	}
}
