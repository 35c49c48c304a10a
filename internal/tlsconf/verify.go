package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
)

// RefusedError is why a handshake was refused. A server returns it from
// certificate verification, so the handshake fails with it and the client
// gets a bad_certificate alert; a client returns it when the server is not
// who it must be.
type RefusedError struct {
	// By is the side that refused: "client port", "peer port" or
	// "peer client".
	By string
	// Identity is the identity the certificate presented: a netsy:// URI,
	// "no netsy identity (...)" or "no certificate". It is what the
	// certificate claims, not something verified.
	Identity string
	// Reason says what was wrong with it.
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("tls: %s refused %s: %s", e.By, e.Identity, e.Reason)
}

// verifier checks a presented chain: signed by a trusted CA, valid now by
// the injected clock, meant for the right use, and carrying exactly one
// netsy identity of this cluster with the accepted role.
type verifier struct {
	by        string
	clusterID string
	accept    Role
	usage     x509.ExtKeyUsage
	cas       *CAPool
	clk       clock.Clock
	log       hclog.Logger
}

// check returns the verified identity, or why certs are refused.
func (v *verifier) check(certs []*x509.Certificate) (Identity, *RefusedError) {
	refuse := func(who, format string, args ...any) *RefusedError {
		return &RefusedError{By: v.by, Identity: who, Reason: fmt.Sprintf(format, args...)}
	}
	if len(certs) == 0 {
		return Identity{}, refuse("no certificate", "a certificate is required")
	}
	leaf := certs[0]
	who := describe(leaf)
	now := v.clk.Wall()
	if now.After(leaf.NotAfter) {
		return Identity{}, refuse(who, "certificate expired at %s (now %s)", stamp(leaf.NotAfter), stamp(now))
	}
	if now.Before(leaf.NotBefore) {
		return Identity{}, refuse(who, "certificate is not valid before %s (now %s)", stamp(leaf.NotBefore), stamp(now))
	}
	opts := x509.VerifyOptions{
		Roots:         v.cas.Pool(),
		Intermediates: x509.NewCertPool(),
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{v.usage},
	}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		var unknown x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		switch {
		case errors.As(err, &unknown):
			return Identity{}, refuse(who, "not signed by a CA of the trusted CA file %s (issuer %q)", v.cas.File(), leaf.Issuer.String())
		case errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage:
			return Identity{}, refuse(who, "certificate is not for %s (extended key usage)", usageName(v.usage))
		}
		return Identity{}, refuse(who, "certificate does not verify against the trusted CA file %s: %v", v.cas.File(), err)
	}
	id, err := FromCert(leaf)
	if err != nil {
		return Identity{}, refuse(who, "%v", err)
	}
	if id.ClusterID != v.clusterID {
		return Identity{}, refuse(who, "cluster id %q is not this cluster's (%q)", id.ClusterID, v.clusterID)
	}
	if id.Role != v.accept {
		return Identity{}, refuse(who, "a %s identity is not accepted here (only %s identities)", id.Role, v.accept)
	}
	return id, nil
}

// refused logs a refusal and returns it as an error.
func (v *verifier) refused(e *RefusedError, args ...any) error {
	v.log.Warn("tls handshake refused", append([]any{"by", e.By, "identity", e.Identity, "reason", e.Reason}, args...)...)
	return e
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageClientAuth:
		return "client authentication"
	case x509.ExtKeyUsageServerAuth:
		return "server authentication"
	}
	return fmt.Sprintf("extended key usage %d", u)
}

// minVersion maps the MinVersion option: 0 is TLS 1.3; TLS 1.2 only when
// asked for by name.
func minVersion(v uint16) (uint16, error) {
	switch v {
	case 0, tls.VersionTLS13:
		return tls.VersionTLS13, nil
	case tls.VersionTLS12:
		return tls.VersionTLS12, nil
	}
	return 0, fmt.Errorf("minimum TLS version %#04x: only TLS 1.2 and TLS 1.3 are supported", v)
}

func defaults(clk clock.Clock, logger hclog.Logger) (clock.Clock, hclog.Logger) {
	if clk == nil {
		clk = clock.Real()
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return clk, logger
}
