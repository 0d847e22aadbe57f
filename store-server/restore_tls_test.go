package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/certtest"
)

// TestRestoreTrustsHQCA: `restore --from-hq` reaches an HQ whose certificate the chain's own
// authority issued only with --hq-ca naming it; without, the certificate is refused, and a
// file that holds no certificate is a usage error naming the flag.
func TestRestoreTrustsHQCA(t *testing.T) {
	ca := certtest.NewCA(t)
	certPEM, keyPEM := ca.Issue(t, time.Now().Add(time.Hour))
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	hq := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked++
		http.Error(w, "closed for the test", http.StatusServiceUnavailable)
	}))
	hq.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	hq.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	hq.StartTLS()
	defer hq.Close()
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("S1-restore-tls-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) error {
		args := append([]string{"--from-hq", hq.URL, "--store", "S1", "--data-dir", t.TempDir(),
			"--hq-secret-file", secret, "--log-level", "error"}, extra...)
		return restore(args, &bytes.Buffer{})
	}
	if err := run(); err == nil || !strings.Contains(err.Error(), "certificate") || asked != 0 {
		t.Fatalf("without --hq-ca: %v (HQ asked %d times), want the certificate refused", err, asked)
	}
	if err := run("--hq-ca", ca.Path); err == nil || !strings.Contains(err.Error(), "503") || asked == 0 {
		t.Fatalf("with --hq-ca: %v (HQ asked %d times), want HQ's 503", err, asked)
	}
	if err := run("--hq-ca", secret); err == nil || !strings.Contains(err.Error(), "--hq-ca") {
		t.Fatalf("--hq-ca naming no certificate: %v", err)
	}
}
