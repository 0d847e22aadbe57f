package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/certtest"
	"github.com/posgate/posgate/store-server/client"
)

// TestAPIOverTLS: with --api-tls-cert and --api-tls-key the manager API and the dashboard
// answer over HTTPS only; a plain HTTP request is refused.
func TestAPIOverTLS(t *testing.T) {
	t.Parallel()
	cert, key := selfSigned(t)
	srv := biRunServer(t, "--api-tls-cert", cert, "--api-tls-key", key)
	if !strings.HasPrefix(srv.Base, "https://") {
		t.Fatalf("base %s", srv.Base)
	}
	var m client.ModeAnswer
	srv.mustJSON(t, "GET", "/v1/mode", nil, &m)
	if m.Mode != client.ModeRedis {
		t.Fatalf("mode over HTTPS: %+v", m)
	}
	if status, _, b := srv.do(t, "GET", "/", "", "", nil); status != http.StatusOK || !strings.Contains(string(b), "dashboard.js") {
		t.Fatalf("dashboard over HTTPS: %d", status)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + strings.TrimPrefix(srv.Base, "https://") + "/v1/mode")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP answered %d", resp.StatusCode)
		}
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T) (certPath, keyPath string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "posgate test store"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// tlsClient trusts the certificate at certPath.
func tlsClient(t *testing.T, certPath string) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("no certificate in %s", certPath)
	}
	return &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// TestMetricsToken: the metrics token opens GET /metrics and nothing else; the manager token
// still opens it too.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	const mtok = "prometheus-only-token"
	srv := biRunServer(t, "--metrics-token-file", secretFile(t, mtok))
	for _, tok := range []string{mtok, biToken} {
		if status, _, b := srv.do(t, "GET", "/metrics", tok, "", nil); status != http.StatusOK ||
			!strings.Contains(string(b), "posgate_store_gate_mode") {
			t.Errorf("GET /metrics with %q: %d", tok, status)
		}
	}
	srv.problem(t, "no token", "GET", "/metrics", "", "", nil, http.StatusUnauthorized, "unauthorized")
	for _, r := range apiRoutes {
		if r.path == "/metrics" || r.path == "/v1/whoami" {
			continue
		}
		body := []byte(`{}`)
		if r.method == "GET" {
			body = nil
		}
		srv.problem(t, "metrics token on "+r.path, r.method, r.path, mtok, "application/json", body,
			http.StatusForbidden, "forbidden")
	}
}

// TestDiskRoom: /v1/mode and /metrics give the room on the ledger's disk and the ledger's
// size; under --disk-warn-mb the answer says the disk is low and the dashboard raises it.
func TestDiskRoom(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		warnMB string
		low    bool
	}{{"1", false}, {"1000000000", true}} { // 1 MiB; a petabyte
		srv := biRunServer(t, "--disk-warn-mb", c.warnMB)
		var m client.ModeAnswer
		srv.mustJSON(t, "GET", "/v1/mode", nil, &m)
		if d := m.Disk; d == nil || d.FreeBytes <= 0 || d.TotalBytes < d.FreeBytes || d.LedgerBytes <= 0 || d.Low != c.low {
			t.Fatalf("--disk-warn-mb %s: disk %+v, want low %v", c.warnMB, d, c.low)
		}
		fams := srv.scrape(t)
		for _, name := range []string{"posgate_store_ledger_disk_free_bytes", "posgate_store_ledger_disk_total_bytes",
			"posgate_store_ledger_file_bytes"} {
			if v, ok := fams.value(name); !ok || v <= 0 {
				t.Errorf("%s = %v (present %v)", name, v, ok)
			}
		}
		dom := browse(t, srv.Base+"/#token="+biToken)
		if alerted := strings.Contains(dom, "<li>The ledger's disk has "); alerted != c.low {
			t.Errorf("--disk-warn-mb %s: dashboard alert %v, want %v", c.warnMB, alerted, c.low)
		}
	}
}

// servedExpiry makes a new TLS connection to addr, trusting roots, and returns when the
// certificate it was served expires.
func servedExpiry(t *testing.T, addr string, roots *x509.CertPool) time.Time {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].NotAfter
}

// fastCertChecks has the store-server look at its certificate files every 50 ms for the
// test (not parallel: it sets a package variable, restored once the test's servers stop).
func fastCertChecks(t *testing.T) {
	was := certCheckEvery
	t.Cleanup(func() { certCheckEvery = was })
	certCheckEvery = 50 * time.Millisecond
}

// TestAPICertRenewed: the manager API's certificate and key replaced in place (two renames,
// as a renewal does) are served to the next connection without a restart; between the two
// renames, when the files hold the new certificate beside the old key, the old certificate
// is served and the API answers. The expiry metric follows.
func TestAPICertRenewed(t *testing.T) {
	fastCertChecks(t)
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "api.pem"), filepath.Join(dir, "api-key.pem")
	first := time.Now().Add(30 * 24 * time.Hour).Truncate(time.Second)
	c1, k1 := ca.Issue(t, first)
	certtest.Replace(t, cert, c1)
	certtest.Replace(t, key, k1)
	srv := biRunServer(t, "--api-tls-cert", cert, "--api-tls-key", key)
	srv.Client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}}}
	addr := strings.TrimPrefix(srv.Base, "https://")
	expiry := func() float64 {
		v, _ := srv.scrape(t).value("posgate_store_tls_cert_expiry_timestamp_seconds", "listener", "api")
		return v
	}
	if got := servedExpiry(t, addr, ca.Pool); !got.Equal(first) {
		t.Fatalf("served a certificate expiring %v, want %v", got, first)
	}
	if v := expiry(); v != float64(first.Unix()) {
		t.Errorf("expiry metric %v, want %d", v, first.Unix())
	}

	second := first.Add(60 * 24 * time.Hour)
	c2, k2 := ca.Issue(t, second)
	certtest.Replace(t, cert, c2) // the key not yet
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got := servedExpiry(t, addr, ca.Pool); !got.Equal(first) {
			t.Fatalf("mid-rotation: served a certificate expiring %v, want the old one (%v)", got, first)
		}
		var m client.ModeAnswer
		srv.mustJSON(t, "GET", "/v1/mode", nil, &m)
	}
	if v := expiry(); v != float64(first.Unix()) {
		t.Errorf("mid-rotation: expiry metric %v, want the old %d", v, first.Unix())
	}
	certtest.Replace(t, key, k2)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := servedExpiry(t, addr, ca.Pool)
		if got.Equal(second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the renewal a new connection is served the certificate expiring %v, want %v", got, second)
		}
	}
	if v := expiry(); v != float64(second.Unix()) {
		t.Errorf("expiry metric %v, want %d", v, second.Unix())
	}
	var m client.ModeAnswer
	srv.mustJSON(t, "GET", "/v1/mode", nil, &m)
}
