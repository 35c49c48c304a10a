package node

import (
	"crypto/tls"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/tlsconf"
)

// nodeTLS is the TLS of the node's two ports and of its connections to
// peers, built once at start from the flags; tlsconf reads the files again
// when they change. A nil config is plaintext (loopback, or
// --insecure-plaintext: config.Validate decided).
type nodeTLS struct {
	// client serves the client port: client identities only.
	client *tls.Config
	// peer serves the peer port and peerDial dials it: peer identities of
	// this cluster only, both ways. Requests a node forwards to the
	// Primary travel here, under the forwarding node's peer identity.
	peer, peerDial *tls.Config
	log            hclog.Logger
	files          []string
}

func newNodeTLS(cfg config.Config, clk clock.Clock, logger hclog.Logger) (*nodeTLS, error) {
	t := &nodeTLS{log: logger.Named("tls")}
	minV := cfg.TLSMinVersion()
	var err error
	if cfg.ClientTLS() {
		t.client, err = tlsconf.ServerConfig(tlsconf.ServerOptions{
			CertFile:          cfg.TLS.CertFile,
			KeyFile:           cfg.TLS.KeyFile,
			TrustedCAFile:     cfg.TLS.TrustedCAFile,
			ClusterID:         cfg.ClusterID,
			AcceptRole:        tlsconf.RoleClient,
			RequireClientCert: cfg.TLS.ClientCertAuth,
			MinVersion:        minV,
			Clock:             clk,
			Logger:            t.log,
		})
		if err != nil {
			return nil, fmt.Errorf("client port TLS: %w", err)
		}
	}
	if cfg.PeerTLS() {
		t.peer, err = tlsconf.ServerConfig(tlsconf.ServerOptions{
			CertFile:      cfg.TLS.PeerCertFile,
			KeyFile:       cfg.TLS.PeerKeyFile,
			TrustedCAFile: cfg.TLS.PeerTrustedCAFile,
			ClusterID:     cfg.ClusterID,
			AcceptRole:    tlsconf.RolePeer,
			MinVersion:    minV,
			Clock:         clk,
			Logger:        t.log,
		})
		if err != nil {
			return nil, fmt.Errorf("peer port TLS: %w", err)
		}
		t.peerDial, err = tlsconf.ClientConfig(tlsconf.ClientOptions{
			CertFile:      cfg.TLS.PeerCertFile,
			KeyFile:       cfg.TLS.PeerKeyFile,
			TrustedCAFile: cfg.TLS.PeerTrustedCAFile,
			ServerRole:    tlsconf.RolePeer,
			ClusterID:     cfg.ClusterID,
			MinVersion:    minV,
			Clock:         clk,
			Logger:        t.log,
		})
		if err != nil {
			return nil, fmt.Errorf("--peer-cert-file/--peer-key-file/--peer-trusted-ca-file: %w", err)
		}
	}
	t.files = []string{cfg.TLS.CertFile, cfg.TLS.TrustedCAFile, cfg.TLS.PeerCertFile, cfg.TLS.PeerTrustedCAFile}
	client := "plaintext"
	switch {
	case t.client != nil && cfg.TLS.ClientCertAuth:
		client = "TLS, client certificates required"
	case t.client != nil && cfg.TLS.TrustedCAFile != "":
		client = "TLS, client certificates verified when presented"
	case t.client != nil:
		client = "TLS"
	}
	peer := "plaintext"
	if t.peer != nil {
		peer = "mutual TLS"
	}
	t.log.Info("transport security", "client_port", client, "peer_port", peer, "tls_min_version", cfg.TLS.MinVersion,
		"cluster_id", cfg.ClusterID)
	return t, nil
}

// clientServerOptions are the client port's TLS credentials and its
// request log (debug), which names the client's identity when it presented
// a certificate.
func (t *nodeTLS) clientServerOptions(logger hclog.Logger, clk clock.Clock) []grpc.ServerOption {
	opts := t.requestLogOptions(logger, clk)
	if t.client != nil {
		opts = append(opts, grpc.Creds(tlsconf.ServerCredentials(t.client, t.log)))
	}
	return opts
}

// requestLogOptions are the client port's request log (debug), also used by
// the JSON gateway's inner server, where the identity is the HTTP client's.
func (t *nodeTLS) requestLogOptions(logger hclog.Logger, clk clock.Clock) []grpc.ServerOption {
	reqLog := logger.Named("request")
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(tlsconf.UnaryRequestLog(reqLog, clk)),
		grpc.ChainStreamInterceptor(tlsconf.StreamRequestLog(reqLog, clk)),
	}
}

// peerServerOptions are the peer port's mutual TLS credentials.
func (t *nodeTLS) peerServerOptions() []grpc.ServerOption {
	if t.peer == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(tlsconf.ServerCredentials(t.peer, t.log))}
}

// peerDialOptions make every connection to a peer mutual TLS.
func (t *nodeTLS) peerDialOptions() []grpc.DialOption {
	if t.peerDial == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(t.peerDial))}
}

// collector reports each certificate's and CA file's expiry.
func (t *nodeTLS) collector() prometheus.Collector {
	return tlsconf.NewExpiryCollector(t.files...)
}
