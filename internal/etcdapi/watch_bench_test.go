package etcdapi

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// benchStream is a Watch stream without a transport: SendMsg marshals
// through the server's codec, as gRPC would, and drops the bytes, so a
// benchmark counts the server's own cost of a response.
type benchStream struct {
	grpc.ServerStream
	codec *codec
	sent  int
}

func (s *benchStream) Context() context.Context       { return context.Background() }
func (s *benchStream) Send(r *pb.WatchResponse) error { return s.SendMsg(r) }
func (s *benchStream) SendMsg(m any) error {
	b, err := s.codec.Marshal(m)
	if err != nil {
		return err
	}
	b.Free()
	s.sent++
	return nil
}
func (s *benchStream) Recv() (*pb.WatchRequest, error) { select {} }

// BenchmarkWatchFanout delivers one put at a time to streams × watchers
// watchers of that one key (etcd's `benchmark watch` shape, watch-hot
// is 10 × 100) and reports the allocations per event per watcher: the
// part of a revision's cost that grows with the number of watchers.
func BenchmarkWatchFanout(b *testing.B) {
	for _, shape := range []struct{ streams, watchers int }{{1, 100}, {10, 100}} {
		b.Run(fmt.Sprintf("streams=%d/watchers=%d", shape.streams, shape.watchers), func(b *testing.B) {
			fb := newFakeBackend()
			s := New(Config{Backend: fb})
			var streams []*watchStream
			for range shape.streams {
				ws := &watchStream{s: s, stream: &benchStream{codec: newCodec()}, watchers: make(map[int64]*watcher)}
				ws.cur = fb.CurrentRevision()
				ws.hdr = s.headerAt(ws.cur)
				for range shape.watchers {
					if err := ws.create(&pb.WatchCreateRequest{Key: []byte("hot")}); err != nil {
						b.Fatal(err)
					}
				}
				streams = append(streams, ws)
			}
			put := &pb.PutRequest{Key: []byte("hot"), Value: []byte("data")}
			b.ReportAllocs()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ResetTimer()
			for range b.N {
				if _, err := fb.Put(context.Background(), put); err != nil {
					b.Fatal(err)
				}
				cur := fb.CurrentRevision()
				for _, ws := range streams {
					ws.cur = cur
					ws.hdr = s.headerAt(cur)
					if synced, err := ws.sync(); err != nil || !synced {
						b.Fatalf("sync: %v %v", synced, err)
					}
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&m1)
			per := float64(b.N * shape.streams * shape.watchers)
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/per, "allocs/event/watcher")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/event/watcher")
		})
	}
}
