package tlsconf

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
)

// CheckInterval is the least time between two looks at a watched file: a
// handshake reads the files again only if the last look is at least this
// old, so a busy port reads them at most once a second and a replaced file
// is in use at most a second after the first handshake that follows.
const CheckInterval = time.Second

// watched holds the value parsed from a set of files and parses them again
// when their content changes. It has no goroutine: get looks at the files
// when it is called and the last look is CheckInterval old. A change that
// does not parse (a certificate written before its key, a half-written
// file) keeps the previous value, is logged once, and is looked at again
// at the next check.
type watched[T any] struct {
	what  string // names the files in logs and errors
	paths []string
	parse func(data [][]byte) (T, error)
	// loaded returns the log fields describing a newly loaded value.
	loaded func(T) []any
	clk    clock.Clock
	log    hclog.Logger

	mu      sync.Mutex
	cur     T
	sum     [sha256.Size]byte // of the files cur came from
	checked time.Time
	failed  string // the last failure logged, so it is logged once
}

func newWatched[T any](what string, paths []string, parse func([][]byte) (T, error), loaded func(T) []any, clk clock.Clock, logger hclog.Logger) (*watched[T], error) {
	if clk == nil {
		clk = clock.Real()
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	w := &watched[T]{what: what, paths: paths, parse: parse, loaded: loaded, clk: clk, log: logger}
	data, sum, err := w.read()
	if err != nil {
		return nil, err
	}
	v, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	w.cur, w.sum, w.checked = v, sum, clk.Now()
	return w, nil
}

func (w *watched[T]) read() ([][]byte, [sha256.Size]byte, error) {
	h := sha256.New()
	data := make([][]byte, len(w.paths))
	for i, p := range w.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, [sha256.Size]byte{}, fmt.Errorf("%s: %w", w.what, err)
		}
		data[i] = b
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return data, sum, nil
}

// get returns the current value, first reloading the files if they are
// due a look and have changed.
func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clk.Now()
	if now.Sub(w.checked) < CheckInterval {
		return w.cur
	}
	w.checked = now
	data, sum, err := w.read()
	if err != nil {
		w.fail(err.Error())
		return w.cur
	}
	if sum == w.sum {
		w.failed = ""
		return w.cur
	}
	v, err := w.parse(data)
	if err != nil {
		w.fail(fmt.Sprintf("%s: %v", w.what, err))
		return w.cur
	}
	w.cur, w.sum, w.failed = v, sum, ""
	w.log.Info("reloaded tls files", append([]any{"files", w.what}, w.loaded(v)...)...)
	return w.cur
}

func (w *watched[T]) fail(msg string) {
	if msg == w.failed {
		return
	}
	w.failed = msg
	w.log.Warn("tls files changed but cannot be used; keeping the previous ones", "error", msg)
}

// Reloader serves a certificate and its key from two files and picks up a
// new pair when the files change, so certificates rotate without a
// restart. Its GetCertificate and GetClientCertificate go into a
// tls.Config.
type Reloader struct {
	certFile string
	w        *watched[*tls.Certificate]
}

// NewReloader loads the key pair at once; a missing file or a certificate
// that does not match its key is an error naming both files.
func NewReloader(certFile, keyFile string, clk clock.Clock, logger hclog.Logger) (*Reloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("certificate file %q and key file %q: both are needed", certFile, keyFile)
	}
	what := fmt.Sprintf("certificate %s and key %s", certFile, keyFile)
	w, err := newWatched(what, []string{certFile, keyFile}, parseKeyPair, func(c *tls.Certificate) []any {
		return []any{"serial", c.Leaf.SerialNumber.Text(16), "not_after", c.Leaf.NotAfter.UTC(), "identity", describe(c.Leaf)}
	}, clk, logger)
	if err != nil {
		return nil, err
	}
	return &Reloader{certFile: certFile, w: w}, nil
}

func parseKeyPair(data [][]byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(data[0], data[1])
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// Certificate is the key pair in use, reloaded first if the files changed.
func (r *Reloader) Certificate() *tls.Certificate { return r.w.get() }

// GetCertificate is a tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.w.get(), nil
}

// GetClientCertificate is a tls.Config.GetClientCertificate.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.w.get(), nil
}

// File is the certificate file.
func (r *Reloader) File() string { return r.certFile }

// Expiry is when the certificate in use stops being valid.
func (r *Reloader) Expiry() time.Time { return r.w.get().Leaf.NotAfter }

// CAPool is the set of trusted CA certificates of a PEM file, reloaded
// when the file changes like a Reloader's key pair.
type CAPool struct {
	file string
	w    *watched[caSet]
}

type caSet struct {
	pool  *x509.CertPool
	certs []*x509.Certificate
}

// NewCAPool loads the CA certificates of file at once; a file without a
// certificate, or with anything but certificates, is an error naming it.
func NewCAPool(file string, clk clock.Clock, logger hclog.Logger) (*CAPool, error) {
	if file == "" {
		return nil, errors.New("trusted CA file: empty path")
	}
	w, err := newWatched("trusted CA file "+file, []string{file}, func(data [][]byte) (caSet, error) {
		certs, err := parseCerts(data[0], true)
		if err != nil {
			return caSet{}, err
		}
		pool := x509.NewCertPool()
		for _, c := range certs {
			pool.AddCert(c)
		}
		return caSet{pool: pool, certs: certs}, nil
	}, func(s caSet) []any {
		return []any{"certificates", len(s.certs), "not_after", earliestExpiry(s.certs).UTC()}
	}, clk, logger)
	if err != nil {
		return nil, err
	}
	return &CAPool{file: file, w: w}, nil
}

// Pool is the trusted certificates, reloaded first if the file changed.
func (p *CAPool) Pool() *x509.CertPool { return p.w.get().pool }

// File is the CA file.
func (p *CAPool) File() string { return p.file }

// Expiry is when the first of the trusted certificates stops being valid.
func (p *CAPool) Expiry() time.Time { return earliestExpiry(p.w.get().certs) }

// parseCerts reads the CERTIFICATE blocks of a PEM file. With strict, any
// other block (a private key pasted into a CA bundle) is an error rather
// than ignored.
func parseCerts(data []byte, strict bool) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			if !strict {
				continue
			}
			return nil, fmt.Errorf("PEM block %d is a %q, want only CERTIFICATE blocks", len(certs)+1, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(bytes.TrimSpace(rest)) > 0 && len(certs) == 0 {
		return nil, errors.New("not PEM: no certificate found")
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate found")
	}
	return certs, nil
}

// readCerts reads the certificates of a PEM file once.
func readCerts(file string, strict bool) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(data, strict)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return certs, nil
}

func earliestExpiry(certs []*x509.Certificate) time.Time {
	var t time.Time
	for _, c := range certs {
		if t.IsZero() || c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t
}

// describe names a certificate's holder for logs: its netsy identity, or
// "no netsy identity" with the subject.
func describe(c *x509.Certificate) string {
	id, err := FromCert(c)
	if err == nil {
		return id.String()
	}
	var b strings.Builder
	b.WriteString("no netsy identity")
	if s := c.Subject.String(); s != "" {
		b.WriteString(" (subject " + s + ")")
	}
	if !errors.Is(err, ErrNoIdentity) {
		b.WriteString(": " + err.Error())
	}
	return b.String()
}
