package mvcc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/gctune"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

const benchKeys = 100_000

var (
	benchOnce  sync.Once
	benchStore *Store
	benchNames [][]byte
)

// benchSetup builds, once, a store of 100k keys shaped like Kubernetes
// objects with 1 KiB values, then 10k updates so historic reads have
// history to skip.
func benchSetup() (*Store, [][]byte) {
	benchOnce.Do(func() {
		s := New()
		val := make([]byte, 1024)
		for i := range benchKeys {
			k := fmt.Appendf(nil, "/registry/pods/ns%02d/pod-%06d", i%50, i)
			benchNames = append(benchNames, k)
		}
		for i, k := range benchNames {
			s.Put(int64(i+1), k, val, 0)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		for range 10_000 {
			s.Put(s.Rev()+1, benchNames[rng.IntN(benchKeys)], val, 0)
		}
		benchStore = s
	})
	return benchStore, benchNames
}

// Updates of random existing keys: with 1k keys the store stays in cache,
// with 100k (of 1 KiB values) most accesses miss it.
func BenchmarkPutUpdate(b *testing.B) {
	for _, n := range []int{1000, benchKeys} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s := New()
			val := make([]byte, 1024)
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "/registry/pods/ns/pod-%06d", i)
				s.Put(s.Rev()+1, keys[i], val, 0)
			}
			rng := rand.New(rand.NewPCG(2, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				s.Put(s.Rev()+1, keys[rng.IntN(n)], val, 0)
				// Compact as Kubernetes does, so the cost is the steady
				// state's.
				if i%100_000 == 99_999 {
					if err := s.Compact(s.Rev() - 1000); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func BenchmarkPutNewKeys(b *testing.B) {
	s := New()
	val := make([]byte, 1024)
	keys := make([][]byte, b.N)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "/registry/pods/ns/pod-%08x", rand.Uint32())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s.Put(s.Rev()+1, keys[i], val, 0)
	}
}

func BenchmarkRangeSingleKey(b *testing.B) {
	s, keys := benchSetup()
	rng := rand.New(rand.NewPCG(3, 3))
	rev := s.Rev()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := s.Range(keys[rng.IntN(benchKeys)], nil, RangeOptions{Rev: rev})
		if err != nil || len(res.KVs) != 1 {
			b.Fatal(err)
		}
	}
}

func BenchmarkRangeSingleKeyParallel(b *testing.B) {
	s, keys := benchSetup()
	rev := s.Rev()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 4))
		for pb.Next() {
			if _, err := s.Range(keys[rng.IntN(benchKeys)], nil, RangeOptions{Rev: rev}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A Kubernetes list page: 500 pods out of 100k with the total count.
func BenchmarkRangePrefixLimit500(b *testing.B) {
	s, _ := benchSetup()
	for _, tc := range []struct {
		name string
		back int64
	}{{"latest", 0}, {"historic-100-writes-back", 100}, {"historic-10k-writes-back", 10_000}} {
		b.Run(tc.name, func(b *testing.B) {
			rev := s.Rev() - tc.back
			b.ReportAllocs()
			for range b.N {
				res, err := s.Range([]byte("/registry/pods/"), []byte("/registry/pods0"), RangeOptions{Rev: rev, Limit: 500})
				if err != nil || len(res.KVs) != 500 || res.Count != benchKeys || !res.More {
					b.Fatal(err, len(res.KVs), res.Count)
				}
			}
		})
	}
}

// The same list sorted by mod revision. With a target but no order etcd
// sorts only the page; with an explicit order, every key in the range.
func BenchmarkRangePrefixSortedLimit500(b *testing.B) {
	s, _ := benchSetup()
	rev := s.Rev()
	for _, tc := range []struct {
		name  string
		order pb.RangeRequest_SortOrder
	}{{"page", pb.RangeRequest_NONE}, {"whole-range", pb.RangeRequest_DESCEND}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				res, err := s.Range([]byte("/registry/pods/"), []byte("/registry/pods0"), RangeOptions{Rev: rev, Limit: 500, SortTarget: pb.RangeRequest_MOD, SortOrder: tc.order})
				if err != nil || len(res.KVs) != 500 {
					b.Fatal(err)
				}
			}
		})
	}
}

// Watch catch-up: 100 revisions of history per call.
func BenchmarkEvents100(b *testing.B) {
	s, _ := benchSetup()
	rng := rand.New(rand.NewPCG(5, 5))
	b.ReportAllocs()
	for range b.N {
		from := 1 + rng.Int64N(s.Rev()-100)
		evs, _, err := s.Events(from, from+99, 0)
		if err != nil || len(evs) != 100 {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemory reports the heap the store adds on top of the keys and
// values themselves: per key after 100k creations of 1 KiB values, and per
// version after a further 100k updates.
func BenchmarkMemory(b *testing.B) {
	for range b.N {
		keys := make([][]byte, benchKeys)
		vals := make([][]byte, 2*benchKeys)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "/registry/pods/ns%02d/pod-%06d", i%50, i)
		}
		for i := range vals {
			vals[i] = make([]byte, 1024)
		}
		base := heapInUse()
		s := New()
		for i, k := range keys {
			s.Put(s.Rev()+1, k, vals[i], 0)
		}
		created := heapInUse()
		for i, k := range keys {
			s.Put(s.Rev()+1, k, vals[benchKeys+i], 0)
		}
		updated := heapInUse()
		b.ReportMetric(float64(created-base)/benchKeys, "B/key")
		b.ReportMetric(float64(updated-created)/benchKeys, "B/version")
		runtime.KeepAlive(s)
		runtime.KeepAlive(vals)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// Startup: restore 100k keys plus 10k updates of history from a snapshot.
func BenchmarkRestore(b *testing.B) {
	s, _ := benchSetup()
	snap := snapshotOf(b, s)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r := New()
		if err := r.Restore(s.Rev(), s.CompactRev(), snap); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(snap)), "ns/version")
}

// Startup of a node with default flags: 200k distinct keys of 256 B
// restored into a store that spills values, as `benchmark put` with
// sequential keys leaves it (issue 22 item 5 at a fifth of its size).
func BenchmarkRestoreSpilled(b *testing.B) {
	val := bytes.Repeat([]byte("v"), 256)
	var snap []*netsyv1.KeyVersion
	for i := range 200000 {
		snap = append(snap, &netsyv1.KeyVersion{Key: []byte(fmt.Sprintf("%08d", i)), Value: val,
			CreateRevision: int64(i) + 2, ModRevision: int64(i) + 2, Version: 1})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r, err := Open(Options{SpillDir: filepath.Join(b.TempDir(), "values")})
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Restore(200001, 0, snap); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		r.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(snap)), "ns/version")
}

// Puts of new keys with 256-byte values into a store that spills values
// of 128 bytes and more: the default configuration under the put-256
// workload (sequential keys). The engine's path is PutKV.
func BenchmarkPutKVSpilled(b *testing.B) {
	s, err := Open(Options{SpillDir: filepath.Join(b.TempDir(), "values")})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := bytes.Repeat([]byte("v"), 256)
	keys := make([][]byte, b.N)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%08d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s.PutKV(s.Rev()+1, keys[i], val, 0)
	}
}

// Updates of 100k existing keys with 256-byte values into a spilling
// store, as the engine writes them (PutKV, no prev_kv): the put-256
// workload once its key space exists. The replaced value stays in the
// spill files unless a caller asks for it.
func BenchmarkPutKVSpilledUpdate(b *testing.B) {
	s, keys, val := spilledBenchStore(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s.PutKV(s.Rev()+1, keys[i%len(keys)], val, 0)
		if i%100_000 == 99_999 {
			if err := s.Compact(s.Rev() - 1000); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Deletes of keys whose 256-byte values were spilled, each put back after
// (an op is both: the store keeps a steady size), as the engine deletes
// (kept: DeleteKV, no prev_kv) and as Delete's event does (event: the
// value read back); the difference is the read-back.
func BenchmarkDeleteSpilled(b *testing.B) {
	for _, mode := range []string{"event", "kept"} {
		b.Run(mode, func(b *testing.B) {
			s, keys, val := spilledBenchStore(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := keys[i%len(keys)]
				if mode == "event" {
					s.Delete(s.Rev()+1, k)
				} else {
					s.DeleteKV(s.Rev()+1, k)
				}
				s.PutKV(s.Rev()+1, k, val, 0)
				if i%50_000 == 49_999 {
					if err := s.Compact(s.Rev() - 1000); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// Puts of new keys into a store that already holds 100k or 1 M keys, as
// `benchmark put` with sequential keys and 256-byte values loads a node
// (issue 22 item 5), with the node's GC policy (gctune) running: the cost
// that grows with the data shows as the gap between the two sizes. Each
// key is a fresh slice, as a request's is. Besides the put's own cost it
// reports what every collection costs at that size, which is what grows:
// gc-cpu-ms is the collector's CPU for one full collection of the store
// (marking what it holds), live-B/key the heap that collection finds per
// key, and gc/op the collections the puts themselves caused. Run it with
// a fixed count (-benchtime 200000x): the store grows by b.N keys.
func BenchmarkPutKVGrowth(b *testing.B) {
	tuner := gctune.Start(func(string) string { return "" })
	defer tuner.Stop()
	val := bytes.Repeat([]byte("v"), 256)
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("existing=%d", n), func(b *testing.B) {
			s, err := Open(Options{SpillDir: filepath.Join(b.TempDir(), "values")})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for i := range n {
				s.PutKV(s.Rev()+1, fmt.Appendf(nil, "%08d", i), val, 0)
			}
			keys := make([][]byte, b.N)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "%08d", n+i)
			}
			runtime.GC()
			cycles, _ := gcStats()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				s.PutKV(s.Rev()+1, keys[i], val, 0)
			}
			b.StopTimer()
			after, _ := gcStats()
			b.ReportMetric(float64(after-cycles)/float64(b.N), "gc/op")
			keys = nil
			runtime.GC()
			const full = 5
			cpu := processCPU(b)
			for range full {
				runtime.GC()
			}
			b.ReportMetric((processCPU(b)-cpu).Seconds()*1e3/full, "gc-cpu-ms")
			live, objects := heapLive()
			b.ReportMetric(float64(live)/float64(n+b.N), "live-B/key")
			b.ReportMetric(float64(objects)/float64(n+b.N), "objects/key")
			runtime.KeepAlive(s)
		})
	}
}

// gcStats is the number of collections so far and the CPU seconds the
// runtime estimates the collector has spent.
func gcStats() (uint64, float64) {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Float64()
}

// processCPU is the CPU time (user and system) the process has used: on
// a shared machine a measure of work, where wall time is not.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapLive is the heap, and the objects in it, a full collection finds
// reachable.
func heapLive() (bytes, objects int64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/objects:objects"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

// spilledBenchStore is a spilling store holding benchKeys keys of 256-byte
// values (spilled), closed when the benchmark ends, with its keys and the
// value.
func spilledBenchStore(b *testing.B) (*Store, [][]byte, []byte) {
	s, err := Open(Options{SpillDir: filepath.Join(b.TempDir(), "values")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	val := bytes.Repeat([]byte("v"), 256)
	keys := make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%08d", i)
		s.PutKV(s.Rev()+1, keys[i], val, 0)
	}
	return s, keys, val
}
