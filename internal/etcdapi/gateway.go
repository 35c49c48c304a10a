package etcdapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
)

// Gateway is etcd's JSON gateway: etcd's own generated handlers
// (go.etcd.io/etcd/api/v3/etcdserverpb/gw) on grpc-gateway's runtime,
// configured as etcd 3.6 configures them, so every path, field name and
// error body is etcd's.
//
// The handlers call a gRPC server of their own that serves this Server's
// services on an in-process listener: nothing outside the process can
// reach it, so the gateway is no way around the client port's TLS. The
// HTTP client was verified by the client port's handshake (the same
// tls.Config as gRPC clients, see internal/portmux); its certificate is
// passed to the inner server with each call, so tlsconf.IdentityFromContext
// (and the request log) name the HTTP client, not the gateway.
type Gateway struct {
	inner   *grpc.Server
	lis     *bufconn.Listener
	conn    *grpc.ClientConn
	handler http.Handler

	wg        sync.WaitGroup
	closeOnce sync.Once
}

var _ http.Handler = (*Gateway)(nil)

// gatewayBufBytes is the in-process connection's buffer per direction.
const gatewayBufBytes = 1 << 20

// Metadata the gateway attaches to each call; clients cannot set them (the
// gateway's header matcher drops any header that would map onto them).
const (
	gatewayMDPrefix = "netsy-gateway-"
	gatewayCertMD   = gatewayMDPrefix + "client-cert-bin"
	gatewayRemoteMD = gatewayMDPrefix + "remote"
)

// NewGateway starts the gateway's inner gRPC server with ServerOptions,
// extra (the request log) and every service registered, and returns the
// gateway. Close stops it; call Server.Close first so that watch and
// keep-alive streams end.
func (s *Server) NewGateway(extra ...grpc.ServerOption) (*Gateway, error) {
	g := &Gateway{lis: bufconn.Listen(gatewayBufBytes)}
	opts := append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(gatewayUnaryPeer),
		grpc.ChainStreamInterceptor(gatewayStreamPeer),
	}, extra...)
	g.inner = s.NewGRPCServer(opts...)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		_ = g.inner.Serve(g.lis)
	}()
	conn, err := grpc.NewClient("passthrough:///netsy-gateway",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return g.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// etcd's gateway takes responses of any size, as etcdctl does.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		g.inner.Stop()
		g.wg.Wait()
		return nil, fmt.Errorf("gateway: connect to the in-process server: %w", err)
	}
	g.conn = conn
	mux := newGatewayMux()
	for _, register := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		gw.RegisterKVHandler,
		gw.RegisterWatchHandler,
		gw.RegisterLeaseHandler,
		gw.RegisterClusterHandler,
		gw.RegisterMaintenanceHandler,
		gw.RegisterAuthHandler,
	} {
		if err := register(context.Background(), mux, conn); err != nil {
			g.Close()
			return nil, fmt.Errorf("gateway: register handlers: %w", err)
		}
	}
	g.handler = gatewayAccess(mux)
	return g, nil
}

// newGatewayMux is grpc-gateway's mux as etcd 3.6 (server/embed/serve.go)
// sets it up: proto field names (range_end, create_revision), unset fields
// left out, int64 as strings, bytes as base64, unknown request fields
// ignored, errors as {"code":...,"message":...}. Only the header matcher
// is ours, so that a client cannot pose as the gateway's own metadata.
func newGatewayMux() *runtime.ServeMux {
	return runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, compactJSON{&runtime.HTTPBodyMarshaler{
			Marshaler: &runtime.JSONPb{
				MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
				UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
			},
		}}),
		runtime.WithErrorHandler(stableErrorText),
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			k, ok := runtime.DefaultHeaderMatcher(key)
			if ok && strings.HasPrefix(strings.ToLower(k), gatewayMDPrefix) {
				return "", false
			}
			return k, ok
		}),
		runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD {
			md := metadata.Pairs(gatewayRemoteMD, r.RemoteAddr)
			if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
				md.Set(gatewayCertMD, string(r.TLS.PeerCertificates[0].Raw))
			}
			return md
		}),
	)
}

// compactJSON is etcd's marshaler with its output compacted. protojson
// inserts a space after some separators in some builds (it varies its
// output per binary on purpose, so nobody depends on it); etcd's release
// binaries print none, and scripts grep for "count":"1". Compacting makes
// every netsy build print what etcd prints.
type compactJSON struct{ *runtime.HTTPBodyMarshaler }

func (m compactJSON) Marshal(v any) ([]byte, error) {
	b, err := m.HTTPBodyMarshaler.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(len(b))
	if err := json.Compact(&out, b); err != nil {
		return b, nil // not JSON (an HttpBody's raw bytes): send it as is
	}
	return out.Bytes(), nil
}

// stableErrorText is grpc-gateway's error handler with protobuf's
// non-breaking spaces made plain. protobuf writes "proto:" and a space
// that is a U+00A0 in some builds (on purpose, like the spacing above);
// etcd's binary writes a plain space, so bad JSON gets etcd's exact text.
func stableErrorText(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if st, ok := status.FromError(err); ok && strings.Contains(st.Message(), "\u00a0") {
		err = status.Error(st.Code(), strings.ReplaceAll(st.Message(), "\u00a0", " "))
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// gatewayAccess is what etcd's access controller does for gateway paths:
// the old /v3beta/ prefix still works, and CORS is open (etcd's default
// --cors "*"), with a preflight OPTIONS answered at once.
func gatewayAccess(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v3beta/") {
			r.URL.Path = "/v3/" + strings.TrimPrefix(r.URL.Path, "/v3beta/")
		}
		h := w.Header()
		h.Add("Access-Control-Allow-Methods", "POST, GET, OPTIONS, PUT, DELETE")
		h.Add("Access-Control-Allow-Origin", "*")
		h.Add("Access-Control-Allow-Headers", "accept, content-type, authorization")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// ServeHTTP serves one gateway request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// Close closes the gateway's connection and stops its inner server.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		if g.conn != nil {
			g.conn.Close()
		}
		g.inner.Stop()
		g.wg.Wait()
	})
}

// gatewayPeer makes the HTTP client the peer of a call on the inner server:
// its address and, when it presented one, its verified certificate. Only
// the gateway can reach the inner server, and it sets these from the HTTP
// connection.
func gatewayPeer(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	p := &peer.Peer{Addr: gatewayAddr(first(md.Get(gatewayRemoteMD)))}
	if der := first(md.Get(gatewayCertMD)); der != "" {
		if cert, err := x509.ParseCertificate([]byte(der)); err == nil {
			p.AuthInfo = credentials.TLSInfo{
				State:          tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{cert}},
				CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
			}
		}
	}
	return peer.NewContext(ctx, p)
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// gatewayAddr is an HTTP client's address as net/http reports it.
type gatewayAddr string

func (a gatewayAddr) Network() string { return "tcp" }
func (a gatewayAddr) String() string  { return string(a) }

func gatewayUnaryPeer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(gatewayPeer(ctx), req)
}

func gatewayStreamPeer(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &peerStream{ServerStream: ss, ctx: gatewayPeer(ss.Context())})
}

type peerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *peerStream) Context() context.Context { return s.ctx }
