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

// TestDayCloseLookbackFlag: the lookback of a close naming no day is 7 days unless set by
// flag or environment, and less than a day (which would leave yesterday out of a close
// pressed just after midnight) stops the start.
func TestDayCloseLookbackFlag(t *testing.T) {
	base := []string{"--store", "S1", "--terminal", "T01", "--data-dir", t.TempDir()}
	m := NewMain()
	if err := m.ParseFlags(base); err != nil || m.CloseLookbackDays != 7 {
		t.Fatalf("default lookback %d (%v), want 7", m.CloseLookbackDays, err)
	}
	if err := NewMain().ParseFlags(append(base, "--day-close-lookback", "0")); err == nil ||
		!strings.Contains(err.Error(), "at least 1 day") {
		t.Fatalf("--day-close-lookback 0: %v, want an error", err)
	}
	t.Setenv("POSGATE_DAY_CLOSE_LOOKBACK", "3")
	m = NewMain()
	if err := m.ParseFlags(base); err != nil || m.CloseLookbackDays != 3 {
		t.Fatalf("lookback from the environment %d (%v), want 3", m.CloseLookbackDays, err)
	}
	t.Setenv("POSGATE_DAY_CLOSE_LOOKBACK", "a week")
	if err := NewMain().ParseFlags(base); err == nil {
		t.Fatal("POSGATE_DAY_CLOSE_LOOKBACK=\"a week\" was taken")
	}
}
