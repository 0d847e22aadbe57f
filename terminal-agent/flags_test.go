package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrokerCAFlags: --broker-ca goes with a TLS broker URL only, and a file without a PEM
// certificate stops the start with a clear error.
func TestBrokerCAFlags(t *testing.T) {
	base := []string{"--store", "S1", "--terminal", "T01", "--data-dir", t.TempDir()}
	for _, c := range []struct {
		args []string
		bad  string
	}{
		{[]string{"--broker", "tls://store:8883", "--broker-ca", "ca.pem"}, ""},
		{[]string{"--broker", "ssl://store:8883", "--broker-ca", "ca.pem"}, ""},
		{[]string{"--broker", "tcp://store:1883", "--broker-ca", "ca.pem"}, "tls:// broker"},
		{[]string{"--broker", "tls://store:8883"}, ""},
	} {
		err := NewMain().ParseFlags(append(append([]string{}, base...), c.args...))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%v: error %v, want one about %q", c.args, err, c.bad)
		}
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := NewMain()
	if err := m.ParseFlags(append(base, "--broker", "tls://127.0.0.1:1", "--broker-ca", notPEM, "--listen", "127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a --broker-ca without a certificate: %v", err)
	}
}
