package tlsconf

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Role is what a certificate's holder may do: talk to the peer port as a
// member of the cluster, or to the client port as a client.
type Role string

const (
	RolePeer   Role = "peer"
	RoleClient Role = "client"
)

// Scheme is the URI scheme of a Netsy identity.
const Scheme = "netsy"

// maxSegment bounds a cluster id or name in an identity.
const maxSegment = 128

// ErrNoIdentity is returned by FromCert for a certificate without a
// netsy:// URI SAN.
var ErrNoIdentity = errors.New("certificate has no netsy:// URI SAN")

// Identity is who a certificate speaks for: netsy://{cluster_id}/{role}/{name}.
type Identity struct {
	ClusterID string
	Role      Role
	Name      string
}

// URI is the identity as it appears in a certificate's URI SAN.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: Scheme, Host: id.ClusterID, Path: "/" + string(id.Role) + "/" + id.Name}
}

func (id Identity) String() string { return id.URI().String() }

// Validate reports a role other than peer or client, or a cluster id or
// name that is empty or not made of letters, digits, '.', '-' and '_'
// (starting with a letter or digit), which keeps every identity one
// unambiguous URI.
func (id Identity) Validate() error {
	if err := checkSegment("cluster id", id.ClusterID); err != nil {
		return err
	}
	if id.Role != RolePeer && id.Role != RoleClient {
		return fmt.Errorf("role %q is not %q or %q", id.Role, RolePeer, RoleClient)
	}
	return checkSegment("name", id.Name)
}

// CheckClusterID reports a cluster id that cannot appear in an identity.
func CheckClusterID(id string) error { return checkSegment("cluster id", id) }

// CheckName reports a peer or client name that cannot appear in an identity.
func CheckName(name string) error { return checkSegment("name", name) }

func checkSegment(what, s string) error {
	if s == "" {
		return fmt.Errorf("empty %s", what)
	}
	if len(s) > maxSegment {
		return fmt.Errorf("%s %q is longer than %d bytes", what, s, maxSegment)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if i == 0 && !alnum {
			return fmt.Errorf("%s %q must start with a letter or digit", what, s)
		}
		if !alnum && c != '.' && c != '-' && c != '_' {
			return fmt.Errorf("%s %q: character %q is not allowed (use letters, digits, '.', '-', '_')", what, s, c)
		}
	}
	return nil
}

// ParseURI reads an identity from netsy://{cluster_id}/{peer|client}/{name}.
// Anything else in the URI (user, port, query, fragment, more path
// segments) is an error, so one identity has exactly one spelling.
func ParseURI(u *url.URL) (Identity, error) {
	if u == nil {
		return Identity{}, errors.New("nil URI")
	}
	if !strings.EqualFold(u.Scheme, Scheme) {
		return Identity{}, fmt.Errorf("URI %q: scheme is not %s://", u, Scheme)
	}
	if u.Opaque != "" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return Identity{}, fmt.Errorf("URI %q: want exactly %s://{cluster_id}/{peer|client}/{name}", u, Scheme)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if !strings.HasPrefix(u.Path, "/") || len(parts) != 2 {
		return Identity{}, fmt.Errorf("URI %q: path is not /{peer|client}/{name}", u)
	}
	id := Identity{ClusterID: u.Hostname(), Role: Role(parts[0]), Name: parts[1]}
	if err := id.Validate(); err != nil {
		return Identity{}, fmt.Errorf("URI %q: %w", u, err)
	}
	return id, nil
}

// FromCert reads the identity of a certificate from its one netsy:// URI
// SAN. URI SANs of other schemes are ignored; none or several netsy:// ones
// are an error (ErrNoIdentity for none). FromCert does not verify the
// certificate: only a certificate that passed verification speaks for the
// identity it names.
func FromCert(c *x509.Certificate) (Identity, error) {
	if c == nil {
		return Identity{}, errors.New("no certificate")
	}
	var found []*url.URL
	for _, u := range c.URIs {
		if strings.EqualFold(u.Scheme, Scheme) {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return Identity{}, ErrNoIdentity
	case 1:
		return ParseURI(found[0])
	}
	return Identity{}, fmt.Errorf("certificate has %d netsy:// URI SANs, want exactly one", len(found))
}
