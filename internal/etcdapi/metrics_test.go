package etcdapi

import (
	"context"
	"net"
	"testing"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// scrape gathers the server's collectors into name → value (counters and
// gauges only).
func scrape(t *testing.T, s *Server) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			out[mf.GetName()] = metricValue(m)
		}
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// etcd_mvcc_{range,put,delete,txn}_total count what etcd's mvcc layer
// counts: each operation answered with success, those in a txn's executed
// branch included (nested txns too), and a txn once when it ran more than
// one operation.
func TestEtcdOpCountersCountExecutedOperations(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := map[string]float64{"etcd_mvcc_range_total": 0, "etcd_mvcc_put_total": 0, "etcd_mvcc_delete_total": 0, "etcd_mvcc_txn_total": 0}
	check := func(step string) {
		t.Helper()
		got := scrape(t, e.srv)
		for name, w := range want {
			if got[name] != w {
				t.Errorf("after %s: %s = %v, want %v", step, name, got[name], w)
			}
		}
	}
	check("nothing")
	if _, err := cli.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	want["etcd_mvcc_put_total"]++
	if _, err := cli.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	want["etcd_mvcc_range_total"]++
	if _, err := cli.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	want["etcd_mvcc_delete_total"]++
	check("put, get, delete")

	// A txn whose compare fails runs its else branch only: one put, so
	// not counted as a txn.
	if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "x")).
		Then(clientv3.OpPut("b", "1"), clientv3.OpPut("c", "1"), clientv3.OpDelete("d")).
		Else(clientv3.OpPut("e", "1")).Commit(); err != nil {
		t.Fatal(err)
	}
	want["etcd_mvcc_put_total"]++
	check("a txn running one op")

	// Then-branch with a nested txn: two puts, a get, and the nested
	// txn's executed branch (one delete).
	nested := clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpDelete("b")}, []clientv3.Op{clientv3.OpPut("never", "1")})
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("f", "1"), clientv3.OpPut("g", "1"), clientv3.OpGet("f"), nested).Commit(); err != nil {
		t.Fatal(err)
	}
	want["etcd_mvcc_put_total"] += 2
	want["etcd_mvcc_range_total"]++
	want["etcd_mvcc_delete_total"]++
	want["etcd_mvcc_txn_total"]++
	check("a txn with a nested txn")

	// A request refused for its content counts nothing.
	if _, err := cli.Put(ctx, "", "1"); err == nil {
		t.Fatal("a put without a key succeeded")
	}
	check("a refused put")
}

// etcd_debugging_mvcc_watcher_total and ..._watch_stream_total follow the
// watchers this server holds.
func TestEtcdWatcherGaugesFollowWatches(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wc1 := cli.Watch(ctx, "a")
	wc2 := cli.Watch(ctx, "b")
	waitMetric := func(name string, want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := scrape(t, e.srv)[name]
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v, want %v", name, got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitMetric("etcd_debugging_mvcc_watcher_total", 2)
	waitMetric("etcd_debugging_mvcc_watch_stream_total", 1)
	cancel()
	for range wc1 {
	}
	for range wc2 {
	}
	waitMetric("etcd_debugging_mvcc_watcher_total", 0)
}

// BenchmarkUnaryPut is a Put through the client gRPC server over loopback,
// bare and with the gRPC server metrics the node puts on its client port
// (go-grpc-middleware's provider with the handling-time histogram): the
// difference in allocs/op and ns/op is what those metrics cost a write.
func BenchmarkUnaryPut(b *testing.B) {
	for _, withMetrics := range []bool{false, true} {
		name := "bare"
		if withMetrics {
			name = "grpc-metrics"
		}
		b.Run(name, func(b *testing.B) {
			srv := New(Config{Backend: newFakeBackend()})
			var opts []grpc.ServerOption
			if withMetrics {
				m := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
				opts = append(opts, grpc.ChainUnaryInterceptor(m.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(m.StreamServerInterceptor()))
			}
			g := srv.NewGRPCServer(opts...)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = g.Serve(lis) }()
			defer g.Stop()
			defer srv.Close()
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			kv := pb.NewKVClient(cc)
			req := &pb.PutRequest{Key: []byte("key"), Value: []byte("value")}
			ctx := context.Background()
			if _, err := kv.Put(ctx, req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := kv.Put(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
