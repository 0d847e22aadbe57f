// Package certtest makes the certificates posgate's tests serve TLS with: an authority of
// the test's own, as a store chain's PKI is, and server certificates for 127.0.0.1 it signs.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA signs server certificates for 127.0.0.1.
type CA struct {
	Cert *x509.Certificate
	Pool *x509.CertPool // holds Cert alone: a client trusting the CA
	// Path is the CA's certificate as a PEM file (a till's --broker-ca, an uploader's
	// --hq-ca).
	Path   string
	key    *ecdsa.PrivateKey
	serial int64
}

// NewCA makes an authority valid from an hour ago for a year.
func NewCA(t testing.TB) *CA {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "posgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: c, Pool: pool, Path: path, key: k, serial: 1}
}

// Issue makes a new key and a server certificate for 127.0.0.1 expiring at notAfter (to
// the second), as PEM. It serves as a client's too: the nodes of a Redis Cluster over TLS
// present it to each other on the cluster bus, which checks it.
func (ca *CA) Issue(t testing.TB, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: "posgate test server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter.Truncate(time.Second),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// IssueFiles issues a certificate expiring at notAfter and writes it and its key as PEM
// files in a directory of the test.
func (ca *CA) IssueFiles(t testing.TB, notAfter time.Time) (certPath, keyPath string) {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, notAfter)
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// Replace writes data beside path and renames it over path, as a renewal does.
func Replace(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
