package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
)

// TestPriceRoutesByRole runs the store-server binary with tokens of each role: the price
// exceptions are read by the viewer and the operator, not by the backup token; only the
// operator (and the store's own token) resolves one — the viewer is answered 403 forbidden
// and nothing is resolved; no token is 401.
func TestPriceRoutesByRole(t *testing.T) {
	t.Parallel()
	bins := binaries(t)
	s := stack.Run(t, stack.Options{Redis: true})
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`[{"name":"wall","role":"viewer","token":"`+viewerToken+`"},
		{"name":"duty","role":"operator","token":"`+operatorToken+`"},
		{"name":"nightly","role":"backup","token":"`+backupToken+`"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := e2e.StartStore(context.Background(), bins.StoreServer, e2e.StoreOptions{Store: "S1", DataDir: filepath.Join(dir, "data"),
		RedisAddr: s.Redis[0].Addr(), Extra: []string{"--api-tokens", tokens}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Kill() })
	base := "http://" + st.API
	const list, resolve = "/v1/price-exceptions", "/v1/price-exceptions/resolve"
	for _, c := range []struct {
		method, path, who, token string
		status                   int
		code                     string
	}{
		{"GET", list, "no token", "", 401, "unauthorized"},
		{"GET", list, "the viewer", viewerToken, 200, ""},
		{"GET", list + "?all=1", "the viewer", viewerToken, 200, ""},
		{"GET", list, "the operator", operatorToken, 200, ""},
		{"GET", list, "the backup token", backupToken, 403, "forbidden"},
		{"POST", resolve, "no token", "", 401, "unauthorized"},
		{"POST", resolve, "the viewer", viewerToken, 403, "forbidden"},
		{"POST", resolve, "the backup token", backupToken, 403, "forbidden"},
		// The operator gets past the role: the empty request is then refused as input.
		{"POST", resolve, "the operator", operatorToken, 400, ""},
	} {
		status, _, code := call(t, base, c.method, c.path, c.token)
		if status != c.status || (c.code != "" && code != c.code) {
			t.Errorf("%s %s by %s: %d %q, want %d %q", c.method, c.path, c.who, status, code, c.status, c.code)
		}
	}
}
