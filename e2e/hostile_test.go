//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/broker"
	"github.com/posgate/posgate/store-server/client"
	"golang.org/x/crypto/bcrypt"
)

// The hostile-input suite: requests and messages an attacker on the store's network or on
// the internet would send, each from the outside against the real binaries (store-server
// with its embedded broker and manager API, hq-sync serve). Every case is refused with a
// stable code and counted under it; every code is logged; and nothing of it reaches the
// ledger, Redis or HQ (checked against a snapshot taken before and after).

const (
	hsStore    = "S001"
	hsSecret   = "S001-secret-of-the-hostile-suite"
	hsViewer   = "hostile-suite-viewer-token"
	hsOperator = "hostile-suite-operator-token"
	hsBackup   = "hostile-suite-backup-token-1"
)

// hsEnv is the suite's store and HQ.
type hsEnv struct {
	store *StoreServer
	hq    *Serve
	addrs atomic.Int32 // the last 127.0.x.y client address handed out
	cases int
}

// fromNewAddr returns an HTTP client whose connections come from a loopback address of
// their own: a case's wrong token or signature is then the first failure of its address,
// and the waits that guard against guessing (tested on their own) do not change its answer.
func (e *hsEnv) fromNewAddr() *http.Client {
	n := e.addrs.Add(1)
	ip := net.IPv4(127, 0, byte(1+n/250), byte(2+n%250))
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// metric returns the value of the series named exactly line (name{labels}) at url, 0 if
// absent.
func hsMetric(t *testing.T, url, token, series string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func (e *hsEnv) storeRefusals(t *testing.T, code string) float64 {
	return hsMetric(t, "http://"+e.store.API+"/metrics", e.store.Opts.Token, `posgate_store_refusals_total{code="`+code+`"}`)
}

// snapshot is what no hostile case may change: the store's stock (ledger and Redis), its
// day's totals, its terminals, and what HQ stored.
func (e *hsEnv) snapshot(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	m := e.store.Manager()
	stock, err := m.Stock(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	totals, err := m.Totals(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	terms, err := m.Terminals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// T01 is enrolled: what it sends that the store refuses is parked under its name (the
	// ledger's record of a refusal, resolvable by a manager), never booked. No other terminal
	// may appear.
	var names []string
	for _, r := range terms.Terminals {
		if r.Terminal != "T01" {
			names = append(names, fmt.Sprintf("%s@%d", r.Terminal, r.LastSeq))
		}
	}
	b, _ := json.Marshal([]any{stock.Stock, totals.Store, names,
		hsMetric(t, e.hq.MetricsURL, "", `posgate_hq_batches_total{result="stored",store="`+hsStore+`"}`),
		hsMetric(t, e.hq.MetricsURL, "", `posgate_hq_rows_total{store="`+hsStore+`"}`)})
	return string(b)
}

func TestHostileInput(t *testing.T) {
	stack.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	st := stack.Run(t, stack.Options{Redis: true})
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := Build(ctx, root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cat := write("catalog.csv", "sku,name,price\nMILK,Milk 1L,12.50\nTEA,Green tea,0.30\n")
	terminals := write("terminals", "T01\n")
	tokens := write("tokens.json", `[{"name":"wall","role":"viewer","token":"`+hsViewer+`"},
		{"name":"duty","role":"operator","token":"`+hsOperator+`"},{"name":"nightly","role":"backup","token":"`+hsBackup+`"}]`)
	sdir := filepath.Join(dir, "store")
	os.MkdirAll(sdir, 0o700)
	e := &hsEnv{}
	if e.store, err = StartStore(ctx, bins.StoreServer, StoreOptions{Store: hsStore, DataDir: sdir, RedisAddr: st.Redis[0].Addr(),
		Catalog: cat, Extra: []string{"--terminals", terminals, "--api-tokens", tokens}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Stop() })
	for sku, q := range map[string]int64{"MILK": 100, "TEA": 10} {
		if _, err := e.store.Manager().Adjust(ctx, client.AdjustRequest{ID: "open-" + sku, SKU: sku, Delta: q,
			Reason: client.ReasonOpening}); err != nil {
			t.Fatal(err)
		}
	}
	hqDir := filepath.Join(dir, "hq")
	os.MkdirAll(hqDir, 0o700)
	if e.hq, err = StartServe(ctx, bins.HQSync, ServeOptions{DB: filepath.Join(hqDir, "hq.db"), Dir: hqDir,
		Stores: map[string]string{hsStore: hsSecret}, LogLevel: "warn"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.hq.Stop() })

	before := e.snapshot(t)
	storeCodes := map[string]bool{}
	hqCodes := map[string]bool{}
	t.Run("manager api", func(t *testing.T) { e.managerCases(t, storeCodes) })
	t.Run("mqtt", func(t *testing.T) { e.mqttCases(t, storeCodes) })
	t.Run("hq", func(t *testing.T) { e.hqCases(t, hqCodes) })
	accounts := e.startAccountsStore(t, bins.StoreServer, st.Redis[0].Addr(), dir)
	accountsBefore := accounts.snapshot(t)
	accountCodes := map[string]bool{}
	t.Run("mqtt accounts", func(t *testing.T) { accounts.accountCases(t, accountCodes); e.cases += accounts.cases })
	if after := accounts.snapshot(t); after != accountsBefore {
		t.Errorf("the hostile cases changed the store with accounts:\nbefore %s\nafter  %s", accountsBefore, after)
	}
	if after := e.snapshot(t); after != before {
		t.Errorf("the hostile cases changed the store or HQ:\nbefore %s\nafter  %s", before, after)
	}
	for log, codes := range map[string]map[string]bool{e.store.Log: storeCodes, e.hq.Log: hqCodes, accounts.store.Log: accountCodes} {
		b, _ := os.ReadFile(log)
		for code := range codes {
			if !regexp.MustCompile(`code=` + regexp.QuoteMeta(code) + `\b`).Match(b) {
				t.Errorf("%s: no line logs code %s", filepath.Base(log), code)
			}
		}
	}
	t.Logf("hostile cases: %d", e.cases)
	fmt.Fprintf(os.Stderr, "TestHostileInput: %d hostile cases\n", e.cases)
}

// hsRequest is one hostile request to the manager API.
type hsRequest struct {
	name, method, path, token, auth, ctype string
	body                                   string
	status                                 int
	code                                   string
}

func (e *hsEnv) managerCases(t *testing.T, codes map[string]bool) {
	type route struct {
		method, path string
		write        bool
	}
	routes := []route{
		{"GET", "/v1/mode", false}, {"GET", "/v1/stock", false}, {"GET", "/v1/catalog", false},
		{"GET", "/v1/settings", false}, {"GET", "/v1/totals", false}, {"GET", "/v1/oversells", false},
		{"GET", "/v1/refund-exceptions", false}, {"GET", "/v1/parked", false}, {"GET", "/v1/terminals", false},
		{"GET", "/v1/hq", false}, {"GET", "/v1/charts/sales", false}, {"GET", "/v1/charts/history", false},
		{"GET", "/v1/limits", false}, {"GET", "/metrics", false}, {"GET", "/v1/price-exceptions", false},
		{"POST", "/v1/stock/adjust", true}, {"POST", "/v1/stock/count", true}, {"POST", "/v1/catalog", true},
		{"PUT", "/v1/settings/supervisors/Wang", true}, {"DELETE", "/v1/settings/supervisors/Wang", true},
		{"PUT", "/v1/settings/refunds", true}, {"POST", "/v1/oversells/resolve", true},
		{"POST", "/v1/refund-exceptions/resolve", true}, {"POST", "/v1/parked/resolve", true},
		{"PUT", "/v1/limits", true}, {"POST", "/v1/promo", true}, {"POST", "/v1/price-exceptions/resolve", true},
	}
	var cases []hsRequest
	for _, r := range routes {
		p := r.method + " " + r.path
		cases = append(cases,
			hsRequest{name: "no token " + p, method: r.method, path: r.path, status: 401, code: "unauthorized"},
			hsRequest{name: "a guessed token " + p, method: r.method, path: r.path, token: "guessed-token-of-an-attacker", status: 401, code: "unauthorized"},
			hsRequest{name: "the token in Basic " + p, method: r.method, path: r.path, auth: "Basic " + hsOperator, status: 401, code: "unauthorized"},
			hsRequest{name: "the backup token " + p, method: r.method, path: r.path, token: hsBackup, status: 403, code: "forbidden"},
		)
		if r.write {
			cases = append(cases, hsRequest{name: "the viewer token " + p, method: r.method, path: r.path, token: hsViewer,
				status: 403, code: "forbidden"})
		}
	}
	cases = append(cases,
		hsRequest{name: "no token backup", method: "GET", path: "/v1/backup", status: 401, code: "unauthorized"},
		hsRequest{name: "the viewer's backup", method: "GET", path: "/v1/backup", token: hsViewer, status: 403, code: "forbidden"},
		hsRequest{name: "the operator's backup", method: "GET", path: "/v1/backup", token: hsOperator, status: 403, code: "forbidden"},
		hsRequest{name: "a token prefix", method: "GET", path: "/v1/mode", token: hsOperator[:10], status: 401, code: "unauthorized"},
		hsRequest{name: "a token with a suffix", method: "GET", path: "/v1/mode", token: hsOperator + "x", status: 401, code: "unauthorized"},
		hsRequest{name: "an empty bearer", method: "GET", path: "/v1/mode", auth: "Bearer ", status: 401, code: "unauthorized"},
		hsRequest{name: "a token without its scheme", method: "GET", path: "/v1/mode", auth: hsOperator, status: 401, code: "unauthorized"},
		hsRequest{name: "a 4 KiB token", method: "GET", path: "/v1/mode", token: strings.Repeat("A", 4096), status: 401, code: "unauthorized"},
		hsRequest{name: "the token as a query", method: "GET", path: "/v1/mode?token=" + hsOperator, status: 401, code: "unauthorized"},
	)
	for _, c := range cases {
		e.managerCase(t, c, codes)
	}
}

// managerCase sends c from an address of its own and checks its answer and that its code
// was counted once more.
func (e *hsEnv) managerCase(t *testing.T, c hsRequest, codes map[string]bool) {
	t.Run(c.name, func(t *testing.T) {
		e.cases++
		codes[c.code] = true
		was := e.storeRefusals(t, c.code)
		var body io.Reader
		if c.method != "GET" && c.method != "DELETE" {
			if c.body == "" {
				c.body = "{}"
			}
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, "http://"+e.store.API+c.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := e.fromNewAddr().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p struct{ Code string }
		json.Unmarshal(b, &p)
		if resp.StatusCode != c.status || p.Code != c.code {
			t.Errorf("%d %s, want %d %s", resp.StatusCode, b, c.status, c.code)
		}
		if now := e.storeRefusals(t, c.code); now != was+1 {
			t.Errorf("%s counted %v → %v, want one more", c.code, was, now)
		}
	})
}

// mqttCases act as devices on the store's network talking to its embedded broker.
func (e *hsEnv) mqttCases(t *testing.T, codes map[string]bool) {
	downs := make(chan wire.Acks, 256)
	opts := mqtt.NewClientOptions().AddBroker(e.store.Broker).SetClientID("hostile-device").
		SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second)
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	if tok := c.Subscribe("pos/"+hsStore+"/+/down", 1, func(_ mqtt.Client, m mqtt.Message) {
		if a, err := wire.DecodeAcks(m.Payload()); err == nil {
			downs <- a
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	at := time.Now().Add(-time.Minute)
	heartbeat := func(terminal string, seq int64) []byte {
		p, _ := json.Marshal(wire.HeartbeatPayload{Backlog: 1})
		b, _ := json.Marshal(wire.NewEnvelope(wire.KindHeartbeat, hsStore, terminal, seq, at, p))
		return b
	}
	publish := func(t *testing.T, topic string, retained bool, payload []byte) {
		if tok := c.Publish(topic, 1, retained, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", topic, tok.Error())
		}
	}
	// waitCount waits until code's counter passed was.
	waitCount := func(t *testing.T, code string, was float64) {
		deadline := time.Now().Add(5 * time.Second)
		for e.storeRefusals(t, code) <= was {
			if time.Now().After(deadline) {
				t.Fatalf("%s not counted", code)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Terminals not enrolled: nothing of theirs is taken or answered.
	type stranger struct{ name, topic string }
	var strangers []stranger
	for _, term := range []string{"T02", "T99", "t01", "T01x", "ADMIN", "store-S001", "T_" + strings.Repeat("9", 60)} {
		strangers = append(strangers,
			stranger{"up of " + term, wire.UpTopic(hsStore, term)},
			stranger{"status of " + term, wire.StatusTopic(hsStore, term)},
			stranger{"backlog of " + term, wire.BacklogTopic(hsStore, term)})
	}
	strangers = append(strangers, stranger{"up of a terminal id with a space", "pos/" + hsStore + "/T 01/up"},
		stranger{"up of a terminal id of 200 bytes", "pos/" + hsStore + "/" + strings.Repeat("x", 200) + "/up"})
	for _, s := range strangers {
		t.Run(s.name, func(t *testing.T) {
			e.cases++
			codes["terminal_unknown"] = true
			was := e.storeRefusals(t, "terminal_unknown")
			term := strings.Split(s.topic, "/")[2]
			publish(t, s.topic, strings.HasSuffix(s.topic, "/status"), heartbeat(term, 1))
			waitCount(t, "terminal_unknown", was)
		})
	}
	// T01 is enrolled: what it sends that breaks the wire is refused with the wire's code.
	seq := int64(0)
	envelope := func(edit map[string]any) []byte {
		seq++
		var m map[string]json.RawMessage
		json.Unmarshal(heartbeat("T01", seq), &m)
		for k, v := range edit {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = json.RawMessage(v.(string))
			}
		}
		b, _ := json.Marshal(m)
		return b
	}
	for _, w := range []struct {
		name, code string
		edit       map[string]any
	}{
		{"an envelope naming another terminal", "wire_terminal_mismatch", nil}, // T02's own, sealed
		{"a forged hash", wire.CodeHash, map[string]any{"hash": `"` + strings.Repeat("a", 64) + `"`}},
		{"another version", wire.CodeVersion, map[string]any{"v": `2`}},
		{"an unknown kind", wire.CodeKind, map[string]any{"kind": `"coupon"`}},
		{"no hash", wire.CodeMissing, map[string]any{"hash": nil}},
		{"no business time", wire.CodeMissing, map[string]any{"at": nil}},
		{"no payload", wire.CodeMissing, map[string]any{"payload": nil}},
		{"no store", wire.CodeMissing, map[string]any{"store": nil}},
		{"an unknown field", wire.CodeUnknownField, map[string]any{"discount": `"5.00"`}},
		{"a key of another seq", wire.CodeKey, map[string]any{"key": `"T01:999999"`}},
		{"a business time without offset", wire.CodeType, map[string]any{"at": `"2026-01-02T10:00:00"`}},
		{"a payload that is an array", wire.CodeType, map[string]any{"payload": `[1]`}},
		{"a store id with a slash", wire.CodeID, map[string]any{"store": `"S/1"`}},
		{"a business time in the year 9999", wire.CodeTime, map[string]any{"at": `"9999-06-01T00:00:00Z"`}},
	} {
		t.Run(w.name, func(t *testing.T) {
			e.cases++
			codes[w.code] = true
			was := e.storeRefusals(t, w.code)
			edit := map[string]any{}
			for k, v := range w.edit {
				if s, ok := v.(string); ok {
					v = strings.ReplaceAll(s, "SEQ", strconv.FormatInt(seq+1, 10))
				}
				edit[k] = v
			}
			// T02's sealed envelope takes none of T01's seqs: T01's follow in order from 1, as
			// the store takes a till's events (one beyond its next is out_of_order, and asked for
			// again from the first it lacks).
			var msg []byte
			if w.edit == nil {
				msg = heartbeat("T02", seq+1)
			} else {
				msg = envelope(edit)
			}
			publish(t, wire.UpTopic(hsStore, "T01"), false, msg)
			select {
			case a := <-downs:
				if len(a.Acks) != 1 || a.Acks[0].Status != wire.AckRejected || a.Acks[0].Code != w.code {
					t.Errorf("answered %+v, want rejected %s", a.Acks, w.code)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("not answered")
			}
			waitCount(t, w.code, was)
		})
	}
}

// hqCases are requests from the internet to HQ's batch endpoint.
func (e *hsEnv) hqCases(t *testing.T, codes map[string]bool) {
	url := e.hq.BatchesURL()
	good := func(id string) []byte {
		b, _ := json.Marshal(hqwire.Batch{V: hqwire.Version, Store: hsStore, ID: id, SentAt: time.Now()})
		return b
	}
	type hqCase struct {
		name   string
		body   []byte
		edit   func(h http.Header, body []byte) []byte // headers signed over body first, then edited
		secret string
		status int
		code   string
	}
	now := func() string { return strconv.FormatInt(time.Now().Unix(), 10) }
	var cases []hqCase
	for i, store := range []string{"S002", "S999", "ADMIN", "s001", "S0001", "../S001", strings.Repeat("S", 300)} {
		cases = append(cases, hqCase{name: fmt.Sprintf("unknown store %d", i), body: good("b-u"),
			edit:   func(h http.Header, b []byte) []byte { h.Set(hqwire.HeaderStore, store); return b },
			status: 401, code: hqwire.CodeUnauthorized})
	}
	for _, hdr := range []string{hqwire.HeaderStore, hqwire.HeaderTimestamp, hqwire.HeaderSignature, hqwire.HeaderContentHash} {
		cases = append(cases, hqCase{name: "no " + hdr, body: good("b-h"),
			edit: func(h http.Header, b []byte) []byte { h.Del(hdr); return b }, status: 401, code: hqwire.CodeUnauthorized})
	}
	// A body other than the one signed, with a good signature: the store's failures so far
	// are forgiven, so that the next few are heard.
	cases = append(cases,
		hqCase{name: "another body than the one signed", body: good("b-b"), status: 400, code: hqwire.CodeContentHashMismatch,
			edit: func(h http.Header, b []byte) []byte {
				return bytes.Replace(b, []byte(`"rows":null`), []byte(`"rows":[]`), 1)
			}},
		hqCase{name: "a guessed secret", body: good("b-g"), secret: "guessed-secret-of-16-bytes", status: 401, code: hqwire.CodeUnauthorized},
		hqCase{name: "a signature in upper case", body: good("b-c"), status: 401, code: hqwire.CodeUnauthorized,
			edit: func(h http.Header, b []byte) []byte {
				h.Set(hqwire.HeaderSignature, strings.ToUpper(h.Get(hqwire.HeaderSignature)))
				return b
			}},
		hqCase{name: "a signature of another batch id", body: good("b-i"), status: 401, code: hqwire.CodeUnauthorized,
			edit: func(h http.Header, b []byte) []byte { h.Set(hqwire.HeaderIdemKey, "other"); return b }},
		hqCase{name: "a timestamp an hour old", body: good("b-t"), status: 401, code: hqwire.CodeTimestampSkew,
			edit: func(h http.Header, b []byte) []byte { return nil }},
		hqCase{name: "another body than the one signed", body: good("b-b"), status: 400, code: hqwire.CodeContentHashMismatch,
			edit: func(h http.Header, b []byte) []byte {
				return bytes.Replace(b, []byte(`"rows":null`), []byte(`"rows":[]`), 1)
			}},
		hqCase{name: "a body of another store", body: bytes.Replace(good("b-s"), []byte(`"store":"S001"`), []byte(`"store":"S002"`), 1),
			status: 403, code: hqwire.CodeStoreMismatch},
		hqCase{name: "a batch id other than the key", body: good("b-k"), status: 400, code: hqwire.CodeIdempotencyKeyMismatch,
			edit: func(h http.Header, b []byte) []byte { return b }},
		hqCase{name: "not JSON", body: []byte("not json"), status: 400, code: hqwire.CodeJSONInvalid},
		hqCase{name: "two JSON documents", body: append(good("b-2"), good("b-2")...), status: 400, code: hqwire.CodeJSONInvalid},
		hqCase{name: "an unknown field", body: bytes.Replace(good("b-f"), []byte(`{`), []byte(`{"admin":true,`), 1), status: 400, code: hqwire.CodeJSONInvalid},
		hqCase{name: "a row of an unknown kind", body: bytes.Replace(good("b-r"), []byte(`"rows":null`),
			[]byte(`"rows":[{"kind":"coupon","terminal":"T01","seq":1}]`), 1), status: 400, code: hqwire.CodeBatchInvalid},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.cases++
			codes[c.code] = true
			series := `posgate_hq_batches_total{result="` + c.code + `",store="`
			was := hsMetricPrefix(t, e.hq.MetricsURL, series)
			var id struct {
				ID string `json:"batch_id"`
			}
			json.Unmarshal(c.body, &id)
			if id.ID == "" {
				id.ID = "b-x"
			}
			secret := hsSecret
			if c.secret != "" {
				secret = c.secret
			}
			ts := now()
			if c.code == hqwire.CodeTimestampSkew {
				ts = strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
			}
			key := id.ID
			if c.code == hqwire.CodeIdempotencyKeyMismatch {
				key = "another-batch-id"
			}
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			h.Set(hqwire.HeaderStore, hsStore)
			h.Set(hqwire.HeaderTimestamp, ts)
			h.Set(hqwire.HeaderIdemKey, key)
			h.Set(hqwire.HeaderContentHash, hqwire.ContentHash(c.body))
			h.Set(hqwire.HeaderSignature, hqwire.Sign([]byte(secret), "POST", "/v1/batches", hsStore, ts, key, c.body))
			body := c.body
			if c.edit != nil && c.code != hqwire.CodeTimestampSkew {
				body = c.edit(h, c.body)
			}
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header = h
			resp, err := e.fromNewAddr().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var p struct{ Code string }
			json.Unmarshal(b, &p)
			if resp.StatusCode != c.status || p.Code != c.code {
				t.Errorf("%d %s, want %d %s", resp.StatusCode, b, c.status, c.code)
			}
			if now := hsMetricPrefix(t, e.hq.MetricsURL, series); now != was+1 {
				t.Errorf("%s counted %v → %v, want one more", c.code, was, now)
			}
		})
	}
}

// hsMetricPrefix sums the series at url whose name and labels start with prefix.
func hsMetricPrefix(t *testing.T, url, prefix string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			i := strings.LastIndexByte(l, ' ')
			f, _ := strconv.ParseFloat(l[i+1:], 64)
			sum += f
		}
	}
	return sum
}

// startAccountsStore starts a second store, S002, whose embedded broker admits only the
// accounts of its users file (T01's), on the same Redis and HQ.
func (e *hsEnv) startAccountsStore(t *testing.T, bin, redisAddr, dir string) *hsEnv {
	t.Helper()
	u, err := broker.NewUser("t01", "t01-password-of-the-suite", "T01", bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users, _ := json.Marshal([]broker.User{u})
	path := filepath.Join(dir, "users.json")
	if err := os.WriteFile(path, users, 0o600); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "store2")
	os.MkdirAll(sdir, 0o700)
	a := &hsEnv{hq: e.hq}
	if a.store, err = StartStore(context.Background(), bin, StoreOptions{Store: "S002", DataDir: sdir, RedisAddr: redisAddr,
		Extra: []string{"--mqtt-users", path}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.store.Stop() })
	return a
}

// accountCases are devices that try the accounts store's broker: each refused login,
// publish and subscription is counted under its code.
func (e *hsEnv) accountCases(t *testing.T, codes map[string]bool) {
	// Each device connects from a loopback address of its own (as fromNewAddr), so that the
	// waits after failed logins per address do not change the answers.
	connect := func(id, user, pass string) (mqtt.Client, error) {
		n := e.addrs.Add(1)
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(101+n/250), byte(2+n%250))}, Timeout: 5 * time.Second}
		c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(e.store.Broker).SetClientID(id).SetUsername(user).SetDialer(d).
			SetPassword(pass).SetProtocolVersion(4).SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second))
		tok := c.Connect()
		if !tok.WaitTimeout(5 * time.Second) {
			return nil, fmt.Errorf("timed out")
		}
		return c, tok.Error()
	}
	counted := func(t *testing.T, code string, was float64) {
		deadline := time.Now().Add(5 * time.Second)
		for e.storeRefusals(t, code) <= was {
			if time.Now().After(deadline) {
				t.Fatalf("%s not counted", code)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, c := range []struct{ name, id, user, pass, code string }{
		{"an unknown user", "x1", "admin", "admin-password-guess", broker.CodeUserUnknown},
		{"an empty user", "x2", "", "", broker.CodeUserUnknown},
		{"the store's own name", "x3", "store-S002", "a-password-guess", broker.CodeUserUnknown},
		{"a wrong password", "x4", "t01", "a-wrong-password-1", broker.CodePasswordWrong},
		{"an empty password", "x5", "t01", "", broker.CodePasswordWrong},
		{"the password's prefix", "x6", "t01", "t01-password", broker.CodePasswordWrong},
		{"another terminal's agent id", "posgate-S002-T02", "t01", "t01-password-of-the-suite", broker.CodeClientIDForeign},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.cases++
			codes[c.code] = true
			was := e.storeRefusals(t, c.code)
			if cl, err := connect(c.id, c.user, c.pass); err == nil {
				cl.Disconnect(10)
				t.Fatal("let in")
			}
			counted(t, c.code, was)
		})
	}
	cl, err := connect("posgate-S002-T01", "t01", "t01-password-of-the-suite")
	if err != nil {
		t.Fatalf("T01's own login: %v", err)
	}
	defer cl.Disconnect(50)
	for _, c := range []struct {
		name, topic string
		publish     bool
		code        string
	}{
		{"publish as T02", wire.UpTopic("S002", "T02"), true, broker.CodePublishDenied},
		{"publish T02's status", wire.StatusTopic("S002", "T02"), true, broker.CodePublishDenied},
		{"publish the catalog", wire.CatalogTopic("S002"), true, broker.CodePublishDenied},
		{"publish the settings", wire.SettingsTopic("S002"), true, broker.CodePublishDenied},
		{"publish acks to itself", wire.DownTopic("S002", "T01"), true, broker.CodePublishDenied},
		{"publish to another store", wire.UpTopic("S001", "T01"), true, broker.CodePublishDenied},
		{"subscribe to T02's acks", wire.DownTopic("S002", "T02"), false, broker.CodeSubscribeDenied},
		{"subscribe to every up topic", "pos/S002/+/up", false, broker.CodeSubscribeDenied},
		{"subscribe to everything", "#", false, broker.CodeSubscribeDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.cases++
			codes[c.code] = true
			was := e.storeRefusals(t, c.code)
			if c.publish {
				cl.Publish(c.topic, 0, false, []byte(`{"v":1}`)).WaitTimeout(2 * time.Second)
			} else {
				cl.Subscribe(c.topic, 1, func(mqtt.Client, mqtt.Message) {}).WaitTimeout(2 * time.Second)
			}
			counted(t, c.code, was)
		})
	}
}
