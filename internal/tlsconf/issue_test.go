package tlsconf

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCA(t *testing.T) {
	if _, err := NewCA("bad/id", t0, time.Hour); err == nil {
		t.Fatal("cluster id with a slash accepted")
	}
	p := newPKI(t, "c1")
	keyPEM, err := p.ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(p.dir, "ca.key")
	writeFile(t, keyFile, keyPEM)
	ca, err := LoadCA(p.caFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if ca.ClusterID != "c1" || !ca.Cert.Equal(p.ca.Cert) {
		t.Fatalf("loaded CA of %q", ca.ClusterID)
	}
	if _, _, _, err := ca.Issue(Leaf{Identity: peerID("c2", "n"), NotBefore: t0, Validity: time.Hour, ServerAuth: true}); err == nil ||
		!strings.Contains(err.Error(), `identity netsy://c2/peer/n is not of the CA's cluster "c1"`) {
		t.Fatalf("identity of another cluster: %v", err)
	}
	if _, _, _, err := ca.Issue(Leaf{Identity: peerID("c1", "n"), NotBefore: t0, Validity: time.Hour}); err == nil {
		t.Fatal("certificate for no use issued")
	}
	cert, _, _, err := ca.Issue(Leaf{Identity: peerID("c1", "n"), Hosts: []string{"n.example", "10.0.0.1", "[::1]", "*.n.example"},
		NotBefore: t0, Validity: 100 * 365 * 24 * time.Hour, ServerAuth: true, ClientAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("leaf outlives its CA: %v > %v", cert.NotAfter, ca.Cert.NotAfter)
	}
	if len(cert.DNSNames) != 2 || cert.DNSNames[0] != "n.example" || cert.DNSNames[1] != "*.n.example" || len(cert.IPAddresses) != 2 ||
		!cert.IPAddresses[0].Equal([]byte{10, 0, 0, 1}) || cert.IPAddresses[1].String() != "::1" {
		t.Fatalf("SANs %v %v", cert.DNSNames, cert.IPAddresses)
	}

	for _, h := range []string{"n1:2379", "a b", "http://n1", "n1..example", "*"} {
		if _, _, _, err := ca.Issue(Leaf{Identity: peerID("c1", "n"), Hosts: []string{h}, NotBefore: t0, Validity: time.Hour, ServerAuth: true}); err == nil ||
			!strings.Contains(err.Error(), "is neither a DNS name nor an IP address") {
			t.Errorf("host %q: %v", h, err)
		}
	}

	other := newPKI(t, "c1")
	otherKey, _ := other.ca.KeyPEM()
	otherKeyFile := filepath.Join(p.dir, "other.key")
	writeFile(t, otherKeyFile, otherKey)
	if _, err := LoadCA(p.caFile, otherKeyFile); err == nil || !strings.Contains(err.Error(), "does not belong to certificate") {
		t.Fatalf("CA with another CA's key: %v", err)
	}
	leafCert, leafKey, _ := p.issue(peerID("c1", "n"))
	if _, err := LoadCA(leafCert, leafKey); err == nil || !strings.Contains(err.Error(), "is not a CA") {
		t.Fatalf("leaf as a CA: %v", err)
	}
}
