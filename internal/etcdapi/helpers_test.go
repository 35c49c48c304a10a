package etcdapi

import (
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type testEnv struct {
	t    *testing.T
	b    *fakeBackend
	srv  *Server
	addr string
}

// newEnv serves a fake Backend on 127.0.0.1; everything stops at cleanup.
func newEnv(t *testing.T, mod func(*Config)) *testEnv {
	t.Helper()
	return newEnvHooks(t, mod, nil)
}

// newEnvHooks is newEnv with test hooks installed before serving.
func newEnvHooks(t *testing.T, mod func(*Config), hooks *testHooks) *testEnv {
	t.Helper()
	b := newFakeBackend()
	srv, addr := serveBackend(t, b, mod, hooks)
	return &testEnv{t: t, b: b, srv: srv, addr: addr}
}

// serveBackend serves b on 127.0.0.1 until the test's cleanup.
func serveBackend(t *testing.T, b Backend, mod func(*Config), hooks *testHooks) (*Server, string) {
	t.Helper()
	cfg := Config{Backend: b}
	if mod != nil {
		mod(&cfg)
	}
	srv := New(cfg)
	srv.hooks = hooks
	return srv, serveOn(t, srv, nil)
}

// serveOn serves srv on 127.0.0.1, through wrap's listener if wrap is not
// nil, until the test's cleanup, and returns the address.
func serveOn(t *testing.T, srv *Server, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	g := srv.NewGRPCServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var serving net.Listener = lis
	if wrap != nil {
		serving = wrap(lis)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(serving)
	}()
	t.Cleanup(func() {
		srv.Close()
		g.Stop()
		<-served
	})
	return lis.Addr().String()
}

// client returns a client/v3 client, closed at cleanup (before the server).
func (e *testEnv) client(mod ...func(*clientv3.Config)) *clientv3.Client {
	e.t.Helper()
	cfg := clientv3.Config{
		Endpoints:   []string{e.addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	for _, m := range mod {
		m(&cfg)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// conn returns a raw gRPC connection for checks client/v3 would hide.
func (e *testEnv) conn() *grpc.ClientConn {
	e.t.Helper()
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// sameStatus reports whether two errors carry the same gRPC code and
// message, which is what etcd clients match on.
func sameStatus(got, want error) bool {
	g, w := status.Convert(got), status.Convert(want)
	return got != nil && g.Code() == w.Code() && g.Message() == w.Message()
}
