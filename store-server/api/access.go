package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// Role is what a manager token may do.
type Role string

// The roles of the manager API's tokens. The store's own token (--api-token-file) may do
// everything; a token of the tokens file (LoadTokens) one role.
const (
	RoleManager  Role = "manager"  // everything (the store's own token)
	RoleViewer   Role = "viewer"   // the dashboard and every read
	RoleOperator Role = "operator" // the reads, and stock, counts, catalog, settings, limits, resolutions
	RoleBackup   Role = "backup"   // GET /v1/backup only
	roleMetrics  Role = "metrics"  // GET /metrics only (MetricsToken)
)

// MinTokenBytes is the shortest manager token taken.
const MinTokenBytes = 16

// need is what a route asks of a token.
type need int

const (
	needRead need = iota
	needWrite
	needBackup
	needMetrics
	needAny // any known token (GET /v1/whoami)
)

// may reports whether role may do what n asks.
func (role Role) may(n need) bool {
	if n == needAny {
		return role != ""
	}
	switch role {
	case RoleManager:
		return true
	case RoleOperator:
		return n == needRead || n == needWrite || n == needMetrics
	case RoleViewer:
		return n == needRead || n == needMetrics
	case RoleBackup:
		return n == needBackup
	case roleMetrics:
		return n == needMetrics
	}
	return false
}

// RoleToken is one token of the tokens file: its name (for the log), its role and the token.
type RoleToken struct {
	Name  string `json:"name"`
	Role  Role   `json:"role"`
	Token string `json:"token"`
}

// LoadTokens reads a tokens file: a JSON list of {name, role, token}, each token at least
// MinTokenBytes and each of viewer, operator or backup.
func LoadTokens(path string) ([]RoleToken, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list []RoleToken
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, t := range list {
		switch {
		case !wire.ValidID(t.Name):
			return nil, fmt.Errorf("%s: entry %d: name %q: want 1-%d characters of A-Z a-z 0-9 _ -", path, i+1, t.Name, wire.MaxIDLen)
		case t.Role != RoleViewer && t.Role != RoleOperator && t.Role != RoleBackup:
			return nil, fmt.Errorf("%s: %s: role %q: want viewer, operator or backup", path, t.Name, t.Role)
		case len(t.Token) < MinTokenBytes:
			return nil, fmt.Errorf("%s: %s: token of %d bytes, want at least %d", path, t.Name, len(t.Token), MinTokenBytes)
		case seen[t.Token]:
			return nil, fmt.Errorf("%s: %s: a token given twice", path, t.Name)
		}
		seen[t.Token] = true
	}
	return list, nil
}

// Booker books a refusal by its code (refusals.Book).
type Booker interface {
	Note(level slog.Level, code, msg string, attrs ...any)
}

// who returns the role and name of the request's token; ok is false without a known token.
func (s *Server) who(r *http.Request) (role Role, name string, ok bool) {
	// Every token is compared, so that the time taken does not say which matched.
	for _, t := range s.Tokens {
		if bearer(r, t.Token) && !ok {
			role, name, ok = t.Role, t.Name, true
		}
	}
	if bearer(r, s.Token) {
		role, name, ok = RoleManager, "manager", true
	}
	if bearer(r, s.MetricsToken) && !ok {
		role, name, ok = roleMetrics, "metrics", true
	}
	return role, name, ok
}

// authorize lets r through to what n asks, or answers it: 401 unauthorized (no known
// token, counted against the client's address), 429 too_many_failures (that address failed
// too often lately: it waits a doubling delay before its next token is checked), or 403
// forbidden (a known token whose role may not).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, n need) bool {
	addr := clientAddr(r)
	failures := s.failures()
	if wait := failures.Wait(addr); wait > 0 {
		s.refuse(w, r, perr.New(perr.RateLimited, "too_many_failures",
			"too many requests without a valid token from this address: wait %v", wait.Round(time.Second)), wait)
		return false
	}
	role, name, ok := s.who(r)
	if !ok {
		wait := time.Duration(0)
		if r.Header.Get("Authorization") != "" {
			wait = failures.Fail(addr)
		}
		s.refuse(w, r, perr.New(perr.Unauthorized, "unauthorized", "send a manager token as 'Authorization: Bearer <token>'"), 0,
			"wait", wait)
		return false
	}
	failures.Succeed(addr)
	if !role.may(n) {
		s.refuse(w, r, perr.New(perr.Forbidden, "forbidden", "the token %s (%s) may not do this", name, role), 0, "token", name)
		return false
	}
	return true
}

// refuse answers r with err, and books the refusal.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err *perr.Error, retry time.Duration, attrs ...any) {
	if s.Refusals != nil {
		s.Refusals.Note(slog.LevelWarn, err.Code, "manager api request refused",
			append([]any{"method", r.Method, "path", clip(r.URL.Path), "addr", clientAddr(r)}, attrs...)...)
	}
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
	}
	writeError(w, err)
}

func (s *Server) failures() *guard.Guard {
	s.failOnce.Do(func() {
		if s.Failures == nil {
			s.Failures = guard.New(guard.Config{})
		}
	})
	return s.Failures
}

// clientAddr is the request's peer address without its port.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// WhoAmI is the answer of GET /v1/whoami: the token's role and what it may do, for the
// dashboard to show only that.
type WhoAmI struct {
	Role   Role `json:"role"`
	Read   bool `json:"read"`
	Write  bool `json:"write"`
	Backup bool `json:"backup"`
}

func (s *Server) whoami(r *http.Request) (any, error) {
	role, _, _ := s.who(r)
	return WhoAmI{Role: role, Read: role.may(needRead), Write: role.may(needWrite), Backup: role.may(needBackup)}, nil
}
