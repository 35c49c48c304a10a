package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// side is one target's numbers for a row: the median over runs.
type side struct {
	Value  *float64      `json:"value,omitempty"`
	P50    *float64      `json:"p50_secs,omitempty"`
	P99    *float64      `json:"p99_secs,omitempty"`
	Errors int           `json:"errors,omitempty"`
	Runs   []measurement `json:"runs"`
}

type row struct {
	Workload string `json:"workload"`
	Group    string `json:"group"`
	Metric   string `json:"metric"`
	A        side   `json:"a"`
	B        side   `json:"b"`
	// Ratio is A over B of Value.
	Ratio *float64 `json:"ratio,omitempty"`
	// LatencyPct and LatencyRatio are set on latency-type rows.
	LatencyPct   string   `json:"latency_pct,omitempty"`
	LatencyRatio *float64 `json:"latency_ratio,omitempty"`
	Goal         *goal    `json:"goal,omitempty"`
	Met          *bool    `json:"met,omitempty"`
}

type report struct {
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Machine  machine        `json:"machine"`
	Targets  [2]string      `json:"targets"`
	Variants [2]variant     `json:"variants"`
	Settings map[string]any `json:"settings"`
	Rows     []row          `json:"rows"`
	Notes    []string       `json:"notes,omitempty"`
}

func buildRows(c *config, results map[string]*[2][]measurement) []row {
	var rows []row
	for i := range c.Workloads {
		for _, spec := range rowSpecs(&c.Workloads[i], c.MemKeys, c.MemValSize) {
			r := row{Workload: spec.Name, Group: spec.Group, Metric: spec.Metric, LatencyPct: spec.Latency, Goal: spec.Goal}
			if res := results[spec.Name]; res != nil {
				r.A = aggregate(res[0])
				r.B = aggregate(res[1])
			}
			r.Ratio = ratio(r.A.Value, r.B.Value)
			switch spec.Latency {
			case "50":
				r.LatencyRatio = ratio(r.A.P50, r.B.P50)
			case "99":
				r.LatencyRatio = ratio(r.A.P99, r.B.P99)
			}
			if g := r.Goal; g != nil {
				got := r.Ratio
				if g.Metric == "p50" || g.Metric == "p99" {
					got = r.LatencyRatio
				}
				if got != nil {
					met := g.Met(*got)
					r.Met = &met
				}
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func aggregate(ms []measurement) side {
	s := side{Runs: ms}
	var vals, p50s, p99s []float64
	for _, m := range ms {
		vals = append(vals, m.Value)
		if m.P50 != nil {
			p50s = append(p50s, *m.P50)
		}
		if m.P99 != nil {
			p99s = append(p99s, *m.P99)
		}
		s.Errors += m.Errors
	}
	s.Value, s.P50, s.P99 = median(vals), median(p50s), median(p99s)
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

// markdown renders the report as a header and one table.
func (r *report) markdown() string {
	var b strings.Builder
	a, e := r.Targets[0], r.Targets[1]
	fmt.Fprintf(&b, "# %s vs %s — %s\n\n", a, e, r.Started.UTC().Format(time.RFC3339))
	m := r.Machine
	fmt.Fprintf(&b, "- Machine: %d cores, %s, %s RAM, Linux %s, data on %s\n", m.Cores, m.CPUModel, m.MemTotal, m.Kernel, m.DataFS)
	fmt.Fprintf(&b, "- %s; %s; netsy commit %s\n", m.GoVersion, m.EtcdVersion, m.NetsyCommit)
	fmt.Fprintf(&b, "- Load average at start %s, at end %s; took %s\n", m.LoadAvgStart, m.LoadAvgEnd, r.Finished.Sub(r.Started).Round(time.Second))
	fmt.Fprintf(&b, "- Settings: %s\n", settingsLine(r.Settings))
	fmt.Fprintf(&b, "- ratio = %s / %s; latencies in ms; each cell is the median over runs, A/B order alternating per workload, fresh servers per run\n\n", a, e)

	fmt.Fprintf(&b, "| workload | metric | %s | %s | ratio | p50 %s | p50 %s | p99 %s | p99 %s | latency ratio | target | status |\n", a, e, a, e, a, e)
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, row := range r.Rows {
		lat := ""
		if row.LatencyPct != "" {
			lat = fmt.Sprintf("%s (p%s)", fmtRatio(row.LatencyRatio), row.LatencyPct)
		}
		target, status := "", ""
		if row.Goal != nil {
			target = row.Goal.String()
			switch {
			case row.Met == nil:
				status = "no data"
			case *row.Met:
				status = "met"
			default:
				status = "**not met**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			row.Workload, row.Metric,
			fmtVal(row.A), fmtVal(row.B), fmtRatio(row.Ratio),
			fmtMs(row.A.P50), fmtMs(row.B.P50), fmtMs(row.A.P99), fmtMs(row.B.P99),
			lat, target, status)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(n, "\n", "\n  "))
		}
	}
	return b.String()
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

func fmtRatio(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f×", *v)
}
