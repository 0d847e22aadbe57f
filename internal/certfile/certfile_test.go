package certfile

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/certtest"
)

// serve runs a TLS listener serving p, each connection answered with one byte.
func serve(t *testing.T, p *Pair) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", p.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.Write([]byte{1})
			})
		}
	})
	return ln.Addr().String()
}

// handshake connects anew and returns the certificate the server presented.
func handshake(t *testing.T, addr string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		t.Fatalf("read: %v", err)
	}
	return c.ConnectionState().PeerCertificates[0]
}

// syncBuffer is a log sink read while the server writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const every = 20 * time.Millisecond

// rotated waits for a new handshake to present a certificate expiring at want.
func rotated(t *testing.T, addr string, roots *x509.CertPool, want time.Time) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := handshake(t, addr, roots).NotAfter
		if got.Equal(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new connection still sees the certificate expiring %v, want %v", got, want)
		}
		time.Sleep(every / 2)
	}
}

// TestRotateInPlace: the cert and key replaced in place under a running listener (two
// renames, as a renewal does) are what a new connection sees; a connection made before
// keeps going; NotAfter follows.
func TestRotateInPlace(t *testing.T) {
	t.Parallel()
	a := certtest.NewCA(t)
	first := time.Now().Add(10 * time.Hour).Truncate(time.Second)
	certPath, keyPath := a.IssueFiles(t, first)
	var logs syncBuffer
	p, err := Load(certPath, keyPath, Options{Every: every, Name: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, p)
	if got := handshake(t, addr, a.Pool).NotAfter; !got.Equal(first) {
		t.Fatalf("first certificate expires %v, want %v", got, first)
	}
	old, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: a.Pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	second := first.Add(60 * 24 * time.Hour)
	c2, k2 := a.Issue(t, second)
	certtest.Replace(t, keyPath, k2)
	certtest.Replace(t, certPath, c2)
	rotated(t, addr, a.Pool, second)
	if got := p.NotAfter(); !got.Equal(second) {
		t.Errorf("NotAfter %v, want %v", got, second)
	}
	var b [1]byte
	if _, err := old.Read(b[:]); err != nil {
		t.Errorf("the connection made before the rotation: %v", err)
	}
	if !strings.Contains(logs.String(), "TLS certificate reloaded") {
		t.Errorf("no reload logged:\n%s", logs.String())
	}
}

// TestBrokenPairKeepsOld: mid-rotation the files hold a pair that does not load (the new
// certificate beside the old key, then a half-written key); every handshake meanwhile
// succeeds with the old certificate, the warning is logged once per change, and the
// complete pair is taken once it is there.
func TestBrokenPairKeepsOld(t *testing.T) {
	t.Parallel()
	a := certtest.NewCA(t)
	first := time.Now().Add(10 * time.Hour).Truncate(time.Second)
	certPath, keyPath := a.IssueFiles(t, first)
	var logs syncBuffer
	p, err := Load(certPath, keyPath, Options{Every: every, Name: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, p)
	warnings := func() int { return strings.Count(logs.String(), "level=WARN") }
	// steady: every handshake for a while sees the old certificate, and the pair is looked
	// at meanwhile (several checks).
	steady := func(wantWarnings int) {
		t.Helper()
		for end := time.Now().Add(10 * every); time.Now().Before(end); time.Sleep(every / 4) {
			if got := handshake(t, addr, a.Pool).NotAfter; !got.Equal(first) {
				t.Fatalf("served the certificate expiring %v, want the old one (%v)", got, first)
			}
		}
		if got := p.NotAfter(); !got.Equal(first) {
			t.Fatalf("NotAfter %v, want the old certificate's %v", got, first)
		}
		if n := warnings(); n != wantWarnings {
			t.Fatalf("%d warnings, want %d:\n%s", n, wantWarnings, logs.String())
		}
	}

	second := first.Add(60 * 24 * time.Hour)
	c2, k2 := a.Issue(t, second)
	certtest.Replace(t, certPath, c2) // the key not yet
	steady(1)
	certtest.Replace(t, keyPath, k2[:len(k2)/2]) // half of it
	steady(2)
	if err := os.Remove(keyPath); err != nil { // a renewal that deletes before writing
		t.Fatal(err)
	}
	steady(3)
	certtest.Replace(t, keyPath, k2)
	rotated(t, addr, a.Pool, second)
	if n := warnings(); n != 3 {
		t.Errorf("%d warnings, want 3:\n%s", n, logs.String())
	}
}

// TestLoadFails: a pair that does not load at the start is an error, as before.
func TestLoadFails(t *testing.T) {
	t.Parallel()
	a := certtest.NewCA(t)
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, _ := a.Issue(t, time.Now().Add(time.Hour))
	_, k2 := a.Issue(t, time.Now().Add(time.Hour))
	certtest.Replace(t, certPath, c1)
	certtest.Replace(t, keyPath, k2)
	if _, err := Load(certPath, keyPath, Options{}); err == nil {
		t.Fatal("a certificate with another's key loaded")
	}
	if _, err := Load(certPath, filepath.Join(dir, "missing.pem"), Options{}); err == nil {
		t.Fatal("a missing key loaded")
	}
}

// TestEveryBoundsChecks: within Every of the last look, a handshake is served without
// reading the files.
func TestEveryBoundsChecks(t *testing.T) {
	t.Parallel()
	a := certtest.NewCA(t)
	first := time.Now().Add(time.Hour).Truncate(time.Second)
	certPath, keyPath := a.IssueFiles(t, first)
	p, err := Load(certPath, keyPath, Options{Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c2, k2 := a.Issue(t, first.Add(time.Hour))
	certtest.Replace(t, certPath, c2)
	certtest.Replace(t, keyPath, k2)
	if got := handshake(t, serve(t, p), a.Pool).NotAfter; !got.Equal(first) {
		t.Fatalf("files read again within Every: served %v", got)
	}
}
