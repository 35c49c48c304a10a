package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
)

// ServerOptions configure the TLS of a listening port. Error messages name
// the etcd-style flags of the port: --cert-file, --key-file,
// --trusted-ca-file and --client-cert-auth for the client port,
// --peer-cert-file, --peer-key-file and --peer-trusted-ca-file for the
// peer port.
type ServerOptions struct {
	// CertFile and KeyFile are the port's certificate and key; they are
	// reloaded when they change.
	CertFile, KeyFile string
	// TrustedCAFile holds the CAs that sign the certificates clients may
	// present; it is reloaded when it changes. Without it (client port
	// only) clients are not asked for a certificate.
	TrustedCAFile string
	// ClusterID is this cluster's id; presented identities must carry it.
	ClusterID string
	// AcceptRole is the one role the port accepts: RoleClient on the
	// client port, RolePeer on the peer port.
	AcceptRole Role
	// RequireClientCert refuses connections without a certificate
	// (--client-cert-auth). Without it a certificate is still verified
	// when one is presented. The peer port always requires one.
	RequireClientCert bool
	// MinVersion is tls.VersionTLS13 when zero; tls.VersionTLS12 must be
	// asked for explicitly.
	MinVersion uint16
	Clock      clock.Clock
	Logger     hclog.Logger
}

type portFlags struct{ port, cert, key, ca string }

func flagsFor(r Role) portFlags {
	if r == RolePeer {
		return portFlags{"peer port", "--peer-cert-file", "--peer-key-file", "--peer-trusted-ca-file"}
	}
	return portFlags{"client port", "--cert-file", "--key-file", "--trusted-ca-file"}
}

// ServerConfig builds the tls.Config of a port. Each handshake gets the
// certificate and CAs as they are on disk (looked at no more than once a
// second) and verifies the client's certificate itself: signed by a
// trusted CA, valid by the injected clock, meant for client
// authentication, and with exactly one netsy identity of ClusterID and
// AcceptRole. Every refusal is logged at warn with the identity presented
// and the reason, and fails the handshake with a *RefusedError.
//
// Session tickets are off, so every connection is verified in full against
// the files of the moment. Use it with ServerCredentials to have the other
// handshake failures (plaintext, an old TLS version) logged as well.
func ServerConfig(opts ServerOptions) (*tls.Config, error) {
	if opts.AcceptRole != RolePeer && opts.AcceptRole != RoleClient {
		return nil, fmt.Errorf("tls server: accepted role %q is not %q or %q", opts.AcceptRole, RolePeer, RoleClient)
	}
	f := flagsFor(opts.AcceptRole)
	clk, logger := defaults(opts.Clock, opts.Logger)
	require := opts.RequireClientCert || opts.AcceptRole == RolePeer
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, fmt.Errorf("%s and %s: TLS on the %s needs both", f.cert, f.key, f.port)
	}
	if require && opts.TrustedCAFile == "" {
		if opts.AcceptRole == RolePeer {
			return nil, fmt.Errorf("%s: required with %s, peers always authenticate each other", f.ca, f.cert)
		}
		return nil, fmt.Errorf("%s: required by --client-cert-auth", f.ca)
	}
	if opts.TrustedCAFile != "" {
		if err := CheckClusterID(opts.ClusterID); err != nil {
			return nil, fmt.Errorf("tls server: %w: presented identities are checked against it", err)
		}
	}
	minV, err := minVersion(opts.MinVersion)
	if err != nil {
		return nil, err
	}
	kp, err := NewReloader(opts.CertFile, opts.KeyFile, clk, logger)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", f.cert, f.key, err)
	}
	base := &tls.Config{
		MinVersion:             minV,
		GetCertificate:         kp.GetCertificate,
		Time:                   clk.Now,
		SessionTicketsDisabled: true,
		ClientAuth:             tls.NoClientCert,
	}
	if opts.TrustedCAFile == "" {
		return base, nil
	}
	cas, err := NewCAPool(opts.TrustedCAFile, clk, logger)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.ca, err)
	}
	v := &verifier{by: f.port, clusterID: opts.ClusterID, accept: opts.AcceptRole,
		usage: x509.ExtKeyUsageClientAuth, cas: cas, clk: clk, log: logger}
	verify := func(remote string) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 && !require {
				return nil
			}
			id, refused := v.check(cs.PeerCertificates)
			if refused != nil {
				return v.refused(refused, "remote", remote)
			}
			logger.Trace("tls client verified", "by", f.port, "identity", id.String(), "remote", remote)
			return nil
		}
	}
	// Requested, not required: a missing certificate is then refused by
	// verify, with the same log line as every other refusal.
	base.ClientAuth = tls.RequestClientCert
	base.VerifyConnection = verify("")
	base.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		// Tells clients which CAs are trusted; the check itself is verify's.
		c.ClientCAs = cas.Pool()
		remote := ""
		if hello.Conn != nil {
			remote = hello.Conn.RemoteAddr().String()
		}
		c.VerifyConnection = verify(remote)
		return c, nil
	}
	return base, nil
}
