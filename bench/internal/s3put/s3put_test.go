package s3put

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunTimesEveryPut(t *testing.T) {
	var calls atomic.Int64
	seen := make([][]bool, 3)
	for c := range seen {
		seen[c] = make([]bool, 20)
	}
	r, err := Run(context.Background(), 20, 3, func(_ context.Context, c, i int) error {
		calls.Add(1)
		seen[c][i] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.PUTs != 60 || len(r.Lat) != 60 || calls.Load() != 60 {
		t.Fatalf("PUTs %d, latencies %d, calls %d; want 60 each", r.PUTs, len(r.Lat), calls.Load())
	}
	for c := range seen {
		for i, ok := range seen[c] {
			if !ok {
				t.Fatalf("loop %d never made put %d", c, i)
			}
		}
	}
	if r.Elapsed <= 0 || r.PerSec() <= 0 {
		t.Fatalf("elapsed %v, rate %v", r.Elapsed, r.PerSec())
	}
}

func TestRunStopsOnError(t *testing.T) {
	boom := errors.New("boom")
	var calls atomic.Int64
	_, err := Run(context.Background(), 1000, 1, func(_ context.Context, _, i int) error {
		calls.Add(1)
		if i == 5 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if calls.Load() != 6 {
		t.Fatalf("%d calls after the failing 6th, want 6", calls.Load())
	}
	if _, err := Run(context.Background(), 0, 1, nil); err == nil {
		t.Fatal("n=0 accepted")
	}
}

func TestPct(t *testing.T) {
	r := Result{PUTs: 4, Elapsed: 2 * time.Second, Lat: []time.Duration{1, 2, 3, 4}}
	if got := r.Pct(50); got != 3 {
		t.Fatalf("p50 %v, want 3", got)
	}
	if got := r.Pct(99); got != 4 {
		t.Fatalf("p99 %v, want 4", got)
	}
	if got := r.PerSec(); got != 2 {
		t.Fatalf("rate %v, want 2", got)
	}
	if got := (Result{}).Pct(50); got != 0 {
		t.Fatalf("p50 of an empty run %v", got)
	}
}

func TestBodyDiffersPerPut(t *testing.T) {
	base := make([]byte, 8, 64)
	a, b := Body(base, 7), Body(base, 12)
	if string(a) == string(b) || len(a) != 9 || len(b) != 10 {
		t.Fatalf("bodies %q and %q", a, b)
	}
	if string(a[8:]) != "7" {
		t.Fatalf("body 7 ends in %q", a[8:])
	}
}
