package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/tlsconf"
)

const certsUsage = `usage: netsyctl certs init --dir DIR --cluster-id ID
       netsyctl certs node NAME --dir DIR [--cluster-id ID] [--hosts HOST,IP,...]
       netsyctl certs client NAME --dir DIR [--cluster-id ID]

Creates a development CA and the certificates of a TLS cluster in DIR:
  init         ca.crt and ca.key, an ECDSA P-256 CA valid 10 years; ca.crt is
               every node's --trusted-ca-file and --peer-trusted-ca-file and
               netsyctl's and etcdctl's --cacert
  node NAME    NAME.crt and NAME.key for node NAME, valid 1 year: its peer
               certificate (netsy://ID/peer/NAME; --peer-cert-file,
               --peer-key-file) and its client-port certificate (--cert-file,
               --key-file) for the --hosts it is dialed by, and localhost
  client NAME  NAME.crt and NAME.key for client NAME (netsy://ID/client/NAME),
               valid 1 year; netsyctl's and etcdctl's --cert and --key
Keys are written with mode 0600; no file is ever overwritten. --cluster-id
defaults to the CA's and must match it.`

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// backdate lets a certificate be used at once by a machine whose clock
	// is a little behind.
	backdate = 5 * time.Minute
)

// writtenFile is one line of the certs commands' output.
type writtenFile struct {
	Path     string    `json:"path"`
	What     string    `json:"what"`
	Identity string    `json:"identity,omitempty"`
	Hosts    []string  `json:"hosts,omitempty"`
	NotAfter time.Time `json:"not_after"`
	Use      string    `json:"use"`
}

func runCerts(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(certsUsage)
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("certs "+sub, stdout)
	dir := fs.String("dir", ".", "directory of the CA and the certificates")
	clusterID := fs.String("cluster-id", "", "the cluster's id, as the nodes' --cluster-id")
	output := fs.String("o", "table", "output format: table or json")
	var hosts *string
	switch sub {
	case "init", "client":
	case "node":
		hosts = fs.String("hosts", "", "comma-separated DNS names and IP addresses clients and peers dial the node by")
	default:
		return errors.New(certsUsage)
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o: %q is not table or json", *output)
	}
	now := clock.Real().Wall().Add(-backdate).UTC().Truncate(time.Second)
	var written []writtenFile
	switch sub {
	case "init":
		if len(pos) != 0 {
			return errors.New(certsUsage)
		}
		written, err = certsInit(*dir, *clusterID, now)
	default:
		if len(pos) != 1 {
			return fmt.Errorf("certs %s: want one NAME\n%s", sub, certsUsage)
		}
		var hs []string
		if hosts != nil {
			hs = splitHosts(*hosts)
		}
		written, err = certsLeaf(*dir, *clusterID, sub, pos[0], hs, now)
	}
	if err != nil {
		return err
	}
	if *output == "json" {
		return writeJSON(stdout, written)
	}
	for _, w := range written {
		desc := w.What
		isCert := strings.HasSuffix(w.Path, ".crt")
		if w.Identity != "" && isCert {
			desc += " " + w.Identity
		}
		if len(w.Hosts) > 0 {
			desc += " for " + strings.Join(w.Hosts, ",")
		}
		if isCert {
			desc += ", valid until " + w.NotAfter.Format(time.RFC3339)
		}
		if _, err := fmt.Fprintf(stdout, "wrote %s: %s\n  %s\n", w.Path, desc, w.Use); err != nil {
			return err
		}
	}
	return nil
}

func splitHosts(s string) []string {
	var out []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

func certsInit(dir, clusterID string, now time.Time) ([]writtenFile, error) {
	if clusterID == "" {
		return nil, errors.New("--cluster-id: required, the cluster's id as the nodes' --cluster-id")
	}
	if err := tlsconf.CheckClusterID(clusterID); err != nil {
		return nil, fmt.Errorf("--cluster-id: %w", err)
	}
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := refuseExisting(certFile, keyFile); err != nil {
		return nil, err
	}
	ca, err := tlsconf.NewCA(clusterID, now, caValidity)
	if err != nil {
		return nil, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := writeNew(dir, keyFile, keyPEM, certFile, ca.CertPEM()); err != nil {
		return nil, err
	}
	return []writtenFile{
		{Path: certFile, What: "CA certificate of cluster " + clusterID, NotAfter: ca.Cert.NotAfter,
			Use: "use as every node's --trusted-ca-file and --peer-trusted-ca-file, and as --cacert"},
		{Path: keyFile, What: "CA key", NotAfter: ca.Cert.NotAfter,
			Use: "keep it private: only `netsyctl certs` needs it"},
	}, nil
}

func certsLeaf(dir, clusterID, kind, name string, hosts []string, now time.Time) ([]writtenFile, error) {
	if err := tlsconf.CheckName(name); err != nil {
		return nil, err
	}
	if name == "ca" {
		return nil, errors.New(`name "ca" is the CA's files`)
	}
	ca, err := tlsconf.LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("%w (create the CA with `netsyctl certs init --dir %s --cluster-id ID`)", err, dir)
	}
	if clusterID != "" && clusterID != ca.ClusterID {
		return nil, fmt.Errorf("--cluster-id %q: the CA in %s is cluster %q's", clusterID, dir, ca.ClusterID)
	}
	leaf := tlsconf.Leaf{NotBefore: now, Validity: leafValidity, ClientAuth: true}
	var use, keyUse string
	switch kind {
	case "node":
		leaf.Identity = tlsconf.Identity{ClusterID: ca.ClusterID, Role: tlsconf.RolePeer, Name: name}
		leaf.ServerAuth = true
		leaf.Hosts = withLocalhost(hosts)
		use, keyUse = "use as the node's --cert-file and --peer-cert-file", "use as the node's --key-file and --peer-key-file"
	case "client":
		leaf.Identity = tlsconf.Identity{ClusterID: ca.ClusterID, Role: tlsconf.RoleClient, Name: name}
		use, keyUse = "use as --cert (netsyctl, etcdctl)", "use as --key (netsyctl, etcdctl)"
	}
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := refuseExisting(certFile, keyFile); err != nil {
		return nil, err
	}
	cert, certPEM, keyPEM, err := ca.Issue(leaf)
	if err != nil {
		return nil, err
	}
	if err := writeNew(dir, keyFile, keyPEM, certFile, certPEM); err != nil {
		return nil, err
	}
	id := leaf.Identity.String()
	return []writtenFile{
		{Path: certFile, What: kind + " certificate", Identity: id, Hosts: leaf.Hosts, NotAfter: cert.NotAfter, Use: use},
		{Path: keyFile, What: kind + " key", Identity: id, NotAfter: cert.NotAfter, Use: keyUse},
	}, nil
}

// withLocalhost adds localhost, 127.0.0.1 and ::1 to hosts, so a node's
// certificate also serves clients on the node itself.
func withLocalhost(hosts []string) []string {
	out := []string{}
	seen := map[string]bool{}
	for _, h := range append(append([]string{}, hosts...), "localhost", "127.0.0.1", "::1") {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists: refusing to overwrite it (remove it first to replace it)", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writeNew writes the key (0600) and then the certificate (0644), never
// over an existing file; if the certificate cannot be written the key is
// removed again, so a failure leaves nothing half made.
func writeNew(dir, keyFile string, keyPEM []byte, certFile string, certPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeExclusive(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeExclusive(certFile, certPEM, 0o644); err != nil {
		os.Remove(keyFile)
		return err
	}
	return nil
}

func writeExclusive(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: refusing to overwrite it (remove it first to replace it)", path)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}
