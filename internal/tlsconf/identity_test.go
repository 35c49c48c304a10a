package tlsconf

import (
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { goleakMain(m) }

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want Identity
		err  string
	}{
		{uri: "netsy://c1/peer/node-1", want: Identity{"c1", RolePeer, "node-1"}},
		{uri: "netsy://prod.eu_1/client/kube-apiserver", want: Identity{"prod.eu_1", RoleClient, "kube-apiserver"}},
		{uri: "NETSY://c1/client/a", want: Identity{"c1", RoleClient, "a"}},
		{uri: "spiffe://c1/peer/a", err: "scheme is not netsy://"},
		{uri: "netsy://c1/admin/a", err: `role "admin" is not "peer" or "client"`},
		{uri: "netsy://c1/peer", err: "path is not /{peer|client}/{name}"},
		{uri: "netsy://c1/peer/a/b", err: "path is not /{peer|client}/{name}"},
		{uri: "netsy://c1/peer/", err: "empty name"},
		{uri: "netsy:///peer/a", err: "empty cluster id"},
		{uri: "netsy://c1:99/peer/a", err: "want exactly"},
		{uri: "netsy://u@c1/peer/a", err: "want exactly"},
		{uri: "netsy://c1/peer/a?x=1", err: "want exactly"},
		{uri: "netsy://c1/peer/a#f", err: "want exactly"},
		{uri: "netsy://c1/peer/-a", err: "must start with a letter or digit"},
		{uri: "netsy://c1/peer/a%20b", err: "is not allowed"},
		{uri: "netsy:c1/peer/a", err: "want exactly"},
	} {
		u, err := url.Parse(tc.uri)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", tc.uri, err)
		}
		got, err := ParseURI(u)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseURI(%q) = %v, %v; want error containing %q", tc.uri, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseURI(%q) = %v, %v; want %v", tc.uri, got, err, tc.want)
			continue
		}
		// One identity, one spelling: URI gives back what ParseURI read.
		back, err := ParseURI(got.URI())
		if err != nil || back != got {
			t.Errorf("round trip of %v: %v, %v", got, back, err)
		}
	}
}

func TestIdentityURI(t *testing.T) {
	id := Identity{ClusterID: "c1", Role: RolePeer, Name: "n1"}
	if got := id.URI().String(); got != "netsy://c1/peer/n1" {
		t.Fatalf("URI = %q", got)
	}
	if err := (Identity{ClusterID: "c1", Role: "root", Name: "n"}).Validate(); err == nil {
		t.Fatal("role root validated")
	}
	if err := CheckName(strings.Repeat("a", maxSegment+1)); err == nil {
		t.Fatal("over-long name accepted")
	}
}

func TestFromCert(t *testing.T) {
	u := func(s string) *url.URL {
		v, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		uris []*url.URL
		want Identity
		err  string
	}{
		{name: "one", uris: []*url.URL{u("netsy://c1/client/a")}, want: Identity{"c1", RoleClient, "a"}},
		{name: "other schemes ignored", uris: []*url.URL{u("spiffe://td/x"), u("netsy://c1/peer/n")}, want: Identity{"c1", RolePeer, "n"}},
		{name: "none", uris: []*url.URL{u("spiffe://td/x")}, err: "no netsy:// URI SAN"},
		{name: "two", uris: []*url.URL{u("netsy://c1/peer/n"), u("netsy://c1/client/n")}, err: "2 netsy:// URI SANs, want exactly one"},
		{name: "malformed", uris: []*url.URL{u("netsy://c1/peer")}, err: "path is not"},
	} {
		got, err := FromCert(&x509.Certificate{URIs: tc.uris})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: FromCert = %v, %v; want error %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: FromCert = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := FromCert(&x509.Certificate{}); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("no URIs: %v, want ErrNoIdentity", err)
	}
}
