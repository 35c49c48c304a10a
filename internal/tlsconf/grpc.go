package tlsconf

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
)

// ServerCredentials are gRPC transport credentials for a config from
// ServerConfig. Refusals are logged by the config itself; these log the
// handshakes that fail before any certificate is looked at (a plaintext
// client, a TLS version below the minimum) at warn with the remote
// address, and a connection closed before saying anything at debug.
func ServerCredentials(cfg *tls.Config, logger hclog.Logger) credentials.TransportCredentials {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &serverCreds{TransportCredentials: credentials.NewTLS(cfg), log: logger}
}

type serverCreds struct {
	credentials.TransportCredentials
	log hclog.Logger
}

func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		var refused *RefusedError
		switch {
		case errors.As(err, &refused):
			// logged with the identity by the verifier
		case errors.Is(err, io.EOF):
			c.log.Debug("tls handshake: connection closed", "remote", raw.RemoteAddr().String())
		default:
			c.log.Warn("tls handshake failed", "remote", raw.RemoteAddr().String(), "error", err)
		}
	}
	return conn, info, err
}

func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log}
}

// IdentityFromContext is the netsy identity of the client of a gRPC
// request, from the certificate it presented on a connection set up by
// ServerConfig, which verified it. It reports false on a plaintext
// connection or when the client presented no certificate.
func IdentityFromContext(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return Identity{}, false
	}
	id, err := FromCert(info.State.PeerCertificates[0])
	if err != nil {
		return Identity{}, false
	}
	return id, true
}

// UnaryRequestLog logs every unary request at debug: method, result code,
// duration and, when the client presented a certificate, its identity.
func UnaryRequestLog(logger hclog.Logger, clk clock.Clock) grpc.UnaryServerInterceptor {
	clk, logger = defaults(clk, logger)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !logger.IsDebug() {
			return handler(ctx, req)
		}
		start := clk.Now()
		resp, err := handler(ctx, req)
		logRequest(ctx, logger, "request", info.FullMethod, err, clk.Since(start))
		return resp, err
	}
}

// StreamRequestLog logs every stream at debug when it ends, like
// UnaryRequestLog.
func StreamRequestLog(logger hclog.Logger, clk clock.Clock) grpc.StreamServerInterceptor {
	clk, logger = defaults(clk, logger)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !logger.IsDebug() {
			return handler(srv, ss)
		}
		start := clk.Now()
		err := handler(srv, ss)
		logRequest(ss.Context(), logger, "stream", info.FullMethod, err, clk.Since(start))
		return err
	}
}

func logRequest(ctx context.Context, logger hclog.Logger, msg, method string, err error, d time.Duration) {
	args := []any{"method", method, "code", status.Code(err).String(), "duration", d}
	if id, ok := IdentityFromContext(ctx); ok {
		args = append(args, "identity", id.String())
	}
	logger.Debug(msg, args...)
}
