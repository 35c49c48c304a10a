package config

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"

	"github.com/netsy-io/netsy/internal/tlsconf"
)

// TLS is the transport security of the client and peer ports, with etcd's
// flag names.
type TLS struct {
	// CertFile and KeyFile turn on TLS on the client port.
	CertFile, KeyFile string
	// TrustedCAFile verifies client certificates on the client port.
	TrustedCAFile string
	// ClientCertAuth refuses clients without a certificate.
	ClientCertAuth bool
	// PeerCertFile, PeerKeyFile and PeerTrustedCAFile turn on mutual TLS
	// on the peer port and for every connection to a peer.
	PeerCertFile, PeerKeyFile, PeerTrustedCAFile string
	// MinVersion is "1.3" (default) or "1.2".
	MinVersion string
	// InsecurePlaintext allows plaintext ports on addresses other than
	// loopback.
	InsecurePlaintext bool
}

// ClientTLS reports whether the client port serves TLS.
func (c Config) ClientTLS() bool { return c.TLS.CertFile != "" }

// PeerTLS reports whether the peer port and peer connections use TLS.
func (c Config) PeerTLS() bool { return c.TLS.PeerCertFile != "" }

func (c *Config) bindTLS(fs *flag.FlagSet) {
	t := &c.TLS
	fs.StringVar(&t.CertFile, "cert-file", t.CertFile, "certificate of the client port (TLS; with --key-file)")
	fs.StringVar(&t.KeyFile, "key-file", t.KeyFile, "key of --cert-file")
	fs.StringVar(&t.TrustedCAFile, "trusted-ca-file", t.TrustedCAFile, "CA bundle that signs client certificates on the client port")
	fs.BoolVar(&t.ClientCertAuth, "client-cert-auth", t.ClientCertAuth, "require a client certificate (a netsy://{cluster-id}/client/{name} identity) on the client port")
	fs.StringVar(&t.PeerCertFile, "peer-cert-file", t.PeerCertFile, "certificate of the peer port and of connections to peers (mutual TLS; a netsy://{cluster-id}/peer/{name} identity)")
	fs.StringVar(&t.PeerKeyFile, "peer-key-file", t.PeerKeyFile, "key of --peer-cert-file")
	fs.StringVar(&t.PeerTrustedCAFile, "peer-trusted-ca-file", t.PeerTrustedCAFile, "CA bundle that signs peer certificates (required with --peer-cert-file)")
	fs.StringVar(&t.MinVersion, "tls-min-version", t.MinVersion, "lowest TLS version accepted and offered: 1.3, or 1.2 where a client needs it")
	fs.BoolVar(&t.InsecurePlaintext, "insecure-plaintext", t.InsecurePlaintext, "allow plaintext client and peer ports on addresses other than loopback")
}

// TLSMinVersion is --tls-min-version as a crypto/tls constant.
func (c Config) TLSMinVersion() uint16 {
	if c.TLS.MinVersion == "1.2" {
		return tls.VersionTLS12
	}
	return tls.VersionTLS13
}

func (c Config) validateTLS() error {
	t := c.TLS
	switch t.MinVersion {
	case "1.3", "1.2":
	default:
		return fmt.Errorf("--tls-min-version: %q is not 1.3 or 1.2", t.MinVersion)
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("--cert-file and --key-file: TLS on the client port needs both")
	}
	if t.TrustedCAFile != "" && t.CertFile == "" {
		return errors.New("--trusted-ca-file: needs --cert-file and --key-file (client certificates are verified only on a TLS client port)")
	}
	if t.ClientCertAuth && t.TrustedCAFile == "" {
		return errors.New("--client-cert-auth: needs --trusted-ca-file to verify the certificates it requires (and --cert-file, --key-file)")
	}
	if (t.PeerCertFile == "") != (t.PeerKeyFile == "") {
		return errors.New("--peer-cert-file and --peer-key-file: TLS on the peer port needs both")
	}
	if t.PeerCertFile != "" && t.PeerTrustedCAFile == "" {
		return errors.New("--peer-trusted-ca-file: required with --peer-cert-file, peers always authenticate each other")
	}
	if t.PeerTrustedCAFile != "" && t.PeerCertFile == "" {
		return errors.New("--peer-trusted-ca-file: needs --peer-cert-file and --peer-key-file")
	}
	if c.ClientTLS() || c.PeerTLS() {
		if err := tlsconf.CheckClusterID(c.ClusterID); err != nil {
			return fmt.Errorf("--cluster-id: %w (it is part of every certificate's identity)", err)
		}
	}
	if !t.InsecurePlaintext {
		if !c.ClientTLS() && !loopbackHost(c.ClientAddr) {
			return fmt.Errorf("--client-addr %s: plaintext is served only on loopback addresses: give --cert-file and --key-file for TLS, or --insecure-plaintext to serve plaintext on purpose", c.ClientAddr)
		}
		if !c.PeerTLS() && !loopbackHost(c.PeerAddr) {
			return fmt.Errorf("--peer-addr %s: plaintext is served only on loopback addresses: give --peer-cert-file, --peer-key-file and --peer-trusted-ca-file for mutual TLS, or --insecure-plaintext to serve plaintext on purpose", c.PeerAddr)
		}
	}
	if c.AdvertiseClient != "" {
		switch {
		case c.ClientTLS() && strings.HasPrefix(c.AdvertiseClient, "http://"):
			return fmt.Errorf("--advertise-client: %q is http:// but the client port serves TLS (--cert-file): use https://", c.AdvertiseClient)
		case !c.ClientTLS() && strings.HasPrefix(c.AdvertiseClient, "https://"):
			return fmt.Errorf("--advertise-client: %q is https:// but the client port serves plaintext: give --cert-file and --key-file, or use http://", c.AdvertiseClient)
		}
	}
	return nil
}

// loopbackHost reports whether host:port names a loopback address:
// localhost, 127.0.0.0/8 or ::1.
func loopbackHost(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
