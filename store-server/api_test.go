package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/store"
)

// apiImport is the answer of POST /v1/catalog, as the wire tests decode it.
type apiImport struct {
	Version int64 `json:"version"`
	Items   int   `json:"items"`
}

// apiRoutes are the token-protected endpoints of the manager API.
var apiRoutes = []struct{ method, path string }{
	{"GET", "/v1/mode"},
	{"GET", "/v1/stock"},
	{"POST", "/v1/stock/adjust"},
	{"POST", "/v1/stock/count"},
	{"GET", "/v1/catalog"},
	{"POST", "/v1/catalog"},
	{"GET", "/v1/totals"},
	{"GET", "/v1/oversells"},
	{"POST", "/v1/oversells/resolve"},
	{"GET", "/v1/price-exceptions"},
	{"POST", "/v1/price-exceptions/resolve"},
	{"GET", "/v1/flow-exceptions"},
	{"POST", "/v1/flow-exceptions/resolve"},
	{"GET", "/v1/refund-exceptions"},
	{"POST", "/v1/refund-exceptions/resolve"},
	{"GET", "/v1/parked"},
	{"POST", "/v1/parked/resolve"},
	{"GET", "/v1/terminals"},
	{"GET", "/v1/hq"},
	{"GET", "/metrics"},
	{"GET", "/v1/limits"},
	{"PUT", "/v1/limits"},
	{"POST", "/v1/promo"},
	{"GET", "/v1/backup"},
	{"GET", "/v1/whoami"},
}

func TestManagerAPI(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	c, ctx := srv.manager(), context.Background()

	catalogNow := func(t *testing.T) wire.Catalog {
		t.Helper()
		return must[wire.Catalog](t, "catalog")(c.Catalog(ctx))
	}

	t.Run("healthz needs no token", func(t *testing.T) {
		var h struct {
			OK   bool        `json:"ok"`
			Mode client.Mode `json:"mode"`
		}
		status, _, b := srv.do(t, "GET", "/healthz", "", "", nil)
		if err := json.Unmarshal(b, &h); status != http.StatusOK || err != nil || !h.OK || h.Mode != client.ModeRedis {
			t.Fatalf("healthz: %d %s", status, b)
		}
	})

	t.Run("auth", func(t *testing.T) {
		for _, r := range apiRoutes {
			body := []byte(`{}`)
			if r.method == "GET" {
				body = nil
			}
			srv.problem(t, "no token "+r.method+" "+r.path, r.method, r.path, "", "application/json", body,
				http.StatusUnauthorized, "unauthorized")
			srv.problem(t, "wrong token "+r.method+" "+r.path, r.method, r.path, "nope", "application/json", body,
				http.StatusUnauthorized, "unauthorized")
		}
		// Near misses of the right token, and a scheme other than Bearer.
		for name, header := range map[string]string{
			"token with a suffix":  "Bearer " + biToken + "x",
			"token prefix":         "Bearer " + biToken[:1],
			"empty bearer":         "Bearer ",
			"basic scheme":         "Basic " + biToken,
			"token without bearer": biToken,
		} {
			req, err := http.NewRequest("GET", srv.Base+"/v1/mode", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", header)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			biWantProblem(t, name, resp.StatusCode, resp.Header, b, http.StatusUnauthorized, "unauthorized")
		}
	})

	t.Run("unknown route", func(t *testing.T) {
		srv.problem(t, "GET /v1/nope", "GET", "/v1/nope", biToken, "", nil, http.StatusNotFound, "route_not_found")
		srv.problem(t, "POST /v2/stock", "POST", "/v2/stock", biToken, "application/json", []byte(`{}`),
			http.StatusNotFound, "route_not_found")
		srv.problem(t, "GET /index.html", "GET", "/index.html", biToken, "", nil, http.StatusNotFound, "route_not_found")
	})

	t.Run("dashboard", func(t *testing.T) {
		files := map[string]string{"/": "text/html", "/dashboard.js": "text/javascript", "/dashboard.css": "text/css"}
		body := map[string]string{}
		for path, ctype := range files {
			status, h, b := srv.do(t, "GET", path, "", "", nil) // no token: the files hold no data
			if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), ctype) ||
				!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") {
				t.Fatalf("GET %s: %d %q CSP %q", path, status, h.Get("Content-Type"), h.Get("Content-Security-Policy"))
			}
			body[path] = string(b)
		}
		for _, ref := range []string{`src="/dashboard.js"`, `href="/dashboard.css"`} {
			if !strings.Contains(body["/"], ref) {
				t.Errorf("the page does not load %s", ref)
			}
		}
		// Data goes into the page as text only.
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(body["/dashboard.js"], sink) {
				t.Errorf("dashboard.js uses %s", sink)
			}
		}
		// Every endpoint the page reads exists and answers with the token; the action it
		// posts exists and checks what it is given.
		block := func(name string) [][]string {
			m := regexp.MustCompile(`(?s)const ` + name + ` = \{(.*?)\};`).FindStringSubmatch(body["/dashboard.js"])
			if m == nil {
				t.Fatalf("no %s in dashboard.js", name)
			}
			return regexp.MustCompile(`"(/v1/[a-z/-]+)"`).FindAllStringSubmatch(m[1], -1)
		}
		reads, actions := block("ENDPOINTS"), block("ACTIONS")
		if len(reads) < 9 || len(actions) != 6 {
			t.Fatalf("found %d endpoints and %d actions in dashboard.js", len(reads), len(actions))
		}
		for _, p := range reads {
			if status, _, b := srv.do(t, "GET", p[1], biToken, "", nil); status != http.StatusOK {
				t.Errorf("the dashboard reads %s: %d %s", p[1], status, b)
			}
		}
		for _, a := range actions { // each checks what it is given
			status, _, b := srv.do(t, "POST", a[1], biToken, "application/json", []byte(`{}`))
			if status != http.StatusBadRequest {
				t.Errorf("the dashboard's action %s answered {} with %d %s, want 400", a[1], status, b)
			}
		}
	})

	t.Run("mode", func(t *testing.T) {
		if m := must[client.ModeAnswer](t, "mode")(c.Mode(ctx)); m.Mode != client.ModeRedis {
			t.Fatalf("mode %q, want redis", m.Mode)
		}
	})

	t.Run("catalog", func(t *testing.T) {
		if c := catalogNow(t); c.Version != 0 || len(c.Items) != 0 || c.Store != biStoreID || c.V != wire.Version {
			t.Fatalf("catalog before any import: %+v", c)
		}
		var imp apiImport
		srv.mustRaw(t, "POST", "/v1/catalog", "text/csv", []byte("sku,name,price\nA1,Apple,3.50\nB2,Bread,12\n"), &imp)
		if imp.Version != 1 || imp.Items != 2 {
			t.Fatalf("CSV import: %+v, want version 1 with 2 items", imp)
		}
		want := []wire.CatalogItem{{SKU: "A1", Name: "Apple", Price: 350}, {SKU: "B2", Name: "Bread", Price: 1200}}
		if c := catalogNow(t); c.Version != 1 || !reflect.DeepEqual(c.Items, want) {
			t.Fatalf("catalog after CSV import: %+v", c)
		}

		srv.mustRaw(t, "POST", "/v1/catalog", "application/json",
			[]byte(`{"items":[{"sku":"A1","barcode":"690001","name":"Apple","price":"3.60"},`+
				`{"sku":"B2","name":"Bread","price":"12.00"},{"sku":"C3","name":"Cola","price":"2.75"}]}`), &imp)
		if imp.Version != 2 || imp.Items != 3 {
			t.Fatalf("JSON import: %+v, want version 2 with 3 items", imp)
		}
		srv.mustRaw(t, "POST", "/v1/catalog", "application/json",
			[]byte(`[{"sku":"A1","name":"Apple","price":"3.50"},{"sku":"C3","name":"Cola","price":"2.75"}]`), &imp)
		if imp.Version != 3 || imp.Items != 2 {
			t.Fatalf("JSON array import: %+v, want version 3 with 2 items", imp)
		}
		// Columns in any order, barcode optional, spaces trimmed.
		srv.mustRaw(t, "POST", "/v1/catalog", "text/csv",
			[]byte("price, barcode, sku, name\n3.50,690001,A1,Apple\n12.00,,B2,Bread\n2.75,690003,C3,Cola\n"), &imp)
		if imp.Version != 4 || imp.Items != 3 {
			t.Fatalf("reordered CSV import: %+v, want version 4 with 3 items", imp)
		}
		good := catalogNow(t)
		want = []wire.CatalogItem{
			{SKU: "A1", Barcode: "690001", Name: "Apple", Price: 350},
			{SKU: "B2", Name: "Bread", Price: 1200},
			{SKU: "C3", Barcode: "690003", Name: "Cola", Price: 275},
		}
		if good.Version != 4 || !reflect.DeepEqual(good.Items, want) {
			t.Fatalf("catalog after 4 imports: %+v", good)
		}

		bad := []struct {
			name, ctype, body, code string
		}{
			{"sub-fen price", "text/csv", "sku,name,price\nA1,Apple,1.001\n", money.CodeSubFen},
			{"missing price column", "text/csv", "sku,name\nA1,Apple\n", "catalog_csv"},
			{"missing sku column", "text/csv", "name,price\nApple,1.00\n", "catalog_csv"},
			{"empty CSV", "text/csv", "", "catalog_csv"},
			{"unbalanced quote", "text/csv", "sku,name,price\n\"A1,Apple,1.00\n", "catalog_csv"},
			{"negative price", "text/csv", "sku,name,price\nA1,Apple,-1.00\n", money.CodeNegative},
			{"price with exponent", "text/csv", "sku,name,price\nA1,Apple,1e2\n", money.CodeSyntax},
			{"empty price", "text/csv", "sku,name,price\nA1,Apple,\n", money.CodeEmpty},
			{"duplicate sku", "text/csv", "sku,name,price\nA1,Apple,1.00\nA1,Apple again,2.00\n", wire.CodePayload},
			{"empty sku", "text/csv", "sku,name,price\n,Apple,1.00\n", wire.CodePayload},
			{"JSON price as a number", "application/json", `{"items":[{"sku":"A1","name":"Apple","price":3.5}]}`, money.CodeSyntax},
			{"JSON sub-fen price", "application/json", `[{"sku":"A1","name":"Apple","price":"0.001"}]`, money.CodeSubFen},
			{"JSON unknown field", "application/json", `{"items":[{"sku":"A1","name":"Apple","price":"1.00","tax":"0.13"}]}`, "catalog_json"},
			{"JSON truncated", "application/json", `{"items":[{"sku":"A1"`, "catalog_json"},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				srv.problem(t, tc.name, "POST", "/v1/catalog", biToken, tc.ctype, []byte(tc.body), http.StatusBadRequest, tc.code)
				if c := catalogNow(t); !reflect.DeepEqual(c, good) {
					t.Fatalf("catalog changed by a refused import: %+v, want %+v", c, good)
				}
			})
		}
		t.Run("import without token", func(t *testing.T) {
			srv.problem(t, "import without token", "POST", "/v1/catalog", "", "text/csv",
				[]byte("sku,name,price\nZ9,Zed,1.00\n"), http.StatusUnauthorized, "unauthorized")
			if c := catalogNow(t); !reflect.DeepEqual(c, good) {
				t.Fatalf("catalog changed by an unauthorized import: %+v", c)
			}
		})
	})

	t.Run("stock adjust", func(t *testing.T) {
		// The catalog of the previous subtest: A1, B2, C3.
		if qty, applied := srv.adjust(t, "open-A1", "A1", 100, ledger.ReasonOpening); qty != 100 || !applied {
			t.Fatalf("opening A1: qty %d applied %v, want 100 true", qty, applied)
		}
		if qty, applied := srv.adjust(t, "open-A1", "A1", 100, ledger.ReasonOpening); qty != 100 || applied {
			t.Fatalf("opening A1 again: qty %d applied %v, want 100 false", qty, applied)
		}
		if qty, applied := srv.adjust(t, "open-B2", "B2", 50, ""); qty != 50 || !applied {
			t.Fatalf("B2 +50 (default reason): qty %d applied %v", qty, applied)
		}
		if qty, applied := srv.adjust(t, "shrink-1", "A1", -7, ledger.ReasonAdjust); qty != 93 || !applied {
			t.Fatalf("A1 -7: qty %d applied %v, want 93 true", qty, applied)
		}
		if qty, applied := srv.adjust(t, "open-C3", "C3", 5, ledger.ReasonOpening); qty != 5 || !applied {
			t.Fatalf("C3 +5: qty %d applied %v", qty, applied)
		}
		if qty, applied := srv.adjust(t, "found-C3", "C3", 3, ledger.ReasonAdjust); qty != 8 || !applied {
			t.Fatalf("C3 +3: qty %d applied %v", qty, applied)
		}
		// The default reason is "adjust": repeating id open-B2 with reason adjust is the same request.
		if qty, applied := srv.adjust(t, "open-B2", "B2", 50, ledger.ReasonAdjust); qty != 50 || applied {
			t.Fatalf("B2 +50 again with the explicit default reason: qty %d applied %v, want 50 false", qty, applied)
		}

		adjust := func(v any) []byte {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		refused := []struct {
			name   string
			body   []byte
			status int
			code   string
		}{
			{"same id other delta", adjust(client.AdjustRequest{ID: "open-A1", SKU: "A1", Delta: 101, Reason: "opening"}),
				http.StatusUnprocessableEntity, ledger.CodeAdjustmentConflict},
			{"same id other sku", adjust(client.AdjustRequest{ID: "open-A1", SKU: "B2", Delta: 100, Reason: "opening"}),
				http.StatusUnprocessableEntity, ledger.CodeAdjustmentConflict},
			{"same id other reason", adjust(client.AdjustRequest{ID: "open-A1", SKU: "A1", Delta: 100, Reason: "adjust"}),
				http.StatusUnprocessableEntity, ledger.CodeAdjustmentConflict},
			{"unknown sku", adjust(client.AdjustRequest{ID: "x-1", SKU: "ZZ", Delta: 1}), http.StatusNotFound, ingest.CodeUnknownSKU},
			{"zero delta", adjust(client.AdjustRequest{ID: "x-2", SKU: "A1", Delta: 0}), http.StatusBadRequest, "delta_zero"},
			{"missing id", adjust(client.AdjustRequest{SKU: "A1", Delta: 1}), http.StatusBadRequest, "adjustment_id_required"},
			{"id too long", adjust(client.AdjustRequest{ID: strings.Repeat("i", 129), SKU: "A1", Delta: 1}),
				http.StatusBadRequest, "adjustment_id_required"},
			{"bad reason", adjust(client.AdjustRequest{ID: "x-3", SKU: "A1", Delta: 1, Reason: "theft"}),
				http.StatusBadRequest, "reason_invalid"},
			{"delta beyond the bound", adjust(client.AdjustRequest{ID: "x-4", SKU: "A1", Delta: ledger.MaxAdjust + 1}),
				http.StatusBadRequest, ledger.CodeAdjustmentInvalid},
			{"unknown field", []byte(`{"id":"x-5","sku":"A1","delta":1,"note":"hi"}`), http.StatusBadRequest, "json_invalid"},
			{"delta as a string", []byte(`{"id":"x-6","sku":"A1","delta":"1"}`), http.StatusBadRequest, "json_invalid"},
			{"not JSON", []byte(`sku=A1&delta=1`), http.StatusBadRequest, "json_invalid"},
		}
		for _, tc := range refused {
			srv.problem(t, tc.name, "POST", "/v1/stock/adjust", biToken, "application/json", tc.body, tc.status, tc.code)
		}
		srv.problem(t, "adjust without token", "POST", "/v1/stock/adjust", "", "application/json",
			adjust(client.AdjustRequest{ID: "x-7", SKU: "A1", Delta: 1000}), http.StatusUnauthorized, "unauthorized")

		rows := srv.stock(t)
		want := map[string]int64{"A1": 93, "B2": 50, "C3": 8}
		if len(rows) != len(want) {
			t.Errorf("/v1/stock has %d rows, want %d: %+v", len(rows), len(want), rows)
		}
		for sku, q := range want {
			if r, ok := rows[sku]; !ok || r.Ledger != q {
				t.Errorf("/v1/stock %s: %+v, want ledger %d", sku, r, q)
			}
		}
		// The refused adjustments changed nothing, also not in Redis.
		if qty, applied := srv.adjust(t, "open-A1", "A1", 100, ledger.ReasonOpening); qty != 93 || applied {
			t.Fatalf("opening A1 after the refusals: qty %d applied %v, want 93 false", qty, applied)
		}
	})

	t.Run("stock count", func(t *testing.T) {
		// The stock of the previous subtest: A1 93, B2 50, C3 8.
		for _, c := range []struct {
			id, sku        string
			counted, delta int64
			applied        bool
		}{
			{"count-C3-1", "C3", 6, -2, true},
			{"count-C3-1", "C3", 6, -2, false}, // a retry
			{"count-C3-2", "C3", 8, 2, true},
			{"count-A1-1", "A1", 93, 0, true}, // the ledger agrees: recorded, nothing moves
			{"count-A1-1", "A1", 93, 0, false},
		} {
			if delta, qty, applied := srv.count(t, c.id, c.sku, c.counted); delta != c.delta || qty != c.counted || applied != c.applied {
				t.Fatalf("count %s of %d %s: delta %d qty %d applied %v, want %+d %d %v",
					c.id, c.counted, c.sku, delta, qty, applied, c.delta, c.counted, c.applied)
			}
		}
		for _, tc := range []struct {
			name   string
			body   string
			status int
			code   string
		}{
			{"same id other count", `{"id":"count-C3-1","sku":"C3","counted":7}`, http.StatusUnprocessableEntity, ledger.CodeAdjustmentConflict},
			{"same id other sku", `{"id":"count-C3-1","sku":"B2","counted":6}`, http.StatusUnprocessableEntity, ledger.CodeAdjustmentConflict},
			{"an adjustment's id", `{"id":"open-A1","sku":"A1","counted":93}`, http.StatusUnprocessableEntity, ledger.CodeAdjustmentConflict},
			{"unknown sku", `{"id":"y-1","sku":"ZZ","counted":1}`, http.StatusNotFound, ingest.CodeUnknownSKU},
			{"missing id", `{"sku":"A1","counted":1}`, http.StatusBadRequest, "adjustment_id_required"},
			{"id too long", `{"id":"` + strings.Repeat("i", 129) + `","sku":"A1","counted":1}`, http.StatusBadRequest, "adjustment_id_required"},
			{"missing count", `{"id":"y-2","sku":"A1"}`, http.StatusBadRequest, ledger.CodeAdjustmentInvalid},
			{"negative count", `{"id":"y-3","sku":"A1","counted":-1}`, http.StatusBadRequest, ledger.CodeAdjustmentInvalid},
			{"count beyond the bound", fmt.Sprintf(`{"id":"y-4","sku":"A1","counted":%d}`, ledger.MaxAdjust+1),
				http.StatusBadRequest, ledger.CodeAdjustmentInvalid},
			{"a delta instead", `{"id":"y-5","sku":"A1","delta":1}`, http.StatusBadRequest, "json_invalid"},
			{"count as a string", `{"id":"y-6","sku":"A1","counted":"1"}`, http.StatusBadRequest, "json_invalid"},
			{"count with a fraction", `{"id":"y-7","sku":"A1","counted":1.5}`, http.StatusBadRequest, "json_invalid"},
		} {
			srv.problem(t, tc.name, "POST", "/v1/stock/count", biToken, "application/json", []byte(tc.body), tc.status, tc.code)
		}
		srv.problem(t, "count without token", "POST", "/v1/stock/count", "", "application/json",
			[]byte(`{"id":"y-8","sku":"A1","counted":0}`), http.StatusUnauthorized, "unauthorized")

		rows := srv.stock(t) // and Redis, the ledger and its proof agree
		for sku, q := range map[string]int64{"A1": 93, "B2": 50, "C3": 8} {
			if rows[sku].Ledger != q {
				t.Errorf("%s: ledger %d, want %d", sku, rows[sku].Ledger, q)
			}
		}
	})

	t.Run("limits", func(t *testing.T) {
		l := must[client.LimitsAnswer](t, "limits")(c.Limits(ctx))
		if store.Limits(l.Limits) != store.DefaultLimits || l.PromoPercent != 100 || l.PromoExpiresInMs != 0 {
			t.Fatalf("limits of a new store: %+v, want the defaults without promo", l)
		}
		set := client.Limits{WindowMs: 2000, Store: 500, Terminal: 50, Scan: 10, Pay: 4, Refund: 2}
		if l = must[client.LimitsAnswer](t, "set limits")(c.SetLimits(ctx, set)); l.Limits != set || l.PromoPercent != 100 {
			t.Fatalf("PUT /v1/limits answered %+v, want %+v", l, set)
		}
		if l = must[client.LimitsAnswer](t, "limits")(c.Limits(ctx)); l.Limits != set {
			t.Fatalf("GET /v1/limits after PUT: %+v, want %+v", l.Limits, set)
		}
		invalid := []struct {
			name string
			body string
			code string
		}{
			{"zero pay", `{"window_ms":1000,"store":10,"terminal":10,"scan":10,"pay":0,"refund":1}`, "limits_invalid"},
			{"negative store", `{"window_ms":1000,"store":-1,"terminal":10,"scan":10,"pay":1,"refund":1}`, "limits_invalid"},
			{"missing window", `{"store":10,"terminal":10,"scan":10,"pay":1,"refund":1}`, "limits_invalid"},
			{"empty object", `{}`, "limits_invalid"},
			// Above the gate's bound (gate.MaxLimit, gate.MaxWindowMs): invalid input, not Redis trouble.
			{"store limit above the bound", `{"window_ms":1000,"store":2000000000,"terminal":10,"scan":10,"pay":1,"refund":1}`, "limits_invalid"},
			{"window above a day", `{"window_ms":86400001,"store":10,"terminal":10,"scan":10,"pay":1,"refund":1}`, "limits_invalid"},
			{"unknown field", `{"window_ms":1000,"store":10,"terminal":10,"scan":10,"pay":1,"refund":1,"burst":5}`, "json_invalid"},
			{"limit as a string", `{"window_ms":"1000","store":10,"terminal":10,"scan":10,"pay":1,"refund":1}`, "json_invalid"},
		}
		for _, tc := range invalid {
			srv.problem(t, tc.name, "PUT", "/v1/limits", biToken, "application/json", []byte(tc.body), http.StatusBadRequest, tc.code)
		}
		if l = must[client.LimitsAnswer](t, "limits")(c.Limits(ctx)); l.Limits != set {
			t.Fatalf("limits changed by refused PUTs: %+v, want %+v", l.Limits, set)
		}
	})

	t.Run("promo", func(t *testing.T) {
		invalid := []struct {
			name string
			body string
			code string
		}{
			{"percent below 100", `{"percent":50,"for":"1h"}`, "promo_percent_invalid"},
			{"percent above 1000", `{"percent":1001,"for":"1h"}`, "promo_percent_invalid"},
			{"percent missing", `{"for":"1h"}`, "promo_percent_invalid"},
			{"duration not a duration", `{"percent":200,"for":"soon"}`, "promo_duration_invalid"},
			{"negative duration", `{"percent":200,"for":"-1s"}`, "promo_duration_invalid"},
			{"duration above a week", `{"percent":200,"for":"169h"}`, "promo_duration_invalid"},
			{"unknown field", `{"percent":200,"for":"1h","until":"tomorrow"}`, "json_invalid"},
		}
		for _, tc := range invalid {
			srv.problem(t, tc.name, "POST", "/v1/promo", biToken, "application/json", []byte(tc.body), http.StatusBadRequest, tc.code)
		}
		l := must[client.LimitsAnswer](t, "limits")(c.Limits(ctx))
		if l.PromoPercent != 100 {
			t.Fatalf("refused promos started one: %+v", l)
		}

		start := time.Now()
		l = must[client.LimitsAnswer](t, "promo")(c.SetPromo(ctx, client.PromoRequest{Percent: 200, For: "1s"}))
		if l.PromoPercent != 200 || l.PromoExpiresInMs <= 0 || l.PromoExpiresInMs > 1000 {
			t.Fatalf("promo 200%% for 1s answered %+v", l)
		}
		l = must[client.LimitsAnswer](t, "limits")(c.Limits(ctx))
		if time.Since(start) < 700*time.Millisecond && l.PromoPercent != 200 {
			t.Fatalf("promo gone right after it was set: %+v", l)
		}
		for l.PromoPercent != 100 {
			if time.Since(start) > 4*time.Second {
				t.Fatalf("promo still %d%% %v after it was set for 1s", l.PromoPercent, time.Since(start))
			}
			time.Sleep(50 * time.Millisecond)
			l = must[client.LimitsAnswer](t, "limits")(c.Limits(ctx))
		}
		if el := time.Since(start); el < 900*time.Millisecond {
			t.Fatalf("promo for 1s ended after %v", el)
		}
		if l.PromoExpiresInMs != 0 {
			t.Fatalf("promo over but expires in %dms", l.PromoExpiresInMs)
		}
	})

	t.Run("totals", func(t *testing.T) {
		for _, d := range []string{"2026-13-01", "2026-02-30", "2026-3-1", "yesterday", "20260301", "2026-03-01T00:00:00Z"} {
			srv.problem(t, "date "+d, "GET", "/v1/totals?date="+d, biToken, "", nil, http.StatusBadRequest, "business_date_invalid")
		}
		out := must[client.TotalsAnswer](t, "totals")(c.Totals(ctx, "2026-03-01"))
		if out.BusinessDate != "2026-03-01" || out.Mode != client.ModeRedis || out.Terminals == nil || len(out.Terminals) != 0 {
			t.Fatalf("totals of a quiet day: %+v", out)
		}
		loc, err := time.LoadLocation(biTZ)
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now().In(loc).Format(wire.BusinessDate)
		out = must[client.TotalsAnswer](t, "totals of today")(c.Totals(ctx, ""))
		after := time.Now().In(loc).Format(wire.BusinessDate)
		if out.BusinessDate != before && out.BusinessDate != after {
			t.Fatalf("totals without a date are of %s, want today in %s (%s)", out.BusinessDate, biTZ, before)
		}
	})

	t.Run("lists are arrays", func(t *testing.T) {
		for _, tc := range []struct{ path, field string }{
			{"/v1/oversells", "oversells"},
			{"/v1/oversells?date=2026-03-01", "oversells"},
			{"/v1/refund-exceptions", "refund_exceptions"},
			{"/v1/refund-exceptions?date=2026-03-01&all=1", "refund_exceptions"},
			{"/v1/parked", "parked"},
		} {
			var out map[string]json.RawMessage
			srv.mustJSON(t, "GET", tc.path, nil, &out)
			var list []json.RawMessage
			if raw := out[tc.field]; len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
				t.Errorf("%s: field %q is %s, want a JSON array", tc.path, tc.field, raw)
			}
		}
	})

	t.Run("stock and catalog after everything", func(t *testing.T) {
		rows := srv.stock(t)
		for sku, q := range map[string]int64{"A1": 93, "B2": 50, "C3": 8} {
			if rows[sku].Ledger != q {
				t.Errorf("%s: ledger %d, want %d", sku, rows[sku].Ledger, q)
			}
		}
		// proof=0 (the dashboard's poll) leaves out the proof from the whole history.
		quick := must[client.StockAnswer](t, "stock without proof")(c.Stock(ctx, false))
		if len(quick.Stock) != len(rows) {
			t.Errorf("proof=0: %d rows, want %d", len(quick.Stock), len(rows))
		}
		for _, r := range quick.Stock {
			if r.Proven != nil || r.Ledger != rows[r.SKU].Ledger || r.Redis == nil || *r.Redis != r.Ledger {
				t.Errorf("proof=0 %s: %+v", r.SKU, r)
			}
		}
		srv.problem(t, "proof=yes", "GET", "/v1/stock?proof=yes", biToken, "", nil, http.StatusBadRequest, "proof_invalid")
		if c := catalogNow(t); c.Version != 4 {
			t.Errorf("catalog version %d, want 4", c.Version)
		}
	})
}
