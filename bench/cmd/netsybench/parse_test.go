package main

import "testing"

// Output shapes captured from etcd v3.6.10's benchmark tool.
const putOut = "270 / 500 [----->____] 54.00% ? p/s\r500 / 500 [------] 100.00% 4025 p/s\n" + `
Summary:
  Total:	0.3246 secs.
  Slowest:	0.0161 secs.
  Fastest:	0.0005 secs.
  Average:	0.0026 secs.
  Stddev:	0.0023 secs.
  Requests/sec:	1540.2842

Response time histogram:
  0.0005 [1]	|
  0.0020 [282]	|∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎∎

Latency distribution:
  10% in 0.0007 secs.
  50% in 0.0010 secs.
  99% in 3.5e-03 secs.
  99.9% in 0.0041 secs.

Error distribution:
  [3]	rpc error: code = Unavailable desc = closing
  [2]	context deadline exceeded
`

const watchLatencyOut = `
Put summary:

Summary:
  Total:	1.0020 secs.
  Requests/sec:	199.6003

Latency distribution:
  50% in 0.0009 secs.
  99% in 0.0024 secs.

Watch events summary:

Summary:
  Total:	1.0027 secs.
  Requests/sec:	797.8358

Latency distribution:
  75% in 0.0001 secs.
  99% in 0.0009 secs.
`

const allFailedOut = `
Error distribution:
  [10]	rpc error: code = Unimplemented desc = unknown service
`

func TestParseBenchmark(t *testing.T) {
	sums := parseBenchmark(putOut)
	if len(sums) != 1 {
		t.Fatalf("put: %d summaries, want 1", len(sums))
	}
	s := sums[0]
	if s.RPS != 1540.2842 || s.Total != 0.3246 || s.Average != 0.0026 {
		t.Errorf("put summary = %+v", s)
	}
	if p, _ := s.Pct("99"); p != 0.0035 {
		t.Errorf("p99 = %v, want 0.0035", p)
	}
	if p, _ := s.Pct("99.9"); p != 0.0041 {
		t.Errorf("p99.9 = %v", p)
	}
	if s.ErrorCount() != 5 {
		t.Errorf("errors = %v, want 5", s.Errors)
	}

	sums = parseBenchmark(watchLatencyOut)
	if len(sums) != 2 {
		t.Fatalf("watch-latency: %d summaries, want 2", len(sums))
	}
	w := pickSummary(sums, "watch events summary")
	if w == nil || w.RPS != 797.8358 {
		t.Fatalf("watch events summary = %+v", w)
	}
	if _, ok := w.Pct("50"); ok {
		t.Errorf("p50 present though the tool omitted it")
	}
	if p, _ := pickSummary(sums, "put summary").Pct("50"); p != 0.0009 {
		t.Errorf("put p50 = %v", p)
	}

	sums = parseBenchmark(allFailedOut)
	if len(sums) != 1 || sums[0].ErrorCount() != 10 || sums[0].RPS != 0 {
		t.Fatalf("all failed = %+v", sums)
	}
}

func TestPrefixEnd(t *testing.T) {
	if got := prefixEnd("/bench/range/"); got != "/bench/range0" {
		t.Errorf("prefixEnd = %q", got)
	}
}

const txnMixedOut = `bench with linearizable range
Total Read Ops: 103
Details:
Summary:
  Total:	0.2996 secs.
  Requests/sec:	343.7

Latency distribution:
  50% in 0.030 secs.
  99% in 0.265 secs.

Total Write Ops: 97
Details:
Summary:
  Total:	0.3002 secs.
  Requests/sec:	323.0

Latency distribution:
  50% in 0.037 secs.
  95% in 0.110 secs.
`

func TestCombineTxnMixed(t *testing.T) {
	sums := parseBenchmark(txnMixedOut)
	if len(sums) != 2 || sums[0].Name != "read" || sums[1].Name != "write" {
		t.Fatalf("summaries = %+v", sums)
	}
	c := combine(sums)
	if c.RPS != 343.7+323.0 {
		t.Errorf("RPS = %v", c.RPS)
	}
	if p, _ := c.Pct("50"); p != 0.037 {
		t.Errorf("p50 = %v", p)
	}
	if p, _ := c.Pct("99"); p != 0.265 {
		t.Errorf("p99 = %v", p)
	}
}

func TestNearestRank(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ q, want float64 }{
		{0.5, 5}, {0.99, 10}, {0.1, 1}, {0.11, 2}, {0, 1}, {1, 10},
	} {
		if got := nearestRank(xs, tc.q); got != tc.want {
			t.Errorf("nearestRank(1..10, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := nearestRank([]float64{7}, 0.99); got != 7 {
		t.Errorf("one sample: %v", got)
	}
}
