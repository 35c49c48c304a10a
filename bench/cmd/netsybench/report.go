package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// side is one target's numbers for a row: the median over runs.
type side struct {
	Value  *float64 `json:"value,omitempty"`
	P50    *float64 `json:"p50_secs,omitempty"`
	P99    *float64 `json:"p99_secs,omitempty"`
	Errors int      `json:"errors,omitempty"`
	// EntriesPerPut is, for netsy, log entries per uploaded WAL chunk
	// over the workload.
	EntriesPerPut *float64 `json:"entries_per_put,omitempty"`
	// MinIOSeqPutRate and MinIOSeqPutP50 are MinIO's own sequential
	// conditional-PUT rate and median latency measured with the row (on
	// rows with MinIOBaseline of a sync-mode MinIO target), and
	// MinIOSeqPutRatio is Value over that rate; each is the median over
	// runs, the ratio taken within each run first.
	MinIOSeqPutRate  *float64 `json:"minio_seq_put_per_sec,omitempty"`
	MinIOSeqPutP50   *float64 `json:"minio_seq_put_p50_secs,omitempty"`
	MinIOSeqPutRatio *float64 `json:"minio_seq_put_ratio,omitempty"`
	// Max and Samples are set on failover rows: Value is the median of
	// every repetition of every run, Max the largest.
	Max     *float64 `json:"max,omitempty"`
	Samples int      `json:"samples,omitempty"`
	// CPUPer1k is the servers' CPU seconds (user + system, every process
	// of the target) per 1000 operations, MinIOCPUPer1k MinIO's; each the
	// median over runs of the per-run figure.
	CPUPer1k      *float64      `json:"cpu_secs_per_1k_ops,omitempty"`
	MinIOCPUPer1k *float64      `json:"minio_cpu_secs_per_1k_ops,omitempty"`
	Runs          []measurement `json:"runs"`
}

// versus is one target compared with the baseline on a row.
type versus struct {
	Target string `json:"target"`
	// Ratio is the target over the baseline of Value.
	Ratio *float64 `json:"ratio,omitempty"`
	// LatencyRatio is set on latency-type rows.
	LatencyRatio *float64 `json:"latency_ratio,omitempty"`
	// MaxRatio is set on failover rows: the ratio of the maxima.
	MaxRatio *float64 `json:"max_ratio,omitempty"`
	// CPURatio is the target's server CPU per 1000 operations over the
	// baseline's; below 1 is cheaper.
	CPURatio *float64 `json:"cpu_ratio,omitempty"`
	Met      *bool    `json:"met,omitempty"`
}

type row struct {
	Workload string `json:"workload"`
	Group    string `json:"group"`
	Metric   string `json:"metric"`
	// Sides holds one entry per target, in -targets order.
	Sides []side `json:"sides"`
	// Versus holds one entry per target but the last (the baseline).
	Versus     []versus `json:"versus"`
	LatencyPct string   `json:"latency_pct,omitempty"`
	Goal       *goal    `json:"goal,omitempty"`
	Desc       string   `json:"desc,omitempty"`
}

type report struct {
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Machine  machine        `json:"machine"`
	Targets  []string       `json:"targets"`
	Variants []variant      `json:"variants"`
	Settings map[string]any `json:"settings"`
	Rows     []row          `json:"rows"`
	Notes    []string       `json:"notes,omitempty"`
}

func buildRows(c *config, results map[string][][]measurement) []row {
	var rows []row
	n := len(c.Targets)
	for i := range c.Workloads {
		for _, spec := range c.rowSpecs(&c.Workloads[i]) {
			r := row{Workload: spec.Name, Group: spec.Group, Metric: spec.Metric, LatencyPct: spec.Latency, Goal: spec.Goal, Desc: spec.Desc}
			r.Sides = make([]side, n)
			if res := results[spec.Name]; res != nil {
				for t := range n {
					r.Sides[t] = aggregate(res[t])
				}
			}
			base := r.Sides[n-1]
			for t := range n - 1 {
				a := r.Sides[t]
				vs := versus{Target: c.Labels[t], Ratio: ratio(a.Value, base.Value), MaxRatio: ratio(a.Max, base.Max),
					CPURatio: ratio(a.CPUPer1k, base.CPUPer1k)}
				switch spec.Latency {
				case "50":
					vs.LatencyRatio = ratio(a.P50, base.P50)
				case "99":
					vs.LatencyRatio = ratio(a.P99, base.P99)
				}
				if g := r.Goal; g != nil {
					got := vs.Ratio
					switch g.Metric {
					case "p50", "p99":
						got = vs.LatencyRatio
					case "median+max":
						// Both must meet the bound: check the worse.
						got = nil
						if vs.Ratio != nil && vs.MaxRatio != nil {
							w := max(*vs.Ratio, *vs.MaxRatio)
							if g.Op == ">=" {
								w = min(*vs.Ratio, *vs.MaxRatio)
							}
							got = &w
						}
					}
					if got != nil {
						met := g.Met(*got)
						vs.Met = &met
					}
				}
				r.Versus = append(r.Versus, vs)
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func aggregate(ms []measurement) side {
	s := side{Runs: ms}
	var vals, p50s, p99s, epps, samples, mRates, mP50s, mRatios, cpus, mCPUs []float64
	for _, m := range ms {
		if v := m.cpuPer1k(); v != nil {
			cpus = append(cpus, *v)
		}
		if v := m.minioCPUPer1k(); v != nil {
			mCPUs = append(mCPUs, *v)
		}
		samples = append(samples, m.Samples...)
		vals = append(vals, m.Value)
		if e := m.entriesPerPut(); e != nil {
			epps = append(epps, *e)
		}
		if b := m.MinIOSeqPut; b != nil {
			mRates, mP50s = append(mRates, b.PerSec), append(mP50s, b.P50)
		}
		if r := m.minioRatio(); r != nil {
			mRatios = append(mRatios, *r)
		}
		if m.P50 != nil {
			p50s = append(p50s, *m.P50)
		}
		if m.P99 != nil {
			p99s = append(p99s, *m.P99)
		}
		s.Errors += m.Errors
	}
	s.Value, s.P50, s.P99, s.EntriesPerPut = median(vals), median(p50s), median(p99s), median(epps)
	s.MinIOSeqPutRate, s.MinIOSeqPutP50, s.MinIOSeqPutRatio = median(mRates), median(mP50s), median(mRatios)
	s.CPUPer1k, s.MinIOCPUPer1k = median(cpus), median(mCPUs)
	if len(samples) > 0 {
		mx := slices.Max(samples)
		s.Value, s.Max, s.Samples = median(samples), &mx, len(samples)
	}
	return s
}

func median(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + m) / 2
	}
	return &m
}

func ratio(a, b *float64) *float64 {
	if a == nil || b == nil || *b == 0 {
		return nil
	}
	r := *a / *b
	return &r
}

// markdown renders the report as a header, one table per target against
// the baseline and a table of the sync-mode put rows.
func (r *report) markdown() string {
	var b strings.Builder
	n := len(r.Targets)
	e := r.Targets[n-1]
	fmt.Fprintf(&b, "# %s — %s\n\n", strings.Join(r.Targets, " vs "), r.Started.UTC().Format(time.RFC3339))
	m := r.Machine
	fmt.Fprintf(&b, "- Machine: %d cores, %s, %s RAM, Linux %s, data on %s\n", m.Cores, m.CPUModel, m.MemTotal, m.Kernel, m.DataFS)
	fmt.Fprintf(&b, "- %s; %s; netsy commit %s\n", m.GoVersion, m.EtcdVersion, m.NetsyCommit)
	if m.T4Version != "" {
		fmt.Fprintf(&b, "- %s\n", m.T4Version)
	}
	fmt.Fprintf(&b, "- Load average at start %s, at end %s; took %s\n", m.LoadAvgStart, m.LoadAvgEnd, r.Finished.Sub(r.Started).Round(time.Second))
	fmt.Fprintf(&b, "- Settings: %s\n", settingsLine(r.Settings))
	for _, v := range r.Variants {
		fmt.Fprintf(&b, "- %s: %s\n", v.Name, describeVariant(v))
	}
	fmt.Fprintf(&b, "- ratio = target / %s; latencies in ms; each cell is the median over runs, target order rotating per workload, fresh servers per run\n", e)
	fmt.Fprintf(&b, "- CPU = the servers' user + system CPU seconds (every process of the target, from /proc/PID/stat, over the measured part) per 1000 operations as the row counts them (events on watch rows, puts loaded on the memory and scale rows); `+x MinIO` is MinIO's on targets that use it; CPU ratio = target / %s\n", e)

	generic := slices.ContainsFunc(r.Rows, func(row row) bool { return !ownTable(row.Group) })
	for t := range n - 1 {
		if !generic {
			break
		}
		a := r.Targets[t]
		fmt.Fprintf(&b, "\n## %s vs %s\n\n", a, e)
		fmt.Fprintf(&b, "| workload | metric | %s | %s | ratio | p50 %s | p50 %s | p99 %s | p99 %s | latency ratio | CPU %s | CPU %s | CPU ratio | target | status |\n", a, e, a, e, a, e, a, e)
		b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
		for _, row := range r.Rows {
			if ownTable(row.Group) {
				continue
			}
			vs, sa, se := row.Versus[t], row.Sides[t], row.Sides[n-1]
			lat := ""
			if row.LatencyPct != "" {
				lat = fmt.Sprintf("%s (p%s)", fmtRatio(vs.LatencyRatio), row.LatencyPct)
			}
			target, status := "", ""
			if row.Goal != nil {
				target = row.Goal.String()
				status = fmtMet(vs.Met)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				row.Workload, row.Metric,
				fmtVal(sa), fmtVal(se), fmtRatio(vs.Ratio),
				fmtMs(sa.P50), fmtMs(se.P50), fmtMs(sa.P99), fmtMs(se.P99),
				lat, fmtCPU(sa), fmtCPU(se), fmtRatio(vs.CPURatio), target, status)
		}
	}
	r.allTable(&b)
	r.failoverTable(&b)
	r.pitrTable(&b)
	r.syncTable(&b)
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(n, "\n", "\n  "))
		}
	}
	return b.String()
}

// allTable, with three targets or more, puts every target's value and
// CPU per 1000 operations side by side, with the first target's ratios to
// each of the others (not only to the baseline): netsy-cluster against
// t4-cluster as well as against etcd-cluster.
func (r *report) allTable(b *strings.Builder) {
	n := len(r.Targets)
	if n < 3 {
		return
	}
	var rows []row
	for _, row := range r.Rows {
		if !ownTable(row.Group) {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	first := r.Targets[0]
	fmt.Fprintf(b, "\n## All targets\n\nValue and CPU seconds per 1000 operations of every target; %s / X is the first target's over each other's (value: above 1 is better for ops/s; CPU: below 1 is cheaper).\n\n", first)
	head := []string{"workload", "metric"}
	for _, t := range r.Targets {
		head = append(head, t)
	}
	for _, t := range r.Targets[1:] {
		head = append(head, first+" / "+t)
	}
	for _, t := range r.Targets {
		head = append(head, "CPU "+t)
	}
	for _, t := range r.Targets[1:] {
		head = append(head, "CPU "+first+" / "+t)
	}
	fmt.Fprintf(b, "| %s |\n|---|---|%s\n", strings.Join(head, " | "), strings.Repeat("--:|", len(head)-2))
	for _, row := range rows {
		cells := []string{row.Workload, row.Metric}
		for _, s := range row.Sides {
			cells = append(cells, fmtVal(s))
		}
		for _, s := range row.Sides[1:] {
			cells = append(cells, fmtRatio(ratio(row.Sides[0].Value, s.Value)))
		}
		for _, s := range row.Sides {
			cells = append(cells, fmtCPU(s))
		}
		for _, s := range row.Sides[1:] {
			cells = append(cells, fmtRatio(ratio(row.Sides[0].CPUPer1k, s.CPUPer1k)))
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
}

// ownTable reports whether a group's rows have a table of their own
// instead of a place in the per-target and all-targets tables.
func ownTable(group string) bool { return group == "failover" || group == "pitr" }

// failoverTable lists the failover rows of every target against the
// baseline: median and max over all repetitions, in milliseconds.
func (r *report) failoverTable(b *strings.Builder) {
	var rows []row
	for _, row := range r.Rows {
		if row.Group == "failover" {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	n := len(r.Targets)
	e := r.Targets[n-1]
	b.WriteString("\n## Failover\n\n")
	for _, row := range rows {
		fmt.Fprintf(b, "- %s: %s\n", row.Workload, row.Desc)
	}
	b.WriteString("\nTimes in ms over all repetitions; failed = probe puts that failed (see bench/README.md).\n")
	for t := range n - 1 {
		a := r.Targets[t]
		fmt.Fprintf(b, "\n| failover | median %s | median %s | ratio | max %s | max %s | max ratio | runs | failed %s | failed %s | target | status |\n", a, e, a, e, a, e)
		b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
		for _, row := range rows {
			vs, sa, se := row.Versus[t], row.Sides[t], row.Sides[n-1]
			target, status := "", ""
			if row.Goal != nil {
				target = row.Goal.String()
				status = fmtMet(vs.Met)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %d / %d | %d | %d | %s | %s |\n",
				row.Workload, fmtMs1(sa.Value), fmtMs1(se.Value), fmtRatio(vs.Ratio),
				fmtMs1(sa.Max), fmtMs1(se.Max), fmtRatio(vs.MaxRatio),
				sa.Samples, se.Samples, sa.Errors, se.Errors, target, status)
		}
	}
}

// syncTable lists the put rows of every sync-mode netsy target with
// entries per PUT and, where measured, the ratio of the row's ops/s to
// MinIO's own sequential conditional-PUT rate.
func (r *report) syncTable(b *strings.Builder) {
	var lines []string
	var seq *seqPut
	for _, row := range r.Rows {
		if row.Group != "put" {
			continue
		}
		for t, v := range r.Variants {
			if !v.SyncUploads {
				continue
			}
			s := row.Sides[t]
			if s.Value == nil {
				continue
			}
			epp := "–"
			if s.EntriesPerPut != nil {
				epp = fmt.Sprintf("%.1f", *s.EntriesPerPut)
			}
			rate, ratio := "", ""
			if s.MinIOSeqPutRate != nil {
				rate = fmt.Sprintf("%s (p50 %s)", fmtNum(*s.MinIOSeqPutRate), fmtMs(s.MinIOSeqPutP50))
				ratio = fmtRatio(s.MinIOSeqPutRatio)
				for _, m := range s.Runs {
					if m.MinIOSeqPut != nil {
						seq = m.MinIOSeqPut
					}
				}
			}
			lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s |",
				row.Workload, r.Targets[t], fmtVal(s), fmtMs(s.P50), fmtMs(s.P99), epp, rate, ratio))
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("\n## Sync mode: puts and object-storage PUTs\n\n")
	b.WriteString("Entries per PUT = log entries / WAL chunks uploaded during the workload (netsy's /metrics).\n")
	if seq != nil {
		fmt.Fprintf(b, "MinIO PUT/s = MinIO's own sequential conditional-PUT rate in this run: %d PUTs (If-None-Match: *, %d-byte bodies, unique keys), "+
			"one at a time from a bare minio-go client in the harness, on a fresh bucket of the same MinIO right after each netsy-minio put-seq; p50 in ms. "+
			"÷ MinIO = ops/s over that rate, within each run. A sequential sync-mode put waits for one PUT, so ~1.0× is its ceiling; "+
			"what is missing to it is netsy's own time per put (fsync, gRPC) and the benchmark client's, on the cores MinIO shares.\n",
			seq.PUTs, seq.BodyBytes)
	}
	b.WriteString("\n| workload | target | ops/s | p50 | p99 | entries/PUT | MinIO PUT/s | ÷ MinIO |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
}

func describeVariant(v variant) string {
	d := string(v.Kind)
	if len(v.Args) > 0 {
		d += " " + strings.Join(v.Args, " ")
	}
	switch {
	case v.cluster() && v.Kind == kindT4:
		d += fmt.Sprintf(", %d nodes (`t4 run --peer-listen`) on one fresh bucket and prefix of the same MinIO per run, leader lock there too, other flags default; clients are given every node's endpoint", v.Nodes)
	case v.cluster() && v.Kind == kindNetsy:
		d += fmt.Sprintf(", %d nodes sharing one fresh bucket on MinIO (loopback) per run, other flags default; clients are given every node's endpoint", v.Nodes)
	case v.cluster():
		d += fmt.Sprintf(", %d members, defaults; clients are given every member's endpoint", v.Nodes)
	case v.MinIO:
		d += ", sync mode against MinIO on loopback, fresh bucket per run; its put-seq is compared with MinIO's own sequential conditional-PUT rate, measured after it"
	case v.SyncUploads:
		d += ", sync mode on the file object store under its data dir"
	case v.Kind == kindNetsy:
		d += ", acknowledged on the local fsync, chunks upload in the background"
	}
	return d
}

// fmtCPU shows a side's CPU seconds per 1000 operations, with MinIO's
// added where measured.
func fmtCPU(s side) string {
	if s.CPUPer1k == nil {
		return "–"
	}
	v := fmtNum(*s.CPUPer1k)
	if s.MinIOCPUPer1k != nil {
		v += " +" + fmtNum(*s.MinIOCPUPer1k) + " MinIO"
	}
	return v
}

// csv renders one line per row and target: the medians the tables show,
// for spreadsheets. Ratios are against the baseline (the last target);
// its own ratio cells are empty.
func (r *report) csv() string {
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"workload", "group", "metric", "target", "baseline", "value", "ratio", "p50_ms", "p99_ms",
		"latency_ratio", "max", "max_ratio", "errors", "cpu_secs_per_1k_ops", "cpu_ratio", "minio_cpu_secs_per_1k_ops", "runs"})
	n := len(r.Targets)
	for _, row := range r.Rows {
		for t, s := range row.Sides {
			var vs versus
			if t < n-1 {
				vs = row.Versus[t]
			}
			ms := func(v *float64) string {
				if v == nil {
					return ""
				}
				return strconv.FormatFloat(*v*1000, 'g', 6, 64)
			}
			_ = w.Write([]string{row.Workload, row.Group, row.Metric, r.Targets[t], r.Targets[n-1],
				csvNum(s.Value), csvNum(vs.Ratio), ms(s.P50), ms(s.P99), csvNum(vs.LatencyRatio),
				csvNum(s.Max), csvNum(vs.MaxRatio), strconv.Itoa(s.Errors),
				csvNum(s.CPUPer1k), csvNum(vs.CPURatio), csvNum(s.MinIOCPUPer1k), strconv.Itoa(len(s.Runs))})
		}
	}
	w.Flush()
	return b.String()
}

func csvNum(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'g', 6, 64)
}

func fmtMet(m *bool) string {
	switch {
	case m == nil:
		return "no data"
	case *m:
		return "met"
	default:
		return "**not met**"
	}
}

func settingsLine(s map[string]any) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, s[k]))
	}
	return strings.Join(parts, ", ")
}

func fmtVal(s side) string {
	if s.Value == nil {
		return "–"
	}
	v := fmtNum(*s.Value)
	if s.Errors > 0 {
		v += fmt.Sprintf(" (%d err)", s.Errors)
	}
	return v
}

func fmtNum(v float64) string {
	switch {
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func fmtMs(v *float64) string {
	if v == nil {
		return ""
	}
	return fmt.Sprintf("%.3f", *v*1000)
}

func fmtMs1(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f", *v*1000)
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f×", *v)
}
