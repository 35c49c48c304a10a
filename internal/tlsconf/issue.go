package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// CA is a development certificate authority for one cluster: an ECDSA
// P-256 key and a self-signed certificate that carries the cluster id as
// the URI SAN netsy://{cluster_id}, so certificates issued later cannot
// name another cluster by mistake. It is what `netsyctl certs` uses; a
// production cluster may use any CA that issues certificates with the
// right URI SANs.
type CA struct {
	Cert      *x509.Certificate
	Key       crypto.Signer
	ClusterID string
}

// NewCA creates a CA for clusterID valid from notBefore for validity.
func NewCA(clusterID string, notBefore time.Time, validity time.Duration) (*CA, error) {
	if err := CheckClusterID(clusterID); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "netsy development CA " + clusterID},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: Scheme, Host: clusterID}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, ClusterID: clusterID}, nil
}

// LoadCA reads a CA from its certificate and PKCS #8 key in PEM, as NewCA's
// CertPEM and KeyPEM write them. The certificate must carry the cluster id
// as netsy://{cluster_id}.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certs, err := readCerts(certFile, true)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert := certs[0]
	if !cert.IsCA {
		return nil, fmt.Errorf("CA certificate %s is not a CA", certFile)
	}
	var clusterID string
	for _, u := range cert.URIs {
		if strings.EqualFold(u.Scheme, Scheme) && (u.Path == "" || u.Path == "/") {
			clusterID = u.Hostname()
		}
	}
	if clusterID == "" {
		return nil, fmt.Errorf("CA certificate %s names no cluster (no netsy://{cluster_id} URI SAN)", certFile)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, fmt.Errorf("CA key %s: not PEM", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key %s: %T cannot sign", keyFile, k)
	}
	if !publicKeysEqual(signer.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("CA key %s does not belong to certificate %s", keyFile, certFile)
	}
	return &CA{Cert: cert, Key: signer, ClusterID: clusterID}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ka, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ka.Equal(b)
}

// CertPEM is the CA certificate in PEM, the trusted CA file of every port.
func (ca *CA) CertPEM() []byte { return certPEM(ca.Cert.Raw) }

// KeyPEM is the CA key in PKCS #8 PEM.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// Leaf describes a certificate to issue.
type Leaf struct {
	// Identity goes into the one netsy:// URI SAN. Its cluster id must be
	// the CA's unless AnyCluster is set.
	Identity Identity
	// Hosts are DNS names and IP addresses clients dial the holder by.
	Hosts     []string
	NotBefore time.Time
	Validity  time.Duration
	// ServerAuth and ClientAuth are the extended key usages: a node's
	// certificate has both (it serves and dials), a client's only
	// ClientAuth.
	ServerAuth, ClientAuth bool
	// AnyCluster allows an identity of another cluster (tests of the
	// refusal of foreign identities by a shared CA).
	AnyCluster bool
}

// Issue signs a new ECDSA P-256 key pair for l, returned in PEM.
func (ca *CA) Issue(l Leaf) (cert *x509.Certificate, certPEMBytes, keyPEMBytes []byte, err error) {
	if err := l.Identity.Validate(); err != nil {
		return nil, nil, nil, err
	}
	if l.Identity.ClusterID != ca.ClusterID && !l.AnyCluster {
		return nil, nil, nil, fmt.Errorf("identity %s is not of the CA's cluster %q", l.Identity, ca.ClusterID)
	}
	if !l.ServerAuth && !l.ClientAuth {
		return nil, nil, nil, errors.New("a certificate for neither server nor client authentication")
	}
	if l.Validity <= 0 {
		return nil, nil, nil, fmt.Errorf("validity %s is not positive", l.Validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: l.Identity.Name},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotBefore.Add(l.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		URIs:         []*url.URL{l.Identity.URI()},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	if l.ServerAuth {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.ClientAuth {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range l.Hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(strings.Trim(h, "[]")); {
		case h == "":
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case validDNSName(h):
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		default:
			return nil, nil, nil, fmt.Errorf("host %q is neither a DNS name nor an IP address", h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sign %s: %w", l.Identity, err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, certPEM(der), kp, nil
}

// validDNSName accepts letters, digits, '-' and '.', and a leading "*."
// for a wildcard.
func validDNSName(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 || strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") || strings.Contains(h, "..") {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	return n.Add(n, big.NewInt(1)), nil // serials are positive
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
