package s3put

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
)

// DefaultSize is the body size in bytes: a WAL chunk of ~54 256-byte
// entries is ~16 KiB.
const DefaultSize = 16 << 10

// PutFunc makes the i-th PUT of client loop c.
type PutFunc func(ctx context.Context, c, i int) error

// Result is one measured run.
type Result struct {
	// PUTs is the number of PUTs timed; Elapsed the wall time of all loops.
	PUTs    int
	Elapsed time.Duration
	// Lat holds every PUT's latency, sorted.
	Lat []time.Duration
	// CPU is this process's user plus system time over the run (not the
	// server's, when the server is another process).
	CPU time.Duration
}

// PerSec is PUTs per second over the run.
func (r Result) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.PUTs) / r.Elapsed.Seconds()
}

// Pct is the p-th latency percentile (0 < p < 100), 0 for an empty run.
func (r Result) Pct(p float64) time.Duration {
	if len(r.Lat) == 0 {
		return 0
	}
	return r.Lat[min(int(float64(len(r.Lat))*p/100), len(r.Lat)-1)]
}

// CPUPerPut is this process's CPU time per PUT.
func (r Result) CPUPerPut() time.Duration {
	if r.PUTs == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.PUTs)
}

// Run runs clients concurrent loops of n PUTs each, one PUT at a time per
// loop, and times them. Loop c calls put(ctx, c, i) for i in [0, n). The
// first error stops the run.
func Run(ctx context.Context, n, clients int, put PutFunc) (Result, error) {
	if n < 1 || clients < 1 {
		return Result{}, fmt.Errorf("s3put: want n and clients >= 1, got n=%d clients=%d", n, clients)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lats := make([][]time.Duration, clients)
	errs := make([]error, clients)
	cpu0, err := cpuTime()
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			lat := make([]time.Duration, 0, n)
			for i := range n {
				t := time.Now()
				if err := put(ctx, c, i); err != nil {
					errs[c] = fmt.Errorf("put %d of loop %d: %w", i, c, err)
					cancel()
					return
				}
				lat = append(lat, time.Since(t))
			}
			lats[c] = lat
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := cpuTime()
	if err != nil {
		return Result{}, err
	}
	for _, err := range errs {
		if err != nil {
			return Result{}, err
		}
	}
	lat := slices.Concat(lats...)
	slices.Sort(lat)
	return Result{PUTs: len(lat), Elapsed: elapsed, Lat: lat, CPU: cpu1 - cpu0}, nil
}

// Body is the body of PUT i: base followed by i in decimal, so that every
// body, and with it MinIO's ETag, differs.
func Body(base []byte, i int) []byte {
	return strconv.AppendInt(slices.Clip(base), int64(i), 10)
}

// MinioGo returns a PutFunc that stores size-byte bodies (plus the
// counter) under prefix/<loop>/<i> in bucket through minio-go's
// PutObject with If-None-Match: *, without a payload checksum, as a
// sync-mode chunk upload would. prefix must be fresh for every run: a key
// that exists fails the precondition.
func MinioGo(mc *minio.Client, bucket, prefix string, size int) PutFunc {
	base := bytes.Repeat([]byte("x"), size)
	return func(ctx context.Context, c, i int) error {
		b := Body(base, i)
		opts := minio.PutObjectOptions{DisableContentSha256: true}
		opts.SetMatchETagExcept("*")
		key := fmt.Sprintf("%s/%d/%08d", prefix, c, i)
		if _, err := mc.PutObject(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), opts); err != nil {
			return fmt.Errorf("put %s/%s: %w", bucket, key, err)
		}
		return nil
	}
}

// cpuTime is this process's user plus system CPU time so far.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
