package node

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
)

// Each object-storage request is counted by operation and result, and
// timed on the node's clock; results pass through unchanged.
func TestStoreRequestsCountedByResultAndTimed(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	inner := faulty.New(mem.New(clk), clk)
	m := newStoreMetrics()
	s := instrumentStore(inner, m, clk)
	count := func(op, res string) float64 { return testutil.ToFloat64(m.requests.WithLabelValues(op, res)) }

	if _, err := s.PutIfAbsent(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIfAbsent(ctx, "a", []byte("2")); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second PutIfAbsent: %v, want ErrPreconditionFailed", err)
	}
	if _, _, err := s.Get(ctx, "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get missing: %v, want ErrNotFound", err)
	}
	f := inner.Fail(faulty.List, "")
	if _, err := s.List(ctx, "", "", 0); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("List: %v, want the injected error", err)
	}
	f.Stop()
	for _, c := range []struct {
		op, res string
		want    float64
	}{
		{"put_if_absent", "ok", 1}, {"put_if_absent", "precondition_failed", 1},
		{"get", "not_found", 1}, {"get", "ok", 0}, {"list", "error", 1}, {"delete", "ok", 0},
	} {
		if got := count(c.op, c.res); got != c.want {
			t.Errorf("requests{op=%q,result=%q} = %v, want %v", c.op, c.res, got, c.want)
		}
	}

	// A PutIfMatch that takes 3 s on the node's clock is timed as such.
	inner.Delay(faulty.PutIfMatch, "", 3*time.Second)
	etag := func() string { _, e, _ := s.Get(ctx, "a"); return e }()
	done := make(chan error, 1)
	go func() { _, err := s.PutIfMatch(ctx, "a", []byte("3"), etag); done <- err }()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "netsy_objstore_request_duration_seconds" {
			continue
		}
		for _, met := range mf.Metric {
			if met.Label[0].GetValue() == "put_if_match" {
				if h := met.Histogram; h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
					t.Fatalf("put_if_match timing: %d samples summing to %v s, want 1 of 3 s", h.GetSampleCount(), h.GetSampleSum())
				}
				return
			}
		}
	}
	t.Fatal("no put_if_match timing")
}
