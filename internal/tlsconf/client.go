package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
)

// ClientOptions configure the TLS of a connection this process dials.
type ClientOptions struct {
	// CertFile and KeyFile are the certificate presented to the server;
	// both or neither. They are reloaded when they change.
	CertFile, KeyFile string
	// TrustedCAFile holds the CAs that sign the server's certificate.
	// Empty means the system's roots, and only without ServerRole.
	TrustedCAFile string
	// ServerRole RolePeer authenticates the server by its netsy identity:
	// a peer of ClusterID signed by a CA of TrustedCAFile (reloaded), host
	// names playing no part. This is the peer dialer's mode; it needs a
	// certificate, the CA file and ClusterID.
	//
	// Empty authenticates the server by host name, as any TLS client does
	// (etcd clients, netsyctl); TrustedCAFile is then read once.
	ServerRole Role
	// ClusterID is this cluster's id (ServerRole RolePeer).
	ClusterID string
	// MinVersion is tls.VersionTLS13 when zero; tls.VersionTLS12 must be
	// asked for explicitly.
	MinVersion uint16
	Clock      clock.Clock
	Logger     hclog.Logger
}

// ClientConfig builds the tls.Config of a dialer. With ServerRole RolePeer
// a server that is not a peer of this cluster is refused with a
// *RefusedError, logged at warn with its identity and the reason.
func ClientConfig(opts ClientOptions) (*tls.Config, error) {
	clk, logger := defaults(opts.Clock, opts.Logger)
	minV, err := minVersion(opts.MinVersion)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: minV, Time: clk.Now}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, fmt.Errorf("tls client: certificate %q and key %q: give both or neither", opts.CertFile, opts.KeyFile)
	}
	if opts.CertFile != "" {
		kp, err := NewReloader(opts.CertFile, opts.KeyFile, clk, logger)
		if err != nil {
			return nil, fmt.Errorf("tls client: %w", err)
		}
		cfg.GetClientCertificate = kp.GetClientCertificate
	}
	switch opts.ServerRole {
	case "":
		if opts.TrustedCAFile != "" {
			certs, err := readCerts(opts.TrustedCAFile, true)
			if err != nil {
				return nil, fmt.Errorf("tls client: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			for _, c := range certs {
				cfg.RootCAs.AddCert(c)
			}
		}
		return cfg, nil
	case RolePeer:
	default:
		return nil, fmt.Errorf("tls client: server role %q: only %q servers are verified by identity (leave it empty to verify the host name)", opts.ServerRole, RolePeer)
	}
	if opts.CertFile == "" {
		return nil, fmt.Errorf("tls client: peers authenticate each other: a certificate and key are required")
	}
	if opts.TrustedCAFile == "" {
		return nil, fmt.Errorf("tls client: a trusted CA file is required to verify peers")
	}
	if err := CheckClusterID(opts.ClusterID); err != nil {
		return nil, fmt.Errorf("tls client: %w", err)
	}
	cas, err := NewCAPool(opts.TrustedCAFile, clk, logger)
	if err != nil {
		return nil, fmt.Errorf("tls client: %w", err)
	}
	v := &verifier{by: "peer client", clusterID: opts.ClusterID, accept: RolePeer,
		usage: x509.ExtKeyUsageServerAuth, cas: cas, clk: clk, log: logger}
	// The standard verification would check a host name and read the CA
	// file once; peers are known by identity and the CAs are reloaded, so
	// VerifyConnection does the whole verification instead.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if _, refused := v.check(cs.PeerCertificates); refused != nil {
			return v.refused(refused, "server_name", cs.ServerName)
		}
		return nil
	}
	return cfg, nil
}
