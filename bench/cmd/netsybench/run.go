package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// config is everything one benchmark run needs, filled from flags.
type config struct {
	// Targets are the server variants, one column each; the last is the
	// baseline every ratio divides by.
	Targets    []variant
	Labels     []string
	Workloads  []workload
	Scale      float64
	Total      int // overrides every tool workload's total when > 0
	Runs       int
	MemKeys    int
	MemValSize int
	Settle     time.Duration
	// Profile names the workloads (or groups) whose runs are profiled.
	Profile        []string
	ProfileSeconds int
	RunTimeout     time.Duration
	ExtraArgs      map[kind][]string
	// FailoverRuns is how many times each failover workload moves the
	// role within one run of it.
	FailoverRuns int
	// PITRRevisions is the history the pitr rows load, before -scale.
	PITRRevisions int
	// ScaleKeys is how many keys the scale rows load, before -scale, and
	// ScaleValSize their values' size; ScaleSettle is the wait after the
	// load and after the restart before RSS and the data directories are
	// read.
	ScaleKeys    int
	ScaleValSize int
	ScaleSettle  time.Duration

	bins    binaries
	minio   *minioServer
	dataDir string // fresh server directories go here
	rawDir  string // tool output, server logs, profiles
	stamp   string
	notes   *[]string
}

func (c *config) notef(format string, args ...any) {
	*c.notes = append(*c.notes, fmt.Sprintf(format, args...))
}

// profiled reports whether the servers are profiled while w runs.
func (c *config) profiled(w *workload) bool {
	return w.tool() && (slices.Contains(c.Profile, w.Name) || slices.Contains(c.Profile, w.Group))
}

func (c *config) total(w *workload) int {
	if c.Total > 0 {
		return c.Total
	}
	n := int(float64(w.Total) * c.Scale)
	return max(n, 50)
}

// measurement is what one run of one workload on one target produced, per
// row (the memory workload yields several rows).
type measurement struct {
	Value   float64  `json:"value"`
	P50     *float64 `json:"p50_secs,omitempty"`
	P99     *float64 `json:"p99_secs,omitempty"`
	Errors  int      `json:"errors,omitempty"`
	Secs    float64  `json:"secs,omitempty"`
	Summary *summary `json:"summary,omitempty"`
	// Puts and Entries are netsy's objwal counters over the workload (from
	// /metrics before and after): chunks uploaded and entries they carried.
	Puts    *float64 `json:"objwal_puts,omitempty"`
	Entries *float64 `json:"objwal_entries,omitempty"`
	// MinIOSeqPut is, on a workload with MinIOBaseline run on a
	// sync-mode MinIO target, MinIO's own sequential conditional-PUT rate
	// measured right after the workload.
	MinIOSeqPut *seqPut `json:"minio_seq_put,omitempty"`
	// Samples are a failover workload's times, one per repetition; Value
	// is their median.
	Samples []float64 `json:"samples_secs,omitempty"`
	// Ops is how many operations the measured part did, counted as Value
	// counts them (requests; events received on the watch rows; puts
	// loaded on the rss row of the memory workload).
	Ops float64 `json:"ops,omitempty"`
	// CPUSecs is the user + system CPU time the target's server
	// processes spent together over the measured part (every node of a
	// cluster), from /proc/PID/stat; MinIOCPUSecs is MinIO's over the
	// same time, on targets that use it.
	CPUSecs      *float64 `json:"cpu_secs,omitempty"`
	MinIOCPUSecs *float64 `json:"minio_cpu_secs,omitempty"`
	Extra        any      `json:"extra,omitempty"`
}

// cpuPer1k is the servers' CPU seconds per 1000 operations.
func (m measurement) cpuPer1k() *float64 { return cpuPer1k(m.CPUSecs, m.Ops) }

// minioCPUPer1k is MinIO's CPU seconds per 1000 operations.
func (m measurement) minioCPUPer1k() *float64 { return cpuPer1k(m.MinIOCPUSecs, m.Ops) }

// rowSpec names and describes a row before its numbers exist.
type rowSpec struct {
	Name    string
	Group   string
	Metric  string // unit of Value: "ops/s", "MiB", "s"
	Latency string // percentile shown as a latency ratio
	Goal    *goal
	// Desc says what a failover row measures.
	Desc string
}

func (c *config) rowSpecs(w *workload) []rowSpec {
	if w.DataScale {
		cluster := slices.ContainsFunc(c.Targets, variant.cluster)
		bucket := slices.ContainsFunc(c.Targets, func(v variant) bool { return v.MinIO })
		return scaleSpecs(w, c.scaleKeys(), cluster, bucket)
	}
	if w.PITR {
		var out []rowSpec
		for _, name := range pitrRows(c.pitrRevisions()) {
			out = append(out, rowSpec{Name: name, Group: w.Group, Metric: "s", Desc: w.Desc})
		}
		return out
	}
	if w.Failover != nil {
		return []rowSpec{{Name: w.Name, Group: w.Group, Metric: "s", Goal: w.Goal, Desc: w.Desc}}
	}
	if !w.Memory {
		return []rowSpec{{Name: w.Name, Group: w.Group, Metric: "ops/s", Latency: w.Latency, Goal: w.Goal}}
	}
	load := fmt.Sprintf("%s×%s", countLabel(c.MemKeys), sizeLabel(c.MemValSize))
	return []rowSpec{
		{Name: "rss " + load, Group: w.Group, Metric: "RSS MiB", Goal: &goal{Metric: "value", Op: "<=", Bound: 1.0}},
		{Name: "restart " + load, Group: w.Group, Metric: "s to serve"},
		{Name: "rss after restart", Group: w.Group, Metric: "RSS MiB"},
	}
}

func countLabel(n int) string {
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

func sizeLabel(n int) string {
	if n%1024 == 0 {
		return strconv.Itoa(n/1024) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}

// runAll runs every workload runs times, alternating which target goes
// first so that drift of the machine during the run cancels out. It
// returns, per row name, the measurements of each target.
func runAll(ctx context.Context, c *config, log io.Writer) (map[string][][]measurement, error) {
	results := map[string][][]measurement{}
	n := len(c.Targets)
	for r := range c.Runs {
		for i := range c.Workloads {
			w := &c.Workloads[i]
			// Rotate which target goes first, and reverse every other
			// workload, so drift of the machine spreads over all targets.
			order := make([]int, n)
			for k := range order {
				order[k] = (k + i + r) % n
			}
			if (i+r)%2 == 1 {
				slices.Reverse(order)
			}
			for _, t := range order {
				if err := ctx.Err(); err != nil {
					return results, err
				}
				fmt.Fprintf(log, "run %d/%d  %-18s on %-8s ... ", r+1, c.Runs, w.Name, c.Labels[t])
				start := time.Now()
				ms, err := runOne(ctx, c, w, t, r)
				if errors.Is(err, errNoEquivalent) {
					fmt.Fprintf(log, "skipped\n")
					if r == 0 {
						c.notef("%s on %s: %v", w.Name, c.Labels[t], err)
					}
					continue
				}
				if err != nil {
					fmt.Fprintf(log, "FAILED after %.1fs\n", time.Since(start).Seconds())
					if ctx.Err() != nil {
						return results, ctx.Err()
					}
					c.notef("%s on %s (run %d) failed: %v", w.Name, c.Labels[t], r+1, err)
					continue
				}
				if w.MinIOBaseline && c.Targets[t].MinIO && c.Targets[t].SyncUploads {
					baselineInto(ctx, c, w, t, r, ms)
				}
				var parts []string
				for _, spec := range c.rowSpecs(w) {
					m, ok := ms[spec.Name]
					if !ok {
						continue
					}
					if results[spec.Name] == nil {
						results[spec.Name] = make([][]measurement, n)
					}
					results[spec.Name][t] = append(results[spec.Name][t], m)
					if len(m.Samples) > 0 {
						parts = append(parts, fmt.Sprintf("median %.1f ms, max %.1f ms of %d", m.Value*1000, slices.Max(m.Samples)*1000, len(m.Samples)))
						continue
					}
					part := fmt.Sprintf("%s %s", fmtNum(m.Value), spec.Metric)
					if w.DataScale {
						// Several rows share a metric: say which.
						_, what, _ := strings.Cut(spec.Name, " ")
						part = what + " " + part
					}
					parts = append(parts, part)
					if cpu := m.cpuPer1k(); cpu != nil {
						parts = append(parts, fmt.Sprintf("CPU %s s/1k", fmtNum(*cpu)))
					}
					if epp := m.entriesPerPut(); epp != nil && c.Targets[t].SyncUploads {
						parts = append(parts, fmt.Sprintf("%.1f entries/PUT", *epp))
					}
					if b := m.MinIOSeqPut; b != nil {
						parts = append(parts, fmt.Sprintf("MinIO alone %.0f PUT/s (p50 %.2f ms): %.2f×", b.PerSec, b.P50*1000, *m.minioRatio()))
					}
				}
				fmt.Fprintf(log, "%s (%.1fs)\n", strings.Join(parts, ", "), time.Since(start).Seconds())
			}
		}
	}
	return results, nil
}

// baselineInto measures MinIO's own sequential conditional-PUT rate with
// as many PUTs as workload w just made on target t, and stores it in w's
// measurement. It runs after the target's servers are stopped, so MinIO
// has the machine to itself and the harness's client; a failure is noted
// and leaves the row without a ratio.
func baselineInto(ctx context.Context, c *config, w *workload, t, run int, ms map[string]measurement) {
	m, ok := ms[w.Name]
	if !ok {
		return
	}
	tag := fmt.Sprintf("%s-%s-r%d-seqput", safeName(w.Name), safeName(c.Labels[t]), run+1)
	b, err := c.minio.seqPuts(ctx, tag, c.total(w))
	if err != nil {
		c.notef("MinIO sequential PUT baseline after %s on %s (run %d): %v", w.Name, c.Labels[t], run+1, err)
		return
	}
	m.MinIOSeqPut = b
	ms[w.Name] = m
}

// runOne starts a fresh deployment of target t (one server or a
// cluster), runs workload w against it and stops it again.
func runOne(ctx context.Context, c *config, w *workload, t, run int) (map[string]measurement, error) {
	v := c.Targets[t]
	switch {
	case w.Memory && v.cluster():
		return nil, fmt.Errorf("%s runs on single servers only, not on %s", w.Name, c.Labels[t])
	case w.Failover != nil && !v.cluster():
		return nil, fmt.Errorf("%s needs a cluster target (netsy-cluster, etcd-cluster, t4-cluster), not %s", w.Name, c.Labels[t])
	}
	if err := w.runsOn(v.Kind); err != nil {
		return nil, err
	}
	tag := fmt.Sprintf("%s-%s-r%d", safeName(w.Name), safeName(c.Labels[t]), run+1)
	if w.PITR {
		return runPITR(ctx, c, t, tag)
	}
	dir := filepath.Join(c.dataDir, tag)
	profiling := c.profiled(w)
	d, cleanup, err := deploy(ctx, c, t, dir, tag, profiling)
	defer cleanup()
	if err != nil {
		return nil, err
	}
	if w.Memory {
		return runMemory(ctx, c, d, tag)
	}
	if w.DataScale {
		return runScale(ctx, c, d, tag)
	}
	if w.Failover != nil {
		m, err := w.Failover(ctx, c, d, c.FailoverRuns)
		if err != nil {
			return nil, err
		}
		if m.Errors > 0 {
			c.notef("%s on %s: %d probe puts failed (see the JSON for each repetition)", w.Name, c.Labels[t], m.Errors)
		}
		return map[string]measurement{w.Name: m}, nil
	}
	endpoint := d.endpoint()
	if w.Setup != nil {
		if err := w.Setup(ctx, endpoint); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
	}
	if w.Client != nil {
		meter := startCPU(d, c.minio, v.MinIO)
		m, err := w.Client(ctx, endpoint, c.total(w))
		if err != nil {
			return nil, err
		}
		m.Ops = m.Value * m.Secs
		c.measureCPU(tag, meter, d, &m)
		return map[string]measurement{w.Name: m}, nil
	}
	var profDone chan error
	if profiling {
		// In a cluster the leader's profile is the one that shows the
		// write path: its file name says so.
		leader := -1
		if v.cluster() {
			if leader, err = d.leader(ctx); err != nil {
				c.notef("%s: no leader to mark among the profiles: %v", tag, err)
			}
		}
		profDone = make(chan error, len(d.nodes))
		for i, srv := range d.nodes {
			path := filepath.Join(c.rawDir, tag+".cpu.pprof")
			if srv.Name != "" {
				path = filepath.Join(c.rawDir, tag+"."+srv.Name+roleSuffix(v.Kind, i == leader)+".cpu.pprof")
			}
			go func() {
				if err := fetchProfile(ctx, srv, c.ProfileSeconds, path); err != nil {
					profDone <- fmt.Errorf("%s: %w", srv.label(), err)
					return
				}
				profDone <- fmt.Errorf("CPU profile of %s on %s: %s", w.Name, srv.label(), path)
			}()
		}
	}
	var before objwalCounters
	if v.Kind == kindNetsy {
		if before, err = d.scrapeObjwal(ctx); err != nil {
			c.notef("%s: %v", tag, err)
		}
	}
	meter := startCPU(d, c.minio, v.MinIO)
	sums, err := runTool(ctx, c, endpoint, w.toolArgs(c.total(w)), filepath.Join(c.rawDir, tag+".txt"))
	cpu, minioCPU, cpuErr := meter.stop(d)
	// Each profile fetch reports one line for the notes (a failure or
	// where the profile is).
	for range cap(profDone) {
		c.notef("profile of %s: %v", w.Name, <-profDone)
	}
	if err != nil {
		return nil, err
	}
	if !d.running() {
		return nil, fmt.Errorf("a server exited during the run; log tails:\n%s", d.logTails(20))
	}
	s := pickSummary(sums, w.Section)
	if w.Combine {
		s = combine(sums)
	}
	if s == nil {
		return nil, fmt.Errorf("no %q summary in the tool output (see %s)", w.Section, filepath.Join(c.rawDir, tag+".txt"))
	}
	m := measurement{Value: s.RPS, Errors: s.ErrorCount(), Secs: s.Total, Summary: s, Ops: s.ops()}
	if w.Combine {
		m.Ops = 0
		for _, part := range sums {
			m.Ops += part.ops()
		}
	}
	if cpuErr != nil {
		c.notef("%s: no CPU time: %v", tag, cpuErr)
	}
	m.CPUSecs, m.MinIOCPUSecs = cpu, minioCPU
	if v.Kind == kindNetsy && before.ok {
		if after, err := d.scrapeObjwal(ctx); err != nil {
			c.notef("%s: %v", tag, err)
		} else {
			puts, entries := after.puts-before.puts, after.entries-before.entries
			m.Puts, m.Entries = &puts, &entries
		}
	}
	if v, ok := s.Pct("50"); ok {
		m.P50 = &v
	}
	if v, ok := s.Pct("99"); ok {
		m.P99 = &v
	}
	if m.Errors > 0 {
		c.notef("%s on %s: %d failed requests: %v", w.Name, c.Labels[t], m.Errors, s.Errors)
	}
	return map[string]measurement{w.Name: m}, nil
}

// measureCPU stops meter and stores the CPU times in m; a failure is
// noted and leaves m without them.
func (c *config) measureCPU(tag string, meter *cpuMeter, d *deployment, m *measurement) {
	cpu, minioCPU, err := meter.stop(d)
	if err != nil {
		c.notef("%s: no CPU time: %v", tag, err)
	}
	m.CPUSecs, m.MinIOCPUSecs = cpu, minioCPU
}

// roleSuffix marks the profile of a cluster's leader: "-primary" for
// netsy, "-leader" for etcd and t4.
func roleSuffix(k kind, leader bool) string {
	switch {
	case !leader:
		return ""
	case k == kindNetsy:
		return "-primary"
	}
	return "-leader"
}

// scrapeObjwal sums the objwal counters over every node: in a cluster,
// whichever node was Primary uploaded.
func (d *deployment) scrapeObjwal(ctx context.Context) (objwalCounters, error) {
	var sum objwalCounters
	for _, s := range d.nodes {
		c, err := scrapeObjwal(ctx, s.HTTPAddr)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", s.label(), err)
		}
		sum.puts += c.puts
		sum.entries += c.entries
	}
	sum.ok = true
	return sum, nil
}

// runTool runs etcd's benchmark tool against endpoint, saving its output,
// and returns the parsed summaries.
func runTool(ctx context.Context, c *config, endpoint string, args []string, outPath string) ([]*summary, error) {
	return runToolWithin(ctx, c, c.RunTimeout, endpoint, args, outPath)
}

// runToolWithin is runTool with its own limit instead of -run-timeout.
func runToolWithin(ctx context.Context, c *config, timeout time.Duration, endpoint string, args []string, outPath string) ([]*summary, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	full := append([]string{"--endpoints", endpoint, "--precise"}, args...)
	f, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "$ %s %s\n", c.bins.Benchmark, strings.Join(full, " "))
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bins.Benchmark, full...)
	cmd.Stdout = io.MultiWriter(&stdout, f)
	// gRPC's connection chatter goes to stderr; keep it in the file only.
	cmd.Stderr = f
	cmd.WaitDelay = 5 * time.Second
	done, err := procutil.StartTied(cmd)
	if err != nil {
		return nil, err
	}
	if err := <-done; err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("benchmark %s: %w (timeout %v)", args[0], ctx.Err(), timeout)
		}
		return nil, fmt.Errorf("benchmark %s: %w (output in %s)", args[0], err, outPath)
	}
	return parseBenchmark(stdout.String()), nil
}

// runMemory loads MemKeys keys, reads the server's RSS, restarts it with
// SIGTERM and times until a Get succeeds, then reads RSS again. The rss
// row carries the CPU time of the load.
func runMemory(ctx context.Context, c *config, d *deployment, tag string) (map[string]measurement, error) {
	srv := d.nodes[0]
	load := fmt.Sprintf("%s×%s", countLabel(c.MemKeys), sizeLabel(c.MemValSize))
	n := strconv.Itoa(c.MemKeys)
	args := []string{"put", "--clients", "64", "--conns", "8", "--key-size", "8", "--sequential-keys",
		"--val-size", strconv.Itoa(c.MemValSize), "--total", n, "--key-space-size", n}
	meter := startCPU(d, c.minio, d.v.MinIO)
	sums, err := runTool(ctx, c, srv.ClientAddr, args, filepath.Join(c.rawDir, tag+".load.txt"))
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	loaded := measurement{Ops: float64(c.MemKeys)}
	c.measureCPU(tag, meter, d, &loaded)
	if s := pickSummary(sums, ""); s == nil || s.ErrorCount() > 0 {
		return nil, fmt.Errorf("load had failed requests (see %s)", filepath.Join(c.rawDir, tag+".load.txt"))
	}
	if got, err := countKeys(ctx, srv.ClientAddr); err != nil {
		return nil, fmt.Errorf("count after load: %w", err)
	} else if got != int64(c.MemKeys) {
		c.notef("%s: %d keys after loading %d", tag, got, c.MemKeys)
	}
	rss, status, err := settledRSS(ctx, c, srv)
	if err != nil {
		return nil, err
	}
	loaded.Value, loaded.Extra = rss, status
	out := map[string]measurement{"rss " + load: loaded}

	stopStart := time.Now()
	if err := srv.Stop(); err != nil {
		c.notef("%s: %v", tag, err)
	}
	stopSecs := time.Since(stopStart).Seconds()
	cli, err := newClient(srv.ClientAddr)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	start := time.Now()
	if err := srv.Launch(); err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	served, err := waitServing(ctx, cli, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("restart: %w\nlog tail:\n%s", err, logTail(srv.LogPath, 20))
	}
	out["restart "+load] = measurement{Value: served.Sub(start).Seconds(), Extra: map[string]float64{"stop_secs": stopSecs}}
	if got, err := countKeys(ctx, srv.ClientAddr); err != nil {
		return nil, fmt.Errorf("count after restart: %w", err)
	} else if got != int64(c.MemKeys) {
		c.notef("%s: %d keys after restart, %d loaded", tag, got, c.MemKeys)
	}
	rss, status, err = settledRSS(ctx, c, srv)
	if err != nil {
		return nil, err
	}
	out["rss after restart"] = measurement{Value: rss, Extra: status}
	return out, nil
}

// settledRSS waits for the settle period (so both servers get the same
// chance to return garbage to the OS) and reads VmRSS in MiB.
func settledRSS(ctx context.Context, c *config, srv *server) (float64, map[string]int64, error) {
	select {
	case <-time.After(c.Settle):
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	}
	pid := srv.PID()
	if pid == 0 {
		return 0, nil, errors.New("server is not running")
	}
	st, err := procStatus(pid)
	if err != nil {
		return 0, nil, err
	}
	keep := map[string]int64{}
	for _, k := range []string{"VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"} {
		if v, ok := st[k]; ok {
			keep[k+"_kib"] = v
		}
	}
	return float64(st["VmRSS"]) / 1024, keep, nil
}

// fetchProfile saves a CPU profile of seconds length taken while the
// workload runs.
func fetchProfile(ctx context.Context, srv *server, seconds int, path string) error {
	base := srv.PprofBase()
	hc := &http.Client{Timeout: time.Duration(seconds)*time.Second + time.Minute}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/profile?seconds=%d", base, seconds), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s/profile: %s (does the server serve net/http/pprof?) %s", base, resp.Status, bytes.TrimSpace(body))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

func (m measurement) entriesPerPut() *float64 {
	if m.Puts == nil || m.Entries == nil || *m.Puts == 0 {
		return nil
	}
	r := *m.Entries / *m.Puts
	return &r
}

// minioRatio is the run's ops/s over MinIO's sequential conditional-PUT
// rate measured with it, nil without one.
func (m measurement) minioRatio() *float64 {
	if m.MinIOSeqPut == nil || m.MinIOSeqPut.PerSec == 0 {
		return nil
	}
	r := m.Value / m.MinIOSeqPut.PerSec
	return &r
}

// objwalCounters are the two counters of netsy's /metrics that give
// entries per PUT.
type objwalCounters struct {
	puts, entries float64
	ok            bool
}

func scrapeObjwal(ctx context.Context, httpAddr string) (objwalCounters, error) {
	var c objwalCounters
	ms, err := scrapeMetrics(ctx, httpAddr)
	if err != nil {
		return c, err
	}
	var gotPuts, gotEntries bool
	c.puts, gotPuts = ms["netsy_objwal_puts_total"]
	c.entries, gotEntries = ms["netsy_objwal_entries_uploaded_total"]
	if !gotPuts || !gotEntries {
		return c, errors.New("/metrics has no netsy_objwal_puts_total / netsy_objwal_entries_uploaded_total")
	}
	c.ok = true
	return c, nil
}

// scrapeMetrics reads a Prometheus text exposition from httpAddr's
// /metrics (netsy's and t4's).
func scrapeMetrics(ctx context.Context, httpAddr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics maps each sample of a Prometheus text exposition, named
// by its series as written ("name" or "name{label=\"v\"}"), to its value.
// Comments and samples whose value does not parse are skipped; label
// values holding spaces are not expected from the servers scraped here.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// "series value [timestamp]"
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		out[f[0]] = v
	}
	return out, sc.Err()
}
