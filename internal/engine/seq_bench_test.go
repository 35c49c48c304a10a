package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/internal/wal"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// walStorage is the engine's Storage over a real local log, as a lone
// node's objwal is when its uploads run behind: every entry is
// acknowledged on the log's own fsync.
type walStorage struct {
	w      *wal.WAL
	mu     sync.Mutex
	onSync func(uint64, error)
	syncs  atomic.Int64
}

func openWALStorage(b *testing.B, fsys vfs.FS) *walStorage {
	s := &walStorage{}
	w, err := wal.Open(wal.Options{
		Dir: filepath.Join(b.TempDir(), "wal"), FS: fsys, Logger: hclog.NewNullLogger(), Clock: clock.Real(),
		OnSync: func(index uint64, err error) {
			s.syncs.Add(1)
			s.mu.Lock()
			cb := s.onSync
			s.mu.Unlock()
			if cb != nil {
				cb(index, err)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	// The first segment's preallocation is not what is measured.
	<-w.Prepared()
	s.w = w
	return s
}

func (s *walStorage) Attach(f func(uint64, error)) {
	s.mu.Lock()
	s.onSync = f
	s.mu.Unlock()
}
func (s *walStorage) LoadSnapshot() (*datafile.Snapshot, error)       { return nil, nil }
func (s *walStorage) Replay(uint64, func(*netsyv1.Entry) error) error { return nil }
func (s *walStorage) Append(e *netsyv1.Entry) error                   { return s.w.Append(e) }
func (s *walStorage) SaveSnapshot(snap *datafile.Snapshot) error      { return s.w.SaveSnapshot(snap) }

// noSyncFS is the machine's file system with File.Sync a no-op: what the
// write path costs besides the disk's flush.
type noSyncFS struct{ vfs.FS }

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error { return nil }

func (f noSyncFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{file}, nil
}

// BenchmarkPutSequentialWAL measures one writer's Puts one after another
// through a real local log in a temporary directory, from the request to
// the answer: the engine's loop, the log's writer goroutine, the write,
// the fsync and the commit, the path a put-seq client waits on. "nosync"
// skips the fsync, leaving the hand-offs and the engine's and the log's
// own cost; "parallel" has 64 writers, to show a change to that path
// costs the batched writes nothing. Besides ns/op and allocs/op it
// reports cpu-ns/op and the fsyncs per put.
func BenchmarkPutSequentialWAL(b *testing.B) {
	val := make([]byte, 256)
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "/bench/key-%04d", i)
	}
	open := func(b *testing.B, fsys vfs.FS) (*Engine, *walStorage) {
		st := openWALStorage(b, fsys)
		e, err := Open(Config{Storage: st, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)), ClusterID: 1, MemberID: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close(); st.w.Close() })
		return e, st
	}
	serial := func(b *testing.B, fsys vfs.FS) {
		e, st := open(b, fsys)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		syncs := st.syncs.Load()
		cpu := startCPU()
		for i := 0; i < b.N; i++ {
			if _, err := e.Put(ctx, &pb.PutRequest{Key: keys[i%len(keys)], Value: val}); err != nil {
				b.Fatal(err)
			}
		}
		cpu.report(b)
		b.ReportMetric(float64(st.syncs.Load()-syncs)/float64(b.N), "syncs/op")
	}
	b.Run("fsync", func(b *testing.B) { serial(b, vfs.OS()) })
	b.Run("nosync", func(b *testing.B) { serial(b, noSyncFS{vfs.OS()}) })
	b.Run("parallel", func(b *testing.B) {
		e, st := open(b, vfs.OS())
		ctx := context.Background()
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(32) // 64 writers on 2 cores
		b.ResetTimer()
		syncs := st.syncs.Load()
		cpu := startCPU()
		b.RunParallel(func(pb_ *testing.PB) {
			for pb_.Next() {
				i := n.Add(1)
				if _, err := e.Put(ctx, &pb.PutRequest{Key: keys[int(i)%len(keys)], Value: val}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		cpu.report(b)
		b.ReportMetric(float64(st.syncs.Load()-syncs)/float64(b.N), "syncs/op")
	})
}
