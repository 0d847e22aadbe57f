package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/certtest"
	"github.com/posgate/posgate/terminal-agent/client"
)

// TestListenBeyondLoopbackRefused: --listen on an address other devices reach is refused at
// start unless the API is on TLS with a token the installer gave; on loopback it is taken.
func TestListenBeyondLoopbackRefused(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "tok")
	os.WriteFile(tokFile, []byte(strings.Repeat("k", 40)), 0o600)
	base := []string{"--store", "S1", "--terminal", "T01", "--data-dir", dir}
	tlsArgs := []string{"--api-tls-cert", "c.pem", "--api-tls-key", "k.pem"}
	for _, c := range []struct {
		args []string
		bad  string
	}{
		{[]string{"--listen", "127.0.0.1:8181"}, ""},
		{[]string{"--listen", "localhost:8181"}, ""},
		{[]string{"--listen", "[::1]:8181"}, ""},
		{[]string{"--listen", "127.0.0.2:8181"}, ""},
		{[]string{"--listen", "0.0.0.0:8181"}, "beyond this device"},
		{[]string{"--listen", ":8181"}, "beyond this device"},
		{[]string{"--listen", "[::]:8181"}, "beyond this device"},
		{[]string{"--listen", "192.168.1.20:8181"}, "beyond this device"},
		{[]string{"--listen", "till-01.store.lan:8181"}, "beyond this device"},
		{append([]string{"--listen", "0.0.0.0:8181"}, tlsArgs...), "beyond this device"},                    // no token file
		{[]string{"--listen", "0.0.0.0:8181", "--api-token-file", tokFile}, "beyond this device"},           // no TLS
		{append([]string{"--listen", "0.0.0.0:8181", "--api-token-file", tokFile}, tlsArgs...), ""},         // both
		{[]string{"--listen", "127.0.0.1:8181", "--api-tls-cert", "c.pem"}, "go together"},                  // half a pair
		{[]string{"--listen", "127.0.0.1:8181", "--api-host", "till-01.store.lan"}, "needs --api-tls-cert"}, // a name without TLS
		{[]string{"--api-allow-origin", "https://pos.example.com,http://localhost:3000"}, ""},
		{[]string{"--api-allow-origin", "pos.example.com"}, "web origin"},
		{[]string{"--api-allow-origin", "https://pos.example.com/app"}, "web origin"},
		{[]string{"--api-allow-origin", "*"}, "web origin"},
	} {
		err := NewMain().ParseFlags(append(append([]string{}, base...), c.args...))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%v: error %v, want one about %q", c.args, err, c.bad)
		}
	}
	t.Setenv("POSGATE_LISTEN", "0.0.0.0:8181")
	if err := NewMain().ParseFlags(base); err == nil {
		t.Error("POSGATE_LISTEN=0.0.0.0:8181 without TLS was taken")
	}
}

// TestTokenFile: the agent makes its token at the first start (mode 0600, 43 characters of
// base64url) and keeps it across restarts; a token file given must hold a long enough token
// and be closed to other users.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok, path, err := loadToken(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 || len(tok) != 43 || path != filepath.Join(dir, TokenFile) {
		t.Fatalf("token %q in %s: %v %v", tok, path, info.Mode(), err)
	}
	again, _, err := loadToken(dir, "")
	if err != nil || again != tok {
		t.Fatalf("the token changed at the next start: %q, was %q (%v)", again, tok, err)
	}
	other, _, _ := loadToken(t.TempDir(), "")
	if other == tok {
		t.Fatal("two installs made the same token")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	given := filepath.Join(dir, "given")
	for _, c := range []struct {
		body string
		mode os.FileMode
		bad  string
	}{
		{strings.Repeat("a", 32) + "\n", 0o600, ""},
		{strings.Repeat("a", 32), 0o640, ""},
		{"short", 0o600, "at least 32"},
		{"", 0o600, "at least 32"},
		{strings.Repeat("a", 20) + " " + strings.Repeat("b", 20), 0o600, "no blanks"},
		{strings.Repeat("a", 40), 0o604, "every user"},
	} {
		os.Remove(given)
		if err := os.WriteFile(given, []byte(c.body), c.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(given, c.mode)
		_, _, err := loadToken(dir, given)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%q %v: %v", c.body, c.mode, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%q %v: %v, want an error about %q", c.body, c.mode, err, c.bad)
		}
	}
	if _, _, err := loadToken(dir, filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing --api-token-file was taken")
	}
}

// TestAPIOverTLS: an agent listening beyond loopback serves its API over TLS with the
// installer's token, answers a request naming it by its configured name, and refuses one
// naming another host.
func TestAPIOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t)
	cert, key := ca.IssueFiles(t, time.Now().Add(time.Hour))
	tokFile := filepath.Join(dir, "tok")
	tok := strings.Repeat("t", 40)
	os.WriteFile(tokFile, []byte(tok+"\n"), 0o600)
	m := NewMain()
	if err := m.ParseFlags([]string{"--store", "S1", "--terminal", "T01", "--data-dir", dir, "--broker", "tcp://127.0.0.1:1",
		"--listen", "0.0.0.0:0", "--api-tls-cert", cert, "--api-tls-key", key, "--api-token-file", tokFile,
		"--api-host", "till-01.store.lan", "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	select {
	case addr = <-m.Addr:
	case err := <-done:
		t.Fatalf("agent stopped: %v", err)
	}
	_, port, _ := strings.Cut(addr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(addr, ":")
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	get := func(host string) (int, error) {
		req, _ := http.NewRequest("GET", "https://127.0.0.1:"+port+"/v1/status", nil)
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	if code, err := get("till-01.store.lan:" + port); err != nil || code != 200 {
		t.Fatalf("by its name over TLS: %d %v", code, err)
	}
	if code, err := get("other.store.lan:" + port); err != nil || code != http.StatusForbidden {
		t.Fatalf("by another name: %d %v, want 403", code, err)
	}
	c := &client.Client{BaseURL: "http://127.0.0.1:" + port, Token: tok, HTTPClient: &http.Client{Timeout: 5 * time.Second}}
	if _, err := c.Status(ctx); err == nil {
		t.Fatal("plain HTTP was answered on the TLS port")
	}
}
