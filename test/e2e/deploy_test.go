//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/netsy-io/netsy/internal/clusterview"
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
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
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

// dockerStage is one stage of a Dockerfile: its base image, its name (AS)
// and its instructions, comments dropped and continued lines joined.
type dockerStage struct {
	base, name string
	instrs     []dockerInstr
}

type dockerInstr struct{ cmd, args string }

// dockerStages splits a Dockerfile into its stages.
func dockerStages(t *testing.T, text string) []dockerStage {
	t.Helper()
	var stages []dockerStage
	var line strings.Builder
	for _, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(l, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(l)
		cmd, args, _ := strings.Cut(line.String(), " ")
		line.Reset()
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		switch {
		case cmd == "FROM":
			f := strings.Fields(args)
			s := dockerStage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		case len(stages) == 0:
			if cmd != "ARG" {
				t.Fatalf("Dockerfile: %s before the first FROM", cmd)
			}
		default:
			s := &stages[len(stages)-1]
			s.instrs = append(s.instrs, dockerInstr{cmd, args})
		}
	}
	return stages
}

// only returns the args of the stage's one instruction cmd.
func (s dockerStage) only(t *testing.T, cmd string) string {
	t.Helper()
	var found []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			found = append(found, in.args)
		}
	}
	if len(found) != 1 {
		t.Fatalf("Dockerfile: the final stage has %d %s instructions, want 1: %q", len(found), cmd, found)
	}
	return found[0]
}

// image is what the Dockerfile says about the container it builds.
type image struct {
	uid, gid   uint32
	workdir    string
	entrypoint []string
	// binaries maps each file scripts/build-static.sh made to its path in
	// the image.
	binaries map[string]string
}

// readDockerfile checks the Dockerfile against the binaries
// scripts/build-static.sh made (built, the names in it): the final stage is
// FROM scratch with a numeric non-root USER that owns its WORKDIR, it
// holds exactly those binaries, copied from the stage that ran the script,
// and its ENTRYPOINT is netsy among them.
func readDockerfile(t *testing.T, built []string) image {
	t.Helper()
	stages := dockerStages(t, string(repoFile(t, "Dockerfile")))
	if len(stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	final := stages[len(stages)-1]
	if final.base != "scratch" {
		t.Fatalf("Dockerfile: the final stage is FROM %s, want scratch (static binaries in an empty image)", final.base)
	}
	var img image
	user := final.only(t, "USER")
	u, g, ok := strings.Cut(user, ":")
	uid, uerr := strconv.ParseUint(u, 10, 32)
	gid, gerr := strconv.ParseUint(g, 10, 32)
	if !ok || uerr != nil || gerr != nil || uid == 0 || gid == 0 {
		t.Fatalf("Dockerfile: USER %s, want a numeric non-root uid:gid (scratch has no /etc/passwd to look a name up in)", user)
	}
	img.uid, img.gid = uint32(uid), uint32(gid)
	img.workdir = final.only(t, "WORKDIR")
	if err := json.Unmarshal([]byte(final.only(t, "ENTRYPOINT")), &img.entrypoint); err != nil || len(img.entrypoint) == 0 {
		t.Fatalf("Dockerfile: ENTRYPOINT %s is not a JSON list (%v)", final.only(t, "ENTRYPOINT"), err)
	}

	// COPY --from=STAGE SRC DST puts the stage's SRC at DST in the image.
	f := strings.Fields(final.only(t, "COPY"))
	from, ok := strings.CutPrefix(f[0], "--from=")
	if !ok || len(f) != 3 {
		t.Fatalf("Dockerfile: COPY %s, want COPY --from=STAGE SRC DST", strings.Join(f, " "))
	}
	src, dst := f[1], f[2]
	var run string
	for _, s := range stages {
		if s.name != from {
			continue
		}
		for _, in := range s.instrs {
			if in.cmd == "RUN" && strings.Contains(in.args, "scripts/build-static.sh") {
				run = in.args
			}
		}
	}
	m := regexp.MustCompile(`scripts/build-static\.sh\s+(\S+)`).FindStringSubmatch(run)
	if m == nil {
		t.Fatalf("Dockerfile: stage %q has no RUN scripts/build-static.sh DIR", from)
	}
	out := m[1]
	img.binaries = map[string]string{}
	chowned := false
	for _, cmd := range strings.Split(run, "&&") {
		args := strings.Fields(cmd)
		switch {
		case len(args) >= 3 && args[0] == "cp":
			into := args[len(args)-1]
			for _, a := range args[1 : len(args)-1] {
				name, ok := strings.CutPrefix(a, out+"/")
				if !ok {
					continue
				}
				rel, ok := strings.CutPrefix(path.Clean(into)+"/", path.Clean(src)+"/")
				if !ok {
					t.Fatalf("Dockerfile: %s is copied to %s, outside %s that COPY --from=%s takes", a, into, src, from)
				}
				img.binaries[name] = path.Join(dst, rel, name)
			}
		case len(args) == 3 && args[0] == "chown":
			chowned = chowned || args[1] == user && path.Clean(args[2]) == path.Join(src, img.workdir)
		}
	}
	if got := sortedKeys(img.binaries); !slices.Equal(got, built) {
		t.Fatalf("Dockerfile: copies %v from %s, scripts/build-static.sh made %v", got, out, built)
	}
	if !chowned {
		t.Fatalf("Dockerfile: no chown %s %s: the image's user cannot write its WORKDIR %s", user, path.Join(src, img.workdir), img.workdir)
	}
	if img.entrypoint[0] != img.binaries["netsy"] {
		t.Fatalf("Dockerfile: ENTRYPOINT %q, want netsy (%s)", img.entrypoint, img.binaries["netsy"])
	}
	return img
}

// TestContainerImage runs scripts/build-static.sh, which the Dockerfile
// builds the image with, and checks what it makes: every binary is static
// (no interpreter, no dynamic section: it runs in an empty image) and
// reports the commit it was given; the Dockerfile ships exactly these
// binaries (readDockerfile). There is no container runtime here, so the
// image is laid out as the Dockerfile says in a directory, and, as root,
// netsy runs chrooted there as the image's user with the image's working
// directory and an empty environment: it serves a write, netsyctl reaches
// it, it stops cleanly on SIGTERM, and everything it wrote belongs to that
// user.
func TestContainerImage(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	skipUnlessNetsy(t)
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "build-static.sh"), out, "e2e-static")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-static.sh: %v\n%s", err, msg)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var built []string
	for _, e := range entries {
		built = append(built, e.Name())
	}
	if !slices.Contains(built, "netsy") || !slices.Contains(built, "netsyctl") {
		t.Fatalf("scripts/build-static.sh made %v, want netsy and netsyctl", built)
	}

	for _, name := range built {
		f, err := elf.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s has a %s program header: not static", name, p.Type)
			}
		}
		if s := f.SectionByType(elf.SHT_DYNAMIC); s != nil {
			t.Errorf("%s has a dynamic section %s: not static", name, s.Name)
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v (%v)", name, libs, err)
		}
		f.Close()
	}
	if v, err := exec.Command(filepath.Join(out, "netsy"), "--version").Output(); err != nil || !strings.Contains(string(v), "git commit: e2e-static\n") {
		t.Errorf("netsy --version of the static build: %v\n%s", err, v)
	}

	img := readDockerfile(t, built)

	t.Run("runs as the image user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("chroot and switching to the image's user need root (CI runs as root)")
		}
		rootfs := t.TempDir()
		if err := os.Chmod(rootfs, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, at := range img.binaries {
			data, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(rootfs, at)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		workdir := filepath.Join(rootfs, img.workdir)
		if err := os.MkdirAll(workdir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(workdir, int(img.uid), int(img.gid)); err != nil {
			t.Fatal(err)
		}
		inImage := func(argv ...string) *exec.Cmd {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = img.workdir
			// What a container runtime sets in an image that sets nothing.
			cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs,
				Credential: &syscall.Credential{Uid: img.uid, Gid: img.gid, Groups: []uint32{}}}
			return cmd
		}

		clientAddr, peerAddr, httpAddr := procutil.FreeAddr(t), procutil.FreeAddr(t), procutil.FreeAddr(t)
		node := inImage(append(img.entrypoint, "--client-addr", clientAddr, "--peer-addr", peerAddr, "--http-addr", httpAddr)...)
		logFile := filepath.Join(t.TempDir(), "netsy.log")
		log, err := os.Create(logFile)
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		node.Stdout, node.Stderr = log, log
		done, err := procutil.StartTied(node)
		if err != nil {
			t.Fatalf("start %v in the image: %v", img.entrypoint, err)
		}
		exited := false
		t.Cleanup(func() {
			if !exited {
				_ = node.Process.Kill()
				<-done
			}
		})
		logTail := func() string { b, _ := os.ReadFile(logFile); return string(b) }
		hc := &http.Client{Timeout: 2 * time.Second}
		for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
			if ready, _ := procutil.Probe(t.Context(), hc, "http://"+httpAddr+"/readyz", procutil.KindNetsy); ready {
				break
			}
			select {
			case err := <-done:
				exited = true
				t.Fatalf("netsy exited in the image: %v\n%s", err, logTail())
			default:
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("netsy in the image not ready after a minute:\n%s", logTail())
			}
		}

		cli := newClientEndpoints(t, []string{clientAddr})
		mustPut(t, cli, "image/key", "value")
		if resp, err := cli.Get(opCtx(t), "image/key"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "value" {
			t.Fatalf("get image/key: %v %v", resp, err)
		}
		if ctl, ok := img.binaries["netsyctl"]; ok {
			state, err := inImage(ctl, "cluster-state", "--peer-endpoints", peerAddr, "-o", "json").CombinedOutput()
			var v clusterview.View
			if err != nil || json.Unmarshal(state, &v) != nil || v.Primary == nil {
				t.Fatalf("netsyctl cluster-state in the image: %v\n%s", err, state)
			}
		}

		if err := node.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			exited = true
			if err != nil {
				t.Fatalf("netsy in the image after SIGTERM: %v\n%s", err, logTail())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("netsy in the image still running 30 s after SIGTERM:\n%s", logTail())
		}

		files := 0
		err = filepath.WalkDir(workdir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if st := info.Sys().(*syscall.Stat_t); st.Uid != img.uid || st.Gid != img.gid {
				t.Errorf("%s belongs to %d:%d, not the image's user %d:%d", p, st.Uid, st.Gid, img.uid, img.gid)
			}
			files++
			return nil
		})
		if err != nil || files < 2 {
			t.Fatalf("walking the image's %s: %v, %d entries", img.workdir, err, files)
		}
	})
}

// k8sObject is the part of a deploy/kubernetes manifest the test reads.
type k8sObject struct {
	Kind     string  `yaml:"kind"`
	Metadata k8sMeta `yaml:"metadata"`
	// Data and StringData: a ConfigMap's or a Secret's keys.
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Replicas int `yaml:"replicas"`
		Template struct {
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata k8sMeta `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type k8sMeta struct {
	Name string `yaml:"name"`
}

type k8sContainer struct {
	Name string   `yaml:"name"`
	Args []string `yaml:"args"`
	Env  []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

// port returns the number of the container port called name, or 0.
func (c k8sContainer) port(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// k8sObjects reads every manifest of deploy/kubernetes, by "Kind/name".
func k8sObjects(t *testing.T) map[string]k8sObject {
	t.Helper()
	root, err := procutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/kubernetes/*.yaml: %v", err)
	}
	objs := map[string]k8sObject{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		addK8sObjects(t, objs, f, data)
	}
	return objs
}

// addK8sObjects adds the objects of the YAML stream data (from what, for
// errors) to objs, by "Kind/name". Empty documents (a stream that opens
// with "---", as helm's output does) are skipped.
func addK8sObjects(t *testing.T, objs map[string]k8sObject, what string, data []byte) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if o.Kind != "" {
			objs[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
}

// k8sVar is a $(NAME) reference as Kubernetes expands it in args and env.
var k8sVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestKubernetesConfig runs netsy --print-config as each pod of
// deploy/kubernetes/statefulset.yaml would start netsy: its args and
// environment with $(POD_NAME) and $(POD_NAMESPACE) expanded as Kubernetes
// does (namespace default), and --config-file the netsy.yaml the
// ConfigMap mounted there holds. netsy must accept the configuration; every
// key of the file must be in force (a flag of the same name would make the
// file's line dead); the node id is the pod name; every certificate file is
// a key of the Secret mounted where it points; the data directory is the
// pod's volume claim and each listener's port is the container port of its
// name.
func TestKubernetesConfig(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	skipUnlessNetsy(t)
	checkPodConfigs(t, k8sObjects(t), "netsy")
}

// checkPodConfigs holds every pod of the StatefulSet called name in objs
// to what TestKubernetesConfig says. It returns, for each pod, the Secret
// each certificate setting's file comes from (flag name to Secret name).
func checkPodConfigs(t *testing.T, objs map[string]k8sObject, name string) map[string]map[string]string {
	t.Helper()
	fileSecrets := map[string]map[string]string{}
	sts, ok := objs["StatefulSet/"+name]
	if !ok {
		t.Fatalf("no StatefulSet %s among %v", name, sortedKeys(objs))
	}
	var c k8sContainer
	for _, ct := range sts.Spec.Template.Spec.Containers {
		if ct.Name == "netsy" {
			c = ct
		}
	}
	if c.Name == "" {
		t.Fatal("the StatefulSet has no container netsy")
	}
	// mounted returns the object (ConfigMap or Secret) and key the file at p
	// comes from.
	mounted := func(t *testing.T, p string) (obj k8sObject, key string) {
		t.Helper()
		for _, m := range c.VolumeMounts {
			var ok bool
			if m.SubPath != "" {
				key, ok = m.SubPath, p == m.MountPath
			} else {
				key, ok = strings.CutPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
			}
			if !ok {
				continue
			}
			for _, v := range sts.Spec.Template.Spec.Volumes {
				switch {
				case v.Name != m.Name:
				case v.ConfigMap != nil:
					return objs["ConfigMap/"+v.ConfigMap.Name], key
				case v.Secret != nil:
					return objs["Secret/"+v.Secret.SecretName], key
				}
			}
			t.Fatalf("%s is mounted from volume %s, which is no ConfigMap or Secret", p, m.Name)
		}
		return k8sObject{}, ""
	}
	// claimAt reports whether a volume claim is mounted at p.
	claimAt := func(p string) bool {
		for _, m := range c.VolumeMounts {
			for _, v := range sts.Spec.VolumeClaimTemplates {
				if m.MountPath == p && m.Name == v.Metadata.Name {
					return true
				}
			}
		}
		return false
	}

	for i := range sts.Spec.Replicas {
		pod := fmt.Sprintf("%s-%d", sts.Metadata.Name, i)
		fileSecrets[pod] = map[string]string{}
		t.Run(pod, func(t *testing.T) {
			vars := map[string]string{}
			expand := func(s string) string {
				s = k8sVar.ReplaceAllStringFunc(s, func(ref string) string {
					if v, ok := vars[ref[2:len(ref)-1]]; ok {
						return v
					}
					return ref
				})
				if strings.Contains(s, "$(") {
					t.Fatalf("%q: a $(...) Kubernetes leaves as it is", s)
				}
				return s
			}
			var env []string
			for _, e := range c.Env {
				v := expand(e.Value)
				if e.ValueFrom != nil {
					fieldRef := map[string]string{"metadata.name": pod, "metadata.namespace": "default"}
					if e.ValueFrom.FieldRef == nil || fieldRef[e.ValueFrom.FieldRef.FieldPath] == "" {
						t.Fatalf("env %s: only metadata.name and metadata.namespace fieldRefs are known to the test", e.Name)
					}
					v = fieldRef[e.ValueFrom.FieldRef.FieldPath]
				}
				vars[e.Name] = v
				env = append(env, e.Name+"="+v)
			}
			// envFrom brings the S3 credentials, which are no setting.
			args := make([]string, len(c.Args))
			var file string
			for j, a := range c.Args {
				args[j] = expand(a)
				if p, ok := strings.CutPrefix(args[j], "--config-file="); ok {
					cm, key := mounted(t, p)
					content, ok := cm.Data[key]
					if cm.Kind != "ConfigMap" || !ok {
						t.Fatalf("--config-file=%s: no ConfigMap key is mounted there (%s %q, key %q)", p, cm.Kind, cm.Metadata.Name, key)
					}
					file = filepath.Join(t.TempDir(), "netsy.yaml")
					if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
					args[j] = "--config-file=" + file
				}
			}
			if file == "" {
				t.Fatalf("the container's args have no --config-file=: %q", c.Args)
			}

			settings := printConfig(t, env, args...)
			var keys map[string]any
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(data, &keys); err != nil || len(keys) == 0 {
				t.Fatalf("netsy.yaml: %v, %d keys", err, len(keys))
			}
			for _, k := range sortedKeys(keys) {
				if s := settings[k]; !strings.HasPrefix(s.source, "file ") {
					t.Errorf("netsy.yaml's %s is not in force: %s = %q from %s", k, k, s.value, s.source)
				}
			}
			if s := settings["node-id"]; s.value != pod {
				t.Errorf("node-id %q (%s), want the pod name %s", s.value, s.source, pod)
			}
			for _, name := range sortedKeys(settings) {
				if p := settings[name].value; strings.HasSuffix(name, "-file") && p != "" {
					secret, key := mounted(t, p)
					_, inData := secret.Data[key]
					_, inStringData := secret.StringData[key]
					if secret.Kind != "Secret" || !inData && !inStringData {
						t.Errorf("--%s %s: no Secret key is mounted there (%s %q, key %q)", name, p, secret.Kind, secret.Metadata.Name, key)
					}
					fileSecrets[pod][name] = secret.Metadata.Name
				}
			}
			if !claimAt(settings["data-dir"].value) {
				t.Errorf("--data-dir %s is not where a volume claim is mounted", settings["data-dir"].value)
			}
			for flag, port := range map[string]string{"client-addr": "client", "peer-addr": "peer", "http-addr": "http"} {
				if _, p, err := net.SplitHostPort(settings[flag].value); err != nil || p != strconv.Itoa(c.port(port)) {
					t.Errorf("--%s %s: not on the container port named %s (%d)", flag, settings[flag].value, port, c.port(port))
				}
			}
		})
	}
	return fileSecrets
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
