package config

import (
	"crypto/tls"
	"strings"
	"testing"
)

func TestTLSFlags(t *testing.T) {
	certs := []string{"--cert-file", "s.crt", "--key-file", "s.key"}
	peer := []string{"--peer-cert-file", "p.crt", "--peer-key-file", "p.key", "--peer-trusted-ca-file", "ca.crt"}
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(Config) bool
		wantErr string
	}{
		{name: "plaintext loopback (the quick start)", check: func(c Config) bool {
			return !c.ClientTLS() && !c.PeerTLS() && c.TLSMinVersion() == tls.VersionTLS13 && c.AdvertiseClientURL() == "http://127.0.0.1:2379"
		}},
		{name: "plaintext on localhost and ::1", args: []string{"--client-addr", "localhost:2379", "--peer-addr", "[::1]:2380"},
			check: func(c Config) bool { return !c.ClientTLS() }},
		{name: "plaintext client port on a LAN address", args: []string{"--client-addr", "10.1.2.3:2379"},
			wantErr: "--client-addr 10.1.2.3:2379: plaintext is served only on loopback addresses: give --cert-file and --key-file for TLS, or --insecure-plaintext"},
		{name: "plaintext client port on every interface", args: []string{"--client-addr", "0.0.0.0:2379", "--advertise-client", "http://h:2379"},
			wantErr: "--client-addr 0.0.0.0:2379: plaintext"},
		{name: "plaintext client port on a host name", args: []string{"--client-addr", "node1.example:2379"},
			wantErr: "--insecure-plaintext"},
		{name: "plaintext peer port", args: []string{"--peer-addr", "10.1.2.3:2380"},
			wantErr: "--peer-addr 10.1.2.3:2380: plaintext is served only on loopback addresses: give --peer-cert-file"},
		{name: "insecure plaintext", args: []string{"--client-addr", "10.1.2.3:2379", "--peer-addr", "10.1.2.3:2380", "--insecure-plaintext"},
			check: func(c Config) bool { return !c.ClientTLS() && c.TLS.InsecurePlaintext }},
		{name: "insecure plaintext from env", args: []string{"--client-addr", "10.1.2.3:2379"}, env: map[string]string{"NETSY_INSECURE_PLAINTEXT": "true"},
			check: func(c Config) bool { return c.TLS.InsecurePlaintext }},
		{name: "TLS on a LAN address", args: append(append([]string{"--client-addr", "10.1.2.3:2379", "--peer-addr", "10.1.2.3:2380"}, certs...), peer...),
			check: func(c Config) bool {
				return c.ClientTLS() && c.PeerTLS() && c.AdvertiseClientURL() == "https://10.1.2.3:2379"
			}},
		{name: "client TLS does not cover the peer port", args: append([]string{"--peer-addr", "10.1.2.3:2380"}, certs...),
			wantErr: "--peer-addr 10.1.2.3:2380: plaintext"},
		{name: "cert without key", args: []string{"--cert-file", "s.crt"}, wantErr: "--cert-file and --key-file"},
		{name: "CA without cert", args: []string{"--trusted-ca-file", "ca.crt"}, wantErr: "--trusted-ca-file: needs --cert-file"},
		{name: "client-cert-auth without CA", args: append([]string{"--client-cert-auth"}, certs...), wantErr: "--client-cert-auth: needs --trusted-ca-file"},
		{name: "client-cert-auth", args: append([]string{"--client-cert-auth", "--trusted-ca-file", "ca.crt"}, certs...),
			check: func(c Config) bool { return c.TLS.ClientCertAuth }},
		{name: "peer cert without key", args: []string{"--peer-cert-file", "p.crt", "--peer-trusted-ca-file", "ca.crt"}, wantErr: "--peer-cert-file and --peer-key-file"},
		{name: "peer cert without CA", args: []string{"--peer-cert-file", "p.crt", "--peer-key-file", "p.key"}, wantErr: "--peer-trusted-ca-file: required"},
		{name: "peer CA without cert", args: []string{"--peer-trusted-ca-file", "ca.crt"}, wantErr: "--peer-trusted-ca-file: needs --peer-cert-file"},
		{name: "TLS 1.2", args: []string{"--tls-min-version", "1.2"}, check: func(c Config) bool { return c.TLSMinVersion() == tls.VersionTLS12 }},
		{name: "TLS 1.1", args: []string{"--tls-min-version", "1.1"}, wantErr: `--tls-min-version: "1.1" is not 1.3 or 1.2`},
		{name: "http advertised for TLS", args: append([]string{"--advertise-client", "http://h:2379"}, certs...), wantErr: "--advertise-client: \"http://h:2379\" is http:// but the client port serves TLS"},
		{name: "https advertised for plaintext", args: []string{"--advertise-client", "https://h:2379"}, wantErr: "is https:// but the client port serves plaintext"},
		{name: "cluster id unfit for an identity", args: append([]string{"--cluster-id", "-x"}, peer...), wantErr: "--cluster-id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(tc.args, tc.env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want mention of %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}
}
