package etcdapi

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

// BenchmarkWatchCommitToEvent times one commit to the moment the last of
// streams × watchers watchers of the committed key holds its event, over
// a real gRPC server on loopback (the watch-latency row's shape is 10 ×
// 10): the commit's wake-up, each stream's pass, gRPC's writer and the
// client's decoding. ns/op is that latency; allocs/op include the
// client's. Pacing is off: commits follow each other back to back here,
// which the server would otherwise (rightly) batch.
func BenchmarkWatchCommitToEvent(b *testing.B) {
	for _, shape := range []struct{ streams, watchers int }{{10, 10}, {10, 100}} {
		b.Run(fmt.Sprintf("streams=%d/watchers=%d", shape.streams, shape.watchers), func(b *testing.B) {
			fb := newFakeBackend()
			s := New(Config{Backend: fb, WatchResponseCost: -1})
			g := s.NewGRPCServer()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			served := make(chan struct{})
			go func() {
				defer close(served)
				_ = g.Serve(lis)
			}()
			defer func() {
				s.Close()
				g.Stop()
				<-served
			}()
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			// got receives one token per watcher per event.
			got := make(chan struct{}, shape.streams*shape.watchers)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			for range shape.streams {
				st, err := pb.NewWatchClient(cc).Watch(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for range shape.watchers {
					if err := st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
						CreateRequest: &pb.WatchCreateRequest{Key: []byte("hot")}}}); err != nil {
						b.Fatal(err)
					}
					if r, err := st.Recv(); err != nil || !r.Created {
						b.Fatalf("create: %v %v", r, err)
					}
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						r, err := st.Recv()
						if err != nil {
							return
						}
						for range r.Events {
							got <- struct{}{}
						}
					}
				}()
			}
			put := &pb.PutRequest{Key: []byte("hot"), Value: make([]byte, 256)}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := fb.Put(context.Background(), put); err != nil {
					b.Fatal(err)
				}
				for range shape.streams * shape.watchers {
					<-got
				}
			}
		})
	}
}
