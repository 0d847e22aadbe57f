package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
)

const (
	viewerToken   = "wall-screen-viewer-token"
	operatorToken = "duty-manager-operator-token"
	backupToken   = "nightly-backup-token-of-s1"
)

// call sends one request with a bearer token (none if "") and returns the status, the
// Retry-After header and the problem's code, if any.
func call(t *testing.T, base, method, path, token string) (status int, retry, code string) {
	t.Helper()
	var body io.Reader
	if method != "GET" {
		body = strings.NewReader(`{}`)
	}
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, resp.Header.Get("Retry-After"), p.Code
}

// TestManagerTokenRoles runs the store-server binary with a tokens file: the viewer reads
// and changes nothing, the operator reads and changes but takes no backup, the backup token
// takes the backup and reads nothing; each says who it is (GET /v1/whoami, what the
// dashboard shows by). Wrong tokens from one address are answered 401 five times, then 429
// too_many_failures with Retry-After, even for the right token, until the wait is over;
// every refusal is counted by its code and logged.
func TestManagerTokenRoles(t *testing.T) {
	t.Parallel()
	bins := binaries(t)
	s := stack.Run(t, stack.Options{Redis: true, MQTT: true})
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
	ctx := context.Background()
	st, err := e2e.StartStore(ctx, bins.StoreServer, e2e.StoreOptions{Store: "S1", DataDir: filepath.Join(dir, "data"),
		RedisAddr: s.Redis[0].Addr(), MQTTURL: s.MQTTURL(), Extra: []string{"--api-tokens", tokens}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop() })
	base := "http://" + st.API

	type want map[string]int // token → status
	for _, c := range []struct {
		method, path string
		want         want
	}{
		{"GET", "/v1/mode", want{viewerToken: 200, operatorToken: 200, backupToken: 403}},
		{"GET", "/v1/stock", want{viewerToken: 200, operatorToken: 200, backupToken: 403}},
		{"GET", "/v1/terminals", want{viewerToken: 200, operatorToken: 200, backupToken: 403}},
		{"GET", "/metrics", want{viewerToken: 200, operatorToken: 200, backupToken: 403}},
		// A change's body is {} here: past the role, the operator gets the route's own
		// answer (0: anything but 401, 403 and 429).
		{"POST", "/v1/stock/adjust", want{viewerToken: 403, operatorToken: 0, backupToken: 403}},
		{"POST", "/v1/stock/count", want{viewerToken: 403, operatorToken: 0, backupToken: 403}},
		{"POST", "/v1/catalog", want{viewerToken: 403, operatorToken: 0, backupToken: 403}},
		{"PUT", "/v1/limits", want{viewerToken: 403, operatorToken: 0, backupToken: 403}},
		{"POST", "/v1/oversells/resolve", want{viewerToken: 403, operatorToken: 0, backupToken: 403}},
		{"POST", "/v1/parked/resolve", want{viewerToken: 403, operatorToken: 0, backupToken: 403}},
		{"PUT", "/v1/settings/refunds", want{viewerToken: 403, operatorToken: 0, backupToken: 403}},
		{"GET", "/v1/backup", want{viewerToken: 403, operatorToken: 403, backupToken: 200}},
		{"GET", "/v1/whoami", want{viewerToken: 200, operatorToken: 200, backupToken: 200}},
	} {
		for tok, w := range c.want {
			status, _, code := call(t, base, c.method, c.path, tok)
			if w == 0 && status != 401 && status != 403 && status != 429 {
				continue
			}
			if status != w || (w == 403 && code != "forbidden") {
				t.Errorf("%s %s with the %s token: %d %s, want %d", c.method, c.path, tok[:8], status, code, w)
			}
		}
	}
	for tok, wantRole := range map[string]string{viewerToken: "viewer", operatorToken: "operator", backupToken: "backup",
		st.Opts.Token: "manager"} {
		var who struct {
			Role                string
			Read, Write, Backup bool
		}
		req, _ := http.NewRequest("GET", base+"/v1/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&who)
		resp.Body.Close()
		if err != nil || who.Role != wantRole || who.Read != (wantRole != "backup") ||
			who.Write != (wantRole == "operator" || wantRole == "manager") || who.Backup != (wantRole == "backup" || wantRole == "manager") {
			t.Errorf("whoami %s: %+v (%v)", wantRole, who, err)
		}
	}

	// Guessing: five wrong tokens are free, the sixth makes the address wait.
	for i := 1; i <= 6; i++ {
		if status, _, code := call(t, base, "GET", "/v1/mode", "guess-number-"+string(rune('0'+i))+"-of-a-guesser"); status != 401 || code != "unauthorized" {
			t.Fatalf("guess %d: %d %s", i, status, code)
		}
	}
	status, retry, code := call(t, base, "GET", "/v1/mode", viewerToken)
	if status != 429 || code != "too_many_failures" || retry == "" {
		t.Errorf("the right token right after five wrong: %d %s Retry-After %q; want 429 too_many_failures", status, code, retry)
	}
	time.Sleep(1100 * time.Millisecond) // the first wait is 1 s
	if status, _, _ := call(t, base, "GET", "/v1/mode", viewerToken); status != 200 {
		t.Errorf("the right token after the wait: %d", status)
	}

	_, _, _ = call(t, base, "GET", "/v1/mode", "")
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+st.Opts.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, code := range []string{"unauthorized", "forbidden", "too_many_failures"} {
		if !strings.Contains(string(b), `posgate_store_refusals_total{code="`+code+`"}`) {
			t.Errorf("refusals of %s not counted", code)
		}
	}
	logged, _ := os.ReadFile(st.Log)
	for _, code := range []string{"unauthorized", "forbidden", "too_many_failures"} {
		if !strings.Contains(string(logged), `msg="manager api request refused" store=S1 code=`+code) {
			t.Errorf("no log line of %s:\n%s", code, logged)
		}
	}
	if strings.Contains(string(logged), "guess-number") || strings.Contains(string(logged), viewerToken) {
		t.Error("a token was logged")
	}
}
