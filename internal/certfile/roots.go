package certfile

import (
	"crypto/x509"
	"fmt"
	"os"
)

// RootsWith returns the system's certificate authorities and those in the PEM file path:
// a client's roots for a server whose certificate the chain's own authority issued (an
// uploader's or a restore's --hq-ca).
func RootsWith(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return roots, nil
}
