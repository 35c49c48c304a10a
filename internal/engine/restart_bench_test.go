package engine

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/gctune"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// fileStorage is a Storage over one snapshot file and no log entries, as a
// node restarting right after a snapshot finds its data directory: each
// LoadSnapshot decodes the file afresh, as the local log does.
type fileStorage struct{ path string }

func (f *fileStorage) Attach(func(uint64, error)) {}

func (f *fileStorage) LoadSnapshot() (*datafile.Snapshot, error) {
	file, err := os.Open(f.path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return datafile.DecodeSnapshot(f.path, bufio.NewReaderSize(file, 256<<10))
}

func (f *fileStorage) Replay(uint64, func(*netsyv1.Entry) error) error { return nil }
func (f *fileStorage) Append(*netsyv1.Entry) error                     { return errors.New("read only") }
func (f *fileStorage) SaveSnapshot(s *datafile.Snapshot) error         { s.Release(); return nil }

// writeRestartSnapshot writes the snapshot `benchmark put` with n
// sequential 8-byte keys of 256 B leaves behind (every value the same
// random bytes, as etcd's tool writes them).
func writeRestartSnapshot(b *testing.B, path string, n int) {
	val := make([]byte, 256)
	for i := range val {
		val[i] = byte(i*131 + 7)
	}
	kvs := make([]*netsyv1.KeyVersion, n)
	for i := range kvs {
		kvs[i] = &netsyv1.KeyVersion{Key: fmt.Appendf(nil, "%08d", i), Value: val,
			CreateRevision: int64(i) + 2, ModRevision: int64(i) + 2, Version: 1}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	h := &netsyv1.SnapshotHeader{Index: uint64(n), Revision: int64(n) + 1, Term: 1}
	if err := datafile.EncodeSnapshot(f, &datafile.Snapshot{Header: h, KVs: kvs}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRestart opens an engine on a snapshot of 1 M distinct keys of
// 256 B (issue 22 item 5's scale row) with the value spill on and the GC
// tuner running as cmd/netsy runs it: decode, restore, lease reattach.
// It reports the collections, the CPU time, the peak RSS and the live
// heap after the restart.
func BenchmarkRestart(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	dir := b.TempDir()
	path := filepath.Join(dir, "snap")
	writeRestartSnapshot(b, path, n)
	runtime.GC()
	tu := gctune.Start(func(string) string { return "" })
	defer tu.Stop()
	samples := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	b.ReportAllocs()
	b.ResetTimer()
	var gcs uint64
	var peak, live uint64
	var cpu time.Duration
	for i := range b.N {
		// Peak RSS from here: the restart's, not the snapshot writer's.
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
		metrics.Read(samples)
		before, cpuBefore := samples[0].Value.Uint64(), cpuUsed(b)
		e, err := Open(Config{Storage: &fileStorage{path: path}, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)),
			ClusterID: 1, MemberID: 2, SpillDir: filepath.Join(dir, fmt.Sprintf("values-%d", i))})
		if err != nil {
			b.Fatal(err)
		}
		metrics.Read(samples)
		gcs += samples[0].Value.Uint64() - before
		cpu += cpuUsed(b) - cpuBefore
		b.StopTimer()
		peak = max(peak, peakRSS(b))
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		live = ms.HeapAlloc
		if got := e.CurrentRevision(); got != int64(n)+1 {
			b.Fatalf("restored revision %d, want %d", got, n+1)
		}
		e.Close()
		runtime.GC()
		b.StartTimer()
	}
	b.ReportMetric(float64(gcs)/float64(b.N), "gcs/op")
	b.ReportMetric(float64(peak)/(1<<20), "peakRSSMiB")
	b.ReportMetric(float64(live)/(1<<20), "liveMiB")
	// CPU time is less noisy than ns/op on a shared machine.
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}

// peakRSS is the process's peak resident set since the last reset
// (VmHWM; 0 where /proc does not say).
func peakRSS(b *testing.B) uint64 {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuUsed is the process's user and system CPU time so far.
func cpuUsed(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A fresh decode per call: nothing else holds what it returns.
func (f *fileStorage) HandsOverSnapshots() bool { return true }
