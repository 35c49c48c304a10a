package main

import (
	"math"
	"strconv"
	"strings"
)

// summary is one "Summary:" block printed by etcd's benchmark tool. Times
// are in seconds.
type summary struct {
	Name        string             `json:"name,omitempty"`
	Total       float64            `json:"total_secs"`
	Slowest     float64            `json:"slowest_secs"`
	Fastest     float64            `json:"fastest_secs"`
	Average     float64            `json:"average_secs"`
	Stddev      float64            `json:"stddev_secs"`
	RPS         float64            `json:"requests_per_sec"`
	Percentiles map[string]float64 `json:"percentiles,omitempty"`
	Errors      map[string]int     `json:"errors,omitempty"`
}

// ErrorCount is the number of failed requests.
func (s *summary) ErrorCount() int {
	n := 0
	for _, c := range s.Errors {
		n += c
	}
	return n
}

// Pct returns a latency percentile such as "50" or "99". The tool omits
// percentiles whose value rounds to zero, so a missing one reads as 0 with
// ok false.
func (s *summary) Pct(p string) (float64, bool) {
	v, ok := s.Percentiles[p]
	return v, ok
}

// parseBenchmark splits the tool's stdout into its summaries. Commands that
// print more than one (watch, watch-latency) put a title line such as
// "Watch events summary:" before each; it becomes the summary's Name in
// lower case. Progress-bar redraws use carriage returns and are ignored.
func parseBenchmark(out string) []*summary {
	var (
		all     []*summary
		cur     *summary
		title   string // last title line not yet consumed by a Summary:
		inLat   bool
		inErr   bool
		titleOK bool
	)
	out = strings.ReplaceAll(out, "\r", "\n")
	for _, raw := range strings.Split(out, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		lower := strings.ToLower(line)
		switch {
		case line == "Summary:":
			cur = &summary{Name: title, Percentiles: map[string]float64{}}
			all = append(all, cur)
			title, titleOK, inLat, inErr = "", false, false, false
			continue
		case strings.HasSuffix(lower, "summary:"):
			title, titleOK = strings.TrimSuffix(lower, ":"), true
			inLat, inErr = false, false
			continue
		case strings.HasPrefix(line, "Total ") && strings.Contains(line, " Ops:"):
			// txn-mixed: "Total Read Ops: 103" titles the read summary.
			op, _, _ := strings.Cut(strings.TrimPrefix(line, "Total "), " Ops:")
			title, titleOK = strings.ToLower(op), true
			inLat, inErr = false, false
			continue
		case line == "Latency distribution:":
			inLat, inErr = true, false
			continue
		case line == "Response time histogram:":
			inLat, inErr = false, false
			continue
		case line == "Error distribution:":
			// A command whose every request failed prints no Summary,
			// only its errors.
			if cur == nil || titleOK {
				cur = &summary{Name: title, Percentiles: map[string]float64{}}
				all = append(all, cur)
				title, titleOK = "", false
			}
			inLat, inErr = false, true
			continue
		}
		if cur == nil {
			continue
		}
		if inErr {
			if strings.HasPrefix(line, "[") {
				if end := strings.Index(line, "]"); end > 0 {
					if n, err := strconv.Atoi(line[1:end]); err == nil {
						if cur.Errors == nil {
							cur.Errors = map[string]int{}
						}
						cur.Errors[strings.TrimSpace(line[end+1:])] += n
						continue
					}
				}
			}
			inErr = false
		}
		if inLat {
			// "99.9% in 0.0123 secs."
			pct, rest, ok := strings.Cut(line, "% in ")
			if ok {
				if v, ok := parseSecs(rest); ok {
					cur.Percentiles[pct] = v
				}
				continue
			}
			inLat = false
		}
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v, ok := parseSecs(val)
		if !ok {
			continue
		}
		switch name {
		case "Total":
			cur.Total = v
		case "Slowest":
			cur.Slowest = v
		case "Fastest":
			cur.Fastest = v
		case "Average":
			cur.Average = v
		case "Stddev":
			cur.Stddev = v
		case "Requests/sec":
			cur.RPS = v
		}
	}
	return all
}

// combine merges the summaries of a command that reports its operation
// kinds separately (txn-mixed: read and write): throughputs add up, and
// each percentile is the worse of the parts, an upper bound of the
// combined one.
func combine(all []*summary) *summary {
	if len(all) == 0 {
		return nil
	}
	out := &summary{Name: "combined", Percentiles: map[string]float64{}}
	for _, s := range all {
		out.RPS += s.RPS
		out.Total = max(out.Total, s.Total)
		out.Slowest = max(out.Slowest, s.Slowest)
		for p, v := range s.Percentiles {
			out.Percentiles[p] = max(out.Percentiles[p], v)
		}
		for e, n := range s.Errors {
			if out.Errors == nil {
				out.Errors = map[string]int{}
			}
			out.Errors[e] += n
		}
	}
	return out
}

// parseSecs parses "0.0123 secs." or a bare number.
func parseSecs(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, ".")
	s = strings.TrimSpace(strings.TrimSuffix(s, "secs"))
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// pickSummary returns the summary with the given name, or the last one
// when name is empty.
func pickSummary(all []*summary, name string) *summary {
	if name == "" {
		if len(all) == 0 {
			return nil
		}
		return all[len(all)-1]
	}
	for _, s := range all {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// ops is how many operations the summary counts: its rate over its
// duration.
func (s *summary) ops() float64 { return math.Round(s.RPS * s.Total) }
