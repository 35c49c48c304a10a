package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// benchStorage is a Storage that keeps nothing and reports every entry
// durable at once, from a goroutine of its own as a log does: the
// benchmarks below then measure the engine's own cost per write, not a
// test storage's copying.
type benchStorage struct {
	mu     sync.Mutex
	onSync func(uint64, error)
	last   atomic.Uint64
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

func newBenchStorage() *benchStorage {
	s := &benchStorage{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *benchStorage) run() {
	defer close(s.done)
	var synced uint64
	for {
		select {
		case <-s.kick:
		case <-s.stop:
			return
		}
		if last := s.last.Load(); last > synced {
			synced = last
			s.mu.Lock()
			cb := s.onSync
			s.mu.Unlock()
			cb(synced, nil)
		}
	}
}

func (s *benchStorage) close() { close(s.stop); <-s.done }

func (s *benchStorage) Attach(f func(uint64, error)) {
	s.mu.Lock()
	s.onSync = f
	s.mu.Unlock()
}
func (s *benchStorage) LoadSnapshot() (*datafile.Snapshot, error)       { return nil, nil }
func (s *benchStorage) Replay(uint64, func(*netsyv1.Entry) error) error { return nil }
func (s *benchStorage) SaveSnapshot(snap *datafile.Snapshot) error      { snap.Release(); return nil }

// Backpressure takes a lock, as a storage that judges its backlog does.
func (s *benchStorage) Backpressure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return nil
}

func (s *benchStorage) Append(e *netsyv1.Entry) error {
	s.last.Store(e.Index)
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

func openBenchWriter(b *testing.B) (*Engine, func()) {
	st := newBenchStorage()
	e, err := Open(Config{Storage: st, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)), ClusterID: 1, MemberID: 2})
	if err != nil {
		b.Fatal(err)
	}
	return e, func() { e.Close(); st.close() }
}

// BenchmarkPut measures the writer's cost per Put from the request to the
// answer (evaluate, log entry, append, commit, reply) over 1000 keys with
// 256-byte values; "parallel" has 64 writers, so the loop batches, as the
// put-256 workload makes it. Run with -benchmem: allocations per write
// are what it pins.
func BenchmarkPut(b *testing.B) {
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "/bench/key-%04d", i)
	}
	val := make([]byte, 256)
	b.Run("serial", func(b *testing.B) {
		e, stop := openBenchWriter(b)
		defer stop()
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		cpu := startCPU()
		for i := 0; i < b.N; i++ {
			if _, err := e.Put(ctx, &pb.PutRequest{Key: keys[i%len(keys)], Value: val}); err != nil {
				b.Fatal(err)
			}
		}
		cpu.report(b)
	})
	// named puts from 32 goroutines, each write's context made by with
	// from its request id.
	named := func(b *testing.B, with func(context.Context, RequestID) context.Context) {
		e, stop := openBenchWriter(b)
		defer stop()
		var n atomic.Uint64
		b.ReportAllocs()
		b.SetParallelism(32)
		b.ResetTimer()
		cpu := startCPU()
		defer cpu.report(b)
		b.RunParallel(func(pb_ *testing.PB) {
			for pb_.Next() {
				i := n.Add(1)
				ctx := with(context.Background(), RequestID{Member: 7, Seq: i})
				if _, err := e.Put(ctx, &pb.PutRequest{Key: keys[int(i)%len(keys)], Value: val}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	// As a write another node forwarded: its entry carries a request id,
	// checked against the logged ones and indexed at commit.
	b.Run("forwarded", func(b *testing.B) { named(b, WithRequestID) })
	// As a client's write on the Active Primary: the replica Backend names
	// it with a new request id (WithNewRequestID), which the entry carries
	// and the index records but nobody looks up.
	b.Run("local-named", func(b *testing.B) { named(b, WithNewRequestID) })
	// The parallel puts again with one goroutine waiting on appends as the
	// Primary's quorum does in each pass: through AppendNotify (a channel
	// per wake-up, as it did), or a standing WatchAppends, on (receipts
	// decide) or off (a lone node: nobody is poked).
	for _, w := range []string{"notify", "watch-on", "watch-off"} {
		b.Run("parallel-watched-"+w, func(b *testing.B) {
			e, stop := openBenchWriter(b)
			defer stop()
			quit, exited := make(chan struct{}), make(chan struct{})
			var wakes atomic.Int64
			pokes := make(chan struct{}, 1)
			var on atomic.Bool
			on.Store(w == "watch-on")
			defer e.WatchAppends(pokes, &on)()
			go func() {
				defer close(exited)
				for {
					var ch <-chan struct{} = pokes
					if w == "notify" {
						ch = e.AppendNotify()
					}
					e.LastAppended()
					select {
					case <-ch:
						wakes.Add(1)
					case <-quit:
						return
					}
				}
			}()
			defer func() { close(quit); <-exited }()
			ctx := context.Background()
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			cpu := startCPU()
			defer cpu.report(b)
			defer func() { b.ReportMetric(float64(wakes.Load())/float64(b.N), "wakes/op") }()
			b.RunParallel(func(pb_ *testing.PB) {
				for pb_.Next() {
					i := n.Add(1)
					if _, err := e.Put(ctx, &pb.PutRequest{Key: keys[int(i)%len(keys)], Value: val}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("parallel", func(b *testing.B) {
		e, stop := openBenchWriter(b)
		defer stop()
		ctx := context.Background()
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(32) // 64 writers on 2 cores
		b.ResetTimer()
		cpu := startCPU()
		defer cpu.report(b)
		b.RunParallel(func(pb_ *testing.PB) {
			for pb_.Next() {
				i := n.Add(1)
				if _, err := e.Put(ctx, &pb.PutRequest{Key: keys[int(i)%len(keys)], Value: val}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// cpuMeter reports a benchmark's process CPU time (user and system, GC
// and every goroutine included) per op as cpu-ns/op: on a shared machine
// wall time per op says little, CPU per op is what the cluster benchmark
// compares with etcd.
type cpuMeter struct{ start int64 }

func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func startCPU() cpuMeter { return cpuMeter{start: cpuNow()} }

func (m cpuMeter) report(b *testing.B) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuNow()-m.start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkPutPending measures Puts evaluated while many writes wait for
// durability, as on a Primary whose commit waits for replica receipts:
// rounds of 256 concurrent puts, made durable together once all are
// appended, so a round's writes find 0 to 255 others pending.
func BenchmarkPutPending(b *testing.B) {
	const round = 256
	st := &enginetest.MemStorage{Manual: true}
	e, err := Open(Config{Storage: st, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)), ClusterID: 1, MemberID: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	val := make([]byte, 256)
	ctx := context.Background()
	// A Follow stream's wake-ups: how often AppendNotify fires per put.
	var wakes atomic.Int64
	stop, watcher := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watcher)
		for {
			select {
			case <-e.AppendNotify():
				wakes.Add(1)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-watcher }()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	var wg sync.WaitGroup
	for done := 0; done < b.N; done += round {
		base, _, _ := e.LastAppended()
		for i := range round {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "/bench/key-%04d", i), Value: val}); err != nil {
					b.Error(err)
				}
			}()
		}
		for {
			ch := e.AppendNotify()
			if last, _, _ := e.LastAppended(); last >= base+round {
				break
			}
			<-ch
		}
		st.SyncAll()
		wg.Wait()
	}
	b.StopTimer()
	cpu.report(b)
	b.ReportMetric(float64(wakes.Load())/float64(b.N), "append-wakes/op")
}
