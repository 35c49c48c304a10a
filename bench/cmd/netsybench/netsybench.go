package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

const usage = `netsybench runs etcd's benchmark tool against Netsy and etcd, alternating
between them per workload on fresh servers, and writes a side-by-side table
(markdown, JSON and CSV) under bench/results/, with the servers' CPU seconds
per 1000 operations. With -cluster it compares a 3-node Netsy cluster on
MinIO with a 3-node t4 on the same MinIO and a 3-member etcd cluster
instead: put, range and watch rows, and the failover rows (leader SIGKILL,
handoff).

Usage: go run ./bench/cmd/netsybench [flags]

Flags:
`

// Run parses flags, builds the servers, runs the benchmark and writes the
// report. It returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("netsybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var (
		targets    = fs.String("targets", "netsy,netsy-local,netsy-minio,etcd", "server variants to compare, `A,...,BASE`; every ratio is X / BASE (the last); e.g. etcd,etcd to check the harness")
		only       = fs.String("workloads", "all", "comma-separated workload names or groups (put, range, txn, watch, lease, memory, scale; failover on cluster targets; pitr)")
		clusterRun = fs.Bool("cluster", false, "compare clusters: -targets "+clusterTargets+" and -workloads "+clusterWorkloads+" unless given")
		failRuns   = fs.Int("failover-runs", 10, "repetitions within one run of each failover workload (median and max are over all of them)")
		quick      = fs.Bool("quick", false, "smoke run: scale 0.05, 5000 memory keys, 1s settle; the scale group only when named in -workloads")
		scale      = fs.Float64("scale", 1, "multiply every workload's default request total")
		total      = fs.Int("total", 0, "use this request total for every tool workload (overrides -scale)")
		runs       = fs.Int("runs", 1, "repeat every workload on each target; cells are medians")
		memKeys    = fs.Int("mem-keys", 100000, "keys loaded by the memory workload")
		memVal     = fs.Int("mem-val-size", 1024, "value size in bytes for the memory workload")
		settle     = fs.Duration("settle", 3*time.Second, "wait before reading RSS")
		profile    = fs.String("profile", "", "capture a CPU profile of each server (every node of a cluster, the leader's file marked) during these `workloads` (comma-separated names or groups)")
		profSecs   = fs.Int("profile-seconds", 5, "CPU profile length; keep it below the workload's run time")
		runTimeout = fs.Duration("run-timeout", 10*time.Minute, "limit for one benchmark tool run")
		outDir     = fs.String("out", "", "results directory (default <repo>/bench/results)")
		netsyBin   = fs.String("netsy-bin", "", "use this netsy binary instead of building ./cmd/netsy")
		netsyArgs  = fs.String("netsy-args", "", "extra flags for every netsy server (space-separated)")
		etcdArgs   = fs.String("etcd-args", "", "extra flags for every etcd server (space-separated)")
		t4Args     = fs.String("t4-args", "", "extra flags for every t4 node's `t4 run` (space-separated)")
		pitrRevs   = fs.Int("pitr-revisions", 1_000_000, "revisions of the history the pitr rows load (× -scale)")
		scaleKeys  = fs.Int("scale-keys", 1_000_000, "distinct keys the scale rows load (× -scale)")
		scaleVal   = fs.Int("scale-val-size", 256, "value size in bytes for the scale rows")
		scaleWait  = fs.Duration("scale-settle", 5*time.Second, "wait after the scale rows' load and restart before reading RSS and disk")
		list       = fs.Bool("list", false, "list workloads and targets and exit")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *list {
		for _, w := range workloads {
			desc := strings.Join(w.Args, " ")
			switch {
			case w.Memory:
				desc = "load keys, read RSS, SIGTERM + restart until a Get succeeds, read RSS again"
			case w.Client != nil:
				desc = "netsybench's own client (see bench/README.md)"
			case w.Failover != nil:
				desc = "cluster targets: " + w.Desc
			case w.PITR:
				desc = "netsy-minio: " + w.Desc
			case w.DataScale:
				desc = "load -scale-keys × -scale-val-size keys (put, 64 clients), read RSS and du of the data dirs, SIGTERM + restart until a Get succeeds, RSS again; single and cluster targets"
			}
			if w.MinIOBaseline {
				desc += "; on netsy-minio then MinIO's own sequential conditional-PUT rate (same count, 16 KiB bodies)"
			}
			fmt.Fprintf(stdout, "%-18s %-8s %s\n", w.Name, w.Group, desc)
		}
		for _, v := range variants {
			fmt.Fprintf(stdout, "target %-13s %s\n", v.Name, describeVariant(v))
		}
		return 0
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "netsybench: %v\n", err)
		return 1
	}

	c := &config{
		Scale: *scale, Total: *total, Runs: max(*runs, 1),
		MemKeys: *memKeys, MemValSize: *memVal, Settle: *settle,
		ProfileSeconds: *profSecs, RunTimeout: *runTimeout,
		ExtraArgs: map[kind][]string{kindNetsy: strings.Fields(*netsyArgs), kindEtcd: strings.Fields(*etcdArgs),
			kindT4: strings.Fields(*t4Args)},
		FailoverRuns:  max(*failRuns, 1),
		PITRRevisions: max(*pitrRevs, 1),
		ScaleKeys:     max(*scaleKeys, 1),
		ScaleValSize:  max(*scaleVal, 1),
		ScaleSettle:   *scaleWait,
		notes:         new([]string),
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *clusterRun {
		if !set["targets"] {
			*targets = clusterTargets
		}
		if !set["workloads"] {
			*only = clusterWorkloads
		}
	}
	if !set["targets"] && !*clusterRun && pitrOnly(*only) {
		*targets = pitrTargets
	}
	if *quick {
		if !set["failover-runs"] {
			c.FailoverRuns = 3
		}
		if !set["scale"] {
			c.Scale = 0.05
		}
		if !set["mem-keys"] {
			c.MemKeys = 5000
		}
		if !set["settle"] {
			c.Settle = time.Second
		}
		if !set["scale-settle"] {
			c.ScaleSettle = time.Second
		}
	}
	names := strings.Split(*targets, ",")
	if len(names) < 2 {
		return fail(fmt.Errorf("-targets wants at least two names, got %q", *targets))
	}
	seen := map[string]int{}
	for _, n := range names {
		v, err := lookupVariant(strings.TrimSpace(n))
		if err != nil {
			return fail(err)
		}
		label := v.Name
		if seen[v.Name]++; seen[v.Name] > 1 {
			label = fmt.Sprintf("%s(%d)", v.Name, seen[v.Name])
		}
		c.Targets = append(c.Targets, v)
		c.Labels = append(c.Labels, label)
	}
	var err error
	if c.Workloads, err = selectWorkloads(*only); err != nil {
		return fail(err)
	}
	if *quick && !set["workloads"] {
		c.Workloads = withoutScale(c.Workloads)
	}
	for _, p := range strings.Split(*profile, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		c.Profile = append(c.Profile, p)
		if !slices.ContainsFunc(c.Workloads, func(w workload) bool { return (w.Name == p || w.Group == p) && w.tool() }) {
			return fail(fmt.Errorf("-profile %q is not a selected tool workload or group", p))
		}
	}

	root, err := procutil.RepoRoot()
	if err != nil {
		return fail(err)
	}
	if *outDir == "" {
		*outDir = filepath.Join(root, "bench", "results")
	}
	started := time.Now()
	stamp := started.UTC().Format("20060102-150405")
	c.stamp = stamp
	c.rawDir = filepath.Join(*outDir, stamp)
	c.dataDir = filepath.Join(root, ".cache", "bench", "run-"+stamp)
	needCtl := slices.ContainsFunc(c.Workloads, func(w workload) bool { return w.PITR })
	if c.bins, err = buildBinaries(ctx, root, c.Targets, *netsyBin, needCtl, stderr); err != nil {
		return fail(err)
	}
	for _, d := range []string{c.rawDir, c.dataDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
	}
	defer os.RemoveAll(c.dataDir)
	c.minio = &minioServer{root: root, dir: filepath.Join(c.dataDir, "minio")}
	defer c.minio.stop()
	// Whatever happens below, no server outlives the harness.
	defer stopAllServers()
	rep := &report{
		Started:  started,
		Machine:  describeMachine(root, c.bins.Etcd, c.dataDir),
		Targets:  c.Labels,
		Variants: c.Targets,
		Settings: map[string]any{
			"scale": c.Scale, "runs": c.Runs, "mem_keys": c.MemKeys, "mem_val_size": c.MemValSize,
			"settle": c.Settle.String(),
		},
	}
	if c.bins.T4 != "" {
		rep.Machine.T4Version = t4Version(c.bins.T4)
	}
	if slices.ContainsFunc(c.Workloads, func(w workload) bool { return w.Failover != nil }) {
		rep.Settings["failover_runs"] = c.FailoverRuns
	}
	if needCtl {
		rep.Settings["pitr_revisions"] = c.pitrRevisions()
	}
	if slices.ContainsFunc(c.Workloads, func(w workload) bool { return w.DataScale }) {
		rep.Settings["scale_keys"] = c.scaleKeys()
		rep.Settings["scale_settle"] = c.ScaleSettle.String()
		rep.Settings["scale_val_size"] = c.ScaleValSize
	}
	if c.Total > 0 {
		rep.Settings["total"] = c.Total
	}
	if rep.Machine.DataFS == "tmpfs" {
		c.notef("data directory %s is on tmpfs: fsync costs nothing there", c.dataDir)
	}
	fmt.Fprintf(stderr, "netsybench: %s, %d workloads × %d runs; raw output in %s\n",
		strings.Join(c.Labels, " vs "), len(c.Workloads), c.Runs, c.rawDir)

	results, runErr := runAll(ctx, c, stderr)
	if runErr != nil {
		c.notef("run interrupted: %v; the table is partial", runErr)
	}
	rep.Finished = time.Now()
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.Rows = buildRows(c, results)
	rep.Notes = *c.notes

	md := rep.markdown()
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fail(err)
	}
	mdPath := filepath.Join(*outDir, stamp+".md")
	jsPath := filepath.Join(*outDir, stamp+".json")
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(jsPath, append(js, '\n'), 0o644); err != nil {
		return fail(err)
	}
	csvPath := filepath.Join(*outDir, stamp+".csv")
	if err := os.WriteFile(csvPath, []byte(rep.csv()), 0o644); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "\n%s\nWritten: %s, %s, %s\n", md, mdPath, jsPath, csvPath)
	if runErr != nil {
		return 1
	}
	return 0
}

// scriptDir runs a scripts/build-*.sh (a no-op once its tools are cached)
// and returns the directory it prints last.
func scriptDir(ctx context.Context, root, script string, stderr io.Writer) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", script))
	cmd.Dir = root
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/%s: %w", script, err)
	}
	var dir string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			dir = l
		}
	}
	if dir == "" {
		return "", fmt.Errorf("scripts/%s printed no directory", script)
	}
	return dir, nil
}

// buildBinaries builds etcd's tools and, when a target runs t4, t4 (each
// a no-op once cached) and, when a target runs netsy, the netsy binary
// into .cache/bench.
func buildBinaries(ctx context.Context, root string, targets []variant, netsyBin string, needCtl bool, stderr io.Writer) (binaries, error) {
	var b binaries
	dir, err := scriptDir(ctx, root, "build-etcd.sh", stderr)
	if err != nil {
		return b, err
	}
	b.Etcd = filepath.Join(dir, "etcd")
	b.Benchmark = filepath.Join(dir, "benchmark")

	needNetsy := slices.ContainsFunc(targets, func(v variant) bool { return v.Kind == kindNetsy })
	switch {
	case !needNetsy:
	case netsyBin != "":
		if b.Netsy, err = filepath.Abs(netsyBin); err != nil {
			return b, err
		}
	default:
		b.Netsy = filepath.Join(root, ".cache", "bench", "netsy")
		build := exec.CommandContext(ctx, "go", "build", "-o", b.Netsy, "./cmd/netsy")
		build.Dir = root
		if msg, err := build.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build ./cmd/netsy: %w\n%s\n(use -targets etcd,etcd to check the harness alone)", err, msg)
		}
	}
	if slices.ContainsFunc(targets, func(v variant) bool { return v.Kind == kindT4 }) {
		dir, err := scriptDir(ctx, root, "build-t4.sh", stderr)
		if err != nil {
			return b, err
		}
		b.T4 = filepath.Join(dir, "t4")
	}
	// The handoff row and the pitr rows run netsyctl as an operator would.
	if needCtl || slices.ContainsFunc(targets, func(v variant) bool { return v.Kind == kindNetsy && v.cluster() }) {
		b.Netsyctl = filepath.Join(root, ".cache", "bench", "netsyctl")
		build := exec.CommandContext(ctx, "go", "build", "-o", b.Netsyctl, "./cmd/netsyctl")
		build.Dir = root
		if msg, err := build.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build ./cmd/netsyctl: %w\n%s", err, msg)
		}
	}
	return b, nil
}
