package api

import (
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/posgate/posgate/terminal-agent/client"
)

// Access says who may call the API: the POS app holding the per-install token, from a page
// of an allowed origin if from a browser at all, through a loopback name (or a name the
// agent's TLS certificate is served under).
type Access struct {
	// Token is the per-install API token every request but the health check and the
	// OpenAPI document carries as "Authorization: Bearer <Token>". It must not be empty.
	Token string
	// Origins are the web origins ("https://pos.example.com") whose pages may call the
	// API; a request with any other Origin header is refused. None: no page may.
	Origins []string
	// Hosts are names besides the loopback ones a request's Host header may give (the
	// agent's name on its TLS certificate, when it listens beyond the device).
	Hosts []string
}

// The stable codes of the requests Access refuses. Nothing of a refused request is read
// beyond its headers, and nothing is written.
const (
	CodeHostForbidden   = "host_forbidden"   // 403: Host is not a loopback name nor a configured one
	CodeOriginForbidden = "origin_forbidden" // 403: an Origin header not configured
	CodeTokenRequired   = "token_required"   // 401: no bearer token
	CodeTokenWrong      = "token_wrong"      // 401: a bearer token other than the install's
	CodeContentType     = "content_type"     // 415: a state-changing request not sent as application/json
)

// guard holds Access as the checks use it.
type guard struct {
	token   [sha256.Size]byte
	origins map[string]bool
	hosts   map[string]bool
}

func newGuard(a Access) guard {
	if a.Token == "" {
		panic("api: Access.Token is empty") // an empty token would match an empty header
	}
	g := guard{token: sha256.Sum256([]byte(a.Token)), origins: map[string]bool{}, hosts: map[string]bool{}}
	for _, o := range a.Origins {
		g.origins[strings.ToLower(strings.TrimRight(o, "/"))] = true
	}
	for _, h := range a.Hosts {
		g.hosts[strings.ToLower(h)] = true
	}
	return g
}

// public are the routes served without the token: they tell nothing a caller could misuse.
var public = map[string]bool{"/v1/health": true, "/v1/openapi.json": true}

// ServeHTTP checks Host, Origin, the token and the body's type, in that order, before the
// request reaches its route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := &s.guard
	if !g.hostOK(r.Host) {
		refuse(w, http.StatusForbidden, CodeHostForbidden,
			"this API answers only on the device (Host localhost, 127.0.0.1 or [::1]), not "+quote(r.Host))
		return
	}
	origin := r.Header.Get("Origin")
	if _, sent := r.Header["Origin"]; sent {
		if !g.origins[strings.ToLower(origin)] {
			refuse(w, http.StatusForbidden, CodeOriginForbidden,
				"web pages of origin "+quote(origin)+" may not call this API (--api-allow-origin)")
			return
		}
		g.cors(w, origin)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			g.preflight(w, r)
			return
		}
	}
	if !(public[r.URL.Path] && (r.Method == http.MethodGet || r.Method == http.MethodHead)) {
		if code, msg := g.tokenOK(r.Header.Get("Authorization")); code != "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="terminal-agent"`)
			refuse(w, http.StatusUnauthorized, code, msg)
			return
		}
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			refuse(w, http.StatusUnsupportedMediaType, CodeContentType,
				"send state-changing requests with Content-Type: application/json, also with no body")
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// hostOK reports whether a Host header names this device: a loopback address or localhost,
// with or without a port, or one of the configured names.
func (g *guard) hostOK(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = strings.ToLower(host)
	if host == "" {
		return false
	}
	if host == "localhost" || g.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenOK checks an Authorization header against the install's token, in constant time
// (both sides hashed first, so that not even the length leaks). It returns a refusal's
// code and message, or "" when the token is right.
func (g *guard) tokenOK(header string) (code, msg string) {
	scheme, tok, _ := strings.Cut(header, " ")
	tok = strings.TrimSpace(tok)
	if header == "" || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return CodeTokenRequired, "send the terminal's API token: Authorization: Bearer <token>"
	}
	sum := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(sum[:], g.token[:]) != 1 {
		return CodeTokenWrong, "the API token is not this terminal's"
	}
	return "", ""
}

// cors lets a page of an allowed origin read the answer.
func (g *guard) cors(w http.ResponseWriter, origin string) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
}

// preflight answers a browser's CORS preflight from an allowed origin: the methods and
// headers the API takes, and (Private Network Access) that a public page may reach the device.
func (g *guard) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key")
	h.Set("Access-Control-Max-Age", "600")
	if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
		h.Set("Access-Control-Allow-Private-Network", "true")
	}
	w.WriteHeader(http.StatusNoContent)
}

func refuse(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(client.ErrorBody{Code: code, Message: msg})
	writeRaw(w, status, body)
}

func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// OpenAPI is the OpenAPI 3.1 document of this API, served at GET /v1/openapi.json without
// the token (it holds nothing secret), from which POS teams generate their clients.
//
//go:embed openapi.json
var OpenAPI []byte

// openapi answers GET /v1/openapi.json.
func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(OpenAPI)
}

// health answers GET /v1/health: the agent is up, and nothing more.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	writeRaw(w, http.StatusOK, []byte(`{"status":"up"}`))
}
