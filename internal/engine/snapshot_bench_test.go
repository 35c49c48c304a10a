package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/wal"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// BenchmarkSnapshotSave takes and saves one local snapshot of 1 M distinct
// keys of 256 B (the scale-1m row), the values spilled to files as a node
// keeps them: the capture in the loop, then what every node's background
// save does, the encode and fsync'd write through the local log
// (wal.SaveSnapshot; a replica's objwal stops there, a Primary's then
// streams the written file to the bucket without encoding it again).
// Besides ns/op and allocs it reports the CPU seconds, the cores the save
// kept busy on average (CPU over wall time: a background save must leave
// the other core to the write path), the collections it caused and the
// peak of the live heap over the store's.
func BenchmarkSnapshotSave(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	dir := b.TempDir()
	path := filepath.Join(dir, "snap")
	writeRestartSnapshot(b, path, n)
	e, err := Open(Config{Storage: &fileStorage{path: path}, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)),
		ClusterID: 1, MemberID: 2, SpillDir: filepath.Join(dir, "values")})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	w, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Logger: hclog.NewNullLogger(), Clock: clock.Real()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	os.Remove(path)

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	samples := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	b.ReportAllocs()
	b.ResetTimer()
	var gcs uint64
	var cpu time.Duration
	var peak uint64
	var capture time.Duration
	clk := clock.Real()
	for range b.N {
		metrics.Read(samples)
		before, cpuBefore := samples[0].Value.Uint64(), cpuUsed(b)
		stop := sampleHeap(&peak)
		o := &snapshotOp{}
		t0 := clk.Now()
		if err := e.submit(context.Background(), o); err != nil {
			b.Fatal(err)
		}
		capture += clk.Since(t0)
		if err := w.SaveSnapshot(o.snap); err != nil {
			b.Fatal(err)
		}
		o.snap.Release()
		stop()
		metrics.Read(samples)
		gcs += samples[0].Value.Uint64() - before
		cpu += cpuUsed(b) - cpuBefore
	}
	wall := b.Elapsed()
	b.StopTimer()
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
	b.ReportMetric(float64(gcs)/float64(b.N), "gcs/op")
	// The capture is the part the loop waits for.
	b.ReportMetric(float64(capture.Milliseconds())/float64(b.N), "capture-ms/op")
	if peak > base.HeapAlloc {
		b.ReportMetric(float64(peak-base.HeapAlloc)/(1<<20), "peakHeapMiB")
	}
	if fi, err := os.Stat(filepath.Join(dir, "wal", "snap", fmt.Sprintf("%020d.snap", n))); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "fileMiB")
	}
}

// sampleHeap records the largest heap in use (runtime/metrics, no
// stop-the-world) every few milliseconds until stop is called.
func sampleHeap(peak *uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(s)
		*peak = max(*peak, s[0].Value.Uint64())
	}
	go func() {
		defer wg.Done()
		t := clock.Real().NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-done:
				return
			case <-t.C():
			}
		}
	}()
	return func() { close(done); wg.Wait(); read() }
}

// tailStorage is fileStorage with log entries after its snapshot, as a
// node finds its data directory when it stops between two snapshots.
type tailStorage struct {
	fileStorage
	ents []*netsyv1.Entry
}

func (t *tailStorage) Replay(from uint64, fn func(*netsyv1.Entry) error) error {
	for _, e := range t.ents {
		if e.Index >= from {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// BenchmarkRestartTail restarts 1 M keys of 256 B from a snapshot of all
// of them, and from a snapshot of 900 k with the last 100 k puts in the
// log (the most a node replays with the default interval): what an entry
// of the log costs a restart against a version of the snapshot, which
// decides whether snapshots may be spaced further apart as the state
// grows.
func BenchmarkRestartTail(b *testing.B) {
	total := 1_000_000
	if testing.Short() {
		total = 100_000
	}
	for _, tail := range []int{0, total / 10} {
		b.Run(fmt.Sprintf("log=%d", tail), func(b *testing.B) {
			dir := b.TempDir()
			path := filepath.Join(dir, "snap")
			n := total - tail
			writeRestartSnapshot(b, path, n)
			val := make([]byte, 256)
			for i := range val {
				val[i] = byte(i*131 + 7)
			}
			st := &tailStorage{fileStorage: fileStorage{path: path}}
			for j := range tail {
				idx := uint64(n + 1 + j)
				st.ents = append(st.ents, &netsyv1.Entry{Index: idx, Revision: int64(idx) + 1, Term: 1,
					Ops: []*netsyv1.Op{{Key: fmt.Appendf(nil, "%08d", n+j), Value: val}}})
			}
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			var cpu time.Duration
			for i := range b.N {
				before := cpuUsed(b)
				e, err := Open(Config{Storage: st, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)),
					ClusterID: 1, MemberID: 2, SpillDir: filepath.Join(dir, fmt.Sprintf("values-%d", i))})
				if err != nil {
					b.Fatal(err)
				}
				cpu += cpuUsed(b) - before
				b.StopTimer()
				if got := e.CurrentRevision(); got != int64(total)+1 {
					b.Fatalf("restored revision %d, want %d", got, total+1)
				}
				e.Close()
				runtime.GC()
				b.StartTimer()
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}
