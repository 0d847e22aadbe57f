// Package certfile serves a TLS certificate and key kept in two PEM files, and takes the
// pair again when the files are replaced (a renewal by an ACME client or the chain's PKI),
// without a restart.
//
// The files are looked at when a certificate is asked for (a TLS handshake through
// GetCertificate, or a metrics scrape through NotAfter), at most once per Options.Every:
// no goroutine to tie to a server's life, and nothing done while nobody connects. A check
// reads both files and compares their bytes with the last pair it tried, rather than their
// modification times: a copy that keeps the source's time (cp -p, rsync -t, install -p) or
// two writes within the file system's clock tick would go unseen. A pair that does not load
// (half-written, or the new certificate beside the old key between two renames) leaves the
// last good certificate in service: a handshake never fails for it. It is logged once as a
// warning, and tried again once the files change again.
package certfile

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEvery is how often the files are looked at when Options.Every is 0.
const DefaultEvery = 5 * time.Second

// Options are a Pair's settings.
type Options struct {
	// Every is the least time between two looks at the files (0: DefaultEvery).
	Every time.Duration
	// Name names the pair in the log (e.g. "mqtt", "api").
	Name string
	// Logger takes the reloads (info) and the pairs that do not load (warning); nil: none.
	Logger *slog.Logger
}

// Pair is a certificate and its key, loaded from their files and taken again when they
// change. Its methods are safe for concurrent use.
type Pair struct {
	certPath, keyPath string
	every             time.Duration
	log               *slog.Logger

	cur  atomic.Pointer[loaded]
	next atomic.Int64 // UnixNano before which the files are not looked at again

	mu    sync.Mutex // held by the one check under way
	tried string     // the files' contents (digest) or read error at the last check
}

// loaded is a pair in service.
type loaded struct {
	cert     *tls.Certificate
	notAfter time.Time
}

// Load reads the pair, failing if it does not load: a wrong file should stop a server's
// start rather than every handshake.
func Load(certPath, keyPath string, opts Options) (*Pair, error) {
	if opts.Every <= 0 {
		opts.Every = DefaultEvery
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Name != "" {
		log = log.With("listener", opts.Name)
	}
	p := &Pair{certPath: certPath, keyPath: keyPath, every: opts.Every, log: log}
	state, l, err := p.read()
	if err != nil {
		return nil, err
	}
	p.tried = state
	p.cur.Store(l)
	p.next.Store(time.Now().Add(p.every).UnixNano())
	if time.Now().After(l.notAfter) {
		log.Warn("the TLS certificate has expired", "cert", certPath, "not_after", l.notAfter)
	}
	return p, nil
}

// read reads and parses both files. state names what was read: the digest of both
// contents, or the read error.
func (p *Pair) read() (state string, l *loaded, err error) {
	certPEM, cerr := os.ReadFile(p.certPath)
	keyPEM, kerr := os.ReadFile(p.keyPath)
	if err := errors.Join(cerr, kerr); err != nil {
		return "read: " + err.Error(), nil, err
	}
	h := sha256.New()
	h.Write(certPEM)
	h.Write([]byte{0})
	h.Write(keyPEM)
	state = fmt.Sprintf("%x", h.Sum(nil))
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return state, nil, err
	}
	leaf := cert.Leaf
	if leaf == nil { // GODEBUG x509keypairleaf=0
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return state, nil, err
		}
	}
	return state, &loaded{cert: &cert, notAfter: leaf.NotAfter}, nil
}

// current returns the pair in service, after looking at the files if it is time to. Only
// one caller at a time looks; the others are served what is in service meanwhile.
func (p *Pair) current() *loaded {
	now := time.Now()
	if now.UnixNano() >= p.next.Load() && p.mu.TryLock() {
		if now.UnixNano() >= p.next.Load() { // not just done by another
			p.check()
			p.next.Store(time.Now().Add(p.every).UnixNano())
		}
		p.mu.Unlock()
	}
	return p.cur.Load()
}

// check takes the files again if they have changed since the last check. Called with mu.
func (p *Pair) check() {
	state, l, err := p.read()
	if state == p.tried {
		return
	}
	p.tried = state
	if err != nil {
		p.log.Warn("the TLS certificate files do not load; the certificate in service is kept until they do",
			"cert", p.certPath, "key", p.keyPath, "in_service_not_after", p.cur.Load().notAfter, "err", err)
		return
	}
	p.cur.Store(l)
	if time.Now().After(l.notAfter) {
		p.log.Warn("the TLS certificate taken from the replaced files has expired", "cert", p.certPath,
			"not_after", l.notAfter)
		return
	}
	p.log.Info("TLS certificate reloaded", "cert", p.certPath, "not_after", l.notAfter)
}

// GetCertificate serves the pair in service (tls.Config.GetCertificate).
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.current().cert, nil
}

// NotAfter is when the certificate in service (its leaf) expires.
func (p *Pair) NotAfter() time.Time { return p.current().notAfter }

// TLSConfig is a server configuration serving the pair, TLS 1.2 or later.
func (p *Pair) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: p.GetCertificate, MinVersion: tls.VersionTLS12}
}
