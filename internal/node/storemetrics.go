package node

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
)

// storeMetrics time every object-storage request a node makes (WAL chunk
// uploads, snapshots, the Elector lock, registrations, catch-ups), by
// operation and outcome: the request rate, error rate and latency a
// dashboard shows for the bucket.
type storeMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newStoreMetrics() *storeMetrics {
	return &storeMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netsy_objstore_requests_total",
			Help: "Object-storage requests by operation (get, put_if_absent, put_if_match, delete, list) and result (ok, not_found, precondition_failed, error).",
		}, []string{"op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "netsy_objstore_request_duration_seconds",
			Help:    "Time object-storage requests took, by operation (a streamed get: until its body starts).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1 ms to about 33 s
		}, []string{"op"}),
	}
}

func (m *storeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration}
}

// timedStore is a Store that reports each call to its storeMetrics. The
// results and errors it returns are the inner store's, unchanged.
type timedStore struct {
	objstore.Store
	m   *storeMetrics
	clk clock.Clock
}

var _ objstore.Store = timedStore{}

// instrumentStore wraps s so that its requests are counted and timed.
func instrumentStore(s objstore.Store, m *storeMetrics, clk clock.Clock) objstore.Store {
	for _, op := range []string{"get", "put_if_absent", "put_if_match", "delete", "list"} {
		// Every series exists from the start, so that rate() and the
		// alerts over them do not wait for the first error.
		for _, res := range []string{"ok", "not_found", "precondition_failed", "error"} {
			m.requests.WithLabelValues(op, res)
		}
		m.duration.WithLabelValues(op)
	}
	return timedStore{Store: s, m: m, clk: clk}
}

// done records one request of op that started at start.
func (s timedStore) done(op string, start time.Time, err error) {
	s.m.duration.WithLabelValues(op).Observe(s.clk.Since(start).Seconds())
	res := "ok"
	switch {
	case err == nil:
	case errors.Is(err, objstore.ErrNotFound):
		res = "not_found"
	case errors.Is(err, objstore.ErrPreconditionFailed):
		res = "precondition_failed"
	default:
		res = "error"
	}
	s.m.requests.WithLabelValues(op, res).Inc()
}

func (s timedStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	start := s.clk.Now()
	body, etag, err := s.Store.Get(ctx, key)
	s.done("get", start, err)
	return body, etag, err
}

func (s timedStore) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	start := s.clk.Now()
	body, etag, err := s.Store.GetReader(ctx, key)
	s.done("get", start, err)
	return body, etag, err
}

func (s timedStore) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	start := s.clk.Now()
	etag, err := s.Store.PutIfAbsent(ctx, key, body)
	s.done("put_if_absent", start, err)
	return etag, err
}

func (s timedStore) PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (string, error) {
	start := s.clk.Now()
	etag, err := s.Store.PutIfAbsentFrom(ctx, key, r, size)
	s.done("put_if_absent", start, err)
	return etag, err
}

func (s timedStore) PutIfMatch(ctx context.Context, key string, body []byte, etag string) (string, error) {
	start := s.clk.Now()
	newETag, err := s.Store.PutIfMatch(ctx, key, body, etag)
	s.done("put_if_match", start, err)
	return newETag, err
}

func (s timedStore) Delete(ctx context.Context, key string) error {
	start := s.clk.Now()
	err := s.Store.Delete(ctx, key)
	s.done("delete", start, err)
	return err
}

func (s timedStore) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	start := s.clk.Now()
	infos, err := s.Store.List(ctx, prefix, startAfter, limit)
	s.done("list", start, err)
	return infos, err
}
