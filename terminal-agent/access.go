package main

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/posgate/posgate/internal/certfile"
	"github.com/posgate/posgate/internal/cli"
	"github.com/posgate/posgate/terminal-agent/api"
)

// TokenFile is the name of the API token file the agent makes in its data directory at its
// first start, unless --api-token-file names another.
const TokenFile = "api-token"

// MinTokenLen is the shortest API token the agent takes from --api-token-file; the one it
// makes is 43 characters (32 random bytes, base64url).
const MinTokenLen = 32

// apiFlags are the settings of who may call the local API: its token, the web origins and
// host names it answers, and its TLS pair for a listen address beyond the device.
type apiFlags struct {
	APITokenFile string
	AllowOrigins []string
	APIHosts     []string
	APITLSCert   string
	APITLSKey    string
}

func (a *apiFlags) define(fs *cli.Flags) {
	fs.String(&a.APITokenFile, "api-token-file", "POSGATE_API_TOKEN_FILE", "",
		"file holding the local API's token; empty: <data-dir>/"+TokenFile+", made (0600, random) at the first start")
	fs.List(&a.AllowOrigins, "api-allow-origin", "POSGATE_API_ALLOW_ORIGIN",
		"a web origin (https://pos.example.com) whose pages may call the local API; repeat it or give a comma list; none: no page may")
	fs.List(&a.APIHosts, "api-host", "POSGATE_API_HOST",
		"a host name, besides localhost and the loopback addresses, that requests to the API may name (with --api-tls-cert)")
	fs.String(&a.APITLSCert, "api-tls-cert", "POSGATE_API_TLS_CERT", "",
		"PEM certificate for the local API over HTTPS (taken again when the file changes); needed to listen beyond loopback")
	fs.String(&a.APITLSKey, "api-tls-key", "POSGATE_API_TLS_KEY", "", "PEM private key of --api-tls-cert")
}

// validate checks the API's settings against the listen address: beyond loopback only with
// TLS and a token file the installer gave (a POS app on another device cannot read the data
// directory).
func (a *apiFlags) validate(listen string) error {
	if (a.APITLSCert == "") != (a.APITLSKey == "") {
		return errors.New("--api-tls-cert and --api-tls-key go together")
	}
	tlsOn := a.APITLSCert != ""
	if len(a.APIHosts) > 0 && !tlsOn {
		return errors.New("--api-host needs --api-tls-cert and --api-tls-key: without TLS the API answers only loopback names")
	}
	for _, o := range a.AllowOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
			u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("--api-allow-origin %q: want a web origin such as https://pos.example.com", o)
		}
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if loopbackHost(host) {
		return nil
	}
	if !tlsOn || a.APITokenFile == "" {
		return fmt.Errorf("--listen %s reaches beyond this device: the API may listen there only over TLS "+
			"(--api-tls-cert, --api-tls-key) with a token the installer gives (--api-token-file); "+
			"otherwise listen on 127.0.0.1", listen)
	}
	return nil
}

// loopbackHost reports whether a listen host is on this device only.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// access reads (or makes) the token and returns the API's Access.
func (a *apiFlags) access(dataDir string, log *slog.Logger) (api.Access, error) {
	tok, path, err := loadToken(dataDir, a.APITokenFile)
	if err != nil {
		return api.Access{}, err
	}
	log.Info("API token", "file", path)
	return api.Access{Token: tok, Origins: a.AllowOrigins, Hosts: a.APIHosts}, nil
}

// listener wraps ln in TLS when the API has a certificate.
func (a *apiFlags) listener(ln net.Listener, log *slog.Logger) (net.Listener, error) {
	if a.APITLSCert == "" {
		return ln, nil
	}
	pair, err := certfile.Load(a.APITLSCert, a.APITLSKey, certfile.Options{Name: "api", Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--api-tls-cert: %w", err)
	}
	return tls.NewListener(ln, pair.TLSConfig()), nil
}

// loadToken returns the API token and the file it is kept in: the file given, which must
// hold one of MinTokenLen characters or more, or <dataDir>/api-token, made at the first
// start with 32 random bytes (base64url) and mode 0600.
func loadToken(dataDir, given string) (tok, path string, err error) {
	path = given
	if path == "" {
		path = filepath.Join(dataDir, TokenFile)
		if err := makeToken(path); err != nil {
			return "", path, err
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", path, fmt.Errorf("API token: %w", err)
	}
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o007 != 0 {
		return "", path, fmt.Errorf("API token file %s is open to every user of the device (mode %v): chmod o-rwx it",
			path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", path, fmt.Errorf("API token: %w", err)
	}
	tok = strings.TrimSpace(string(b))
	if len(tok) < MinTokenLen || strings.ContainsAny(tok, " \t\r\n") {
		return "", path, fmt.Errorf("API token file %s: want one token of at least %d characters and no blanks", path, MinTokenLen)
	}
	return tok, path, nil
}

// makeToken writes a new random token to path unless the file exists. The token is
// written whole to a file of its own first and then linked into place, so that a crash
// never leaves a half-written token for the next start to refuse, nor replaces one the POS
// app already holds.
func makeToken(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	var b [32]byte
	rand.Read(b[:]) // never returns an error (crypto/rand)
	f, err := os.CreateTemp(filepath.Dir(path), TokenFile+".*.tmp")
	if err != nil {
		return fmt.Errorf("API token: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(base64.RawURLEncoding.EncodeToString(b[:]) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o600)
	}
	if err == nil {
		if err = os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
			err = nil // made meanwhile: that one stands
		}
	}
	if err != nil {
		return fmt.Errorf("API token: %w", err)
	}
	return nil
}
