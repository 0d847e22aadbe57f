package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/guard"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

var secrets = map[string][]byte{
	"S1": []byte("secret-of-store-S1"),
	"S2": []byte("secret-of-store-S2"),
}

// env is HQ's handler on a real SQLite database behind an httptest server, with a clock
// the test sets.
type env struct {
	t     *testing.T
	store *sqlite.Store
	srv   *httptest.Server
	now   time.Time
}

func newEnv(t *testing.T, opts serve.Options) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hq.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, store: st, now: time.Date(2025, 3, 2, 1, 0, 0, 0, time.UTC)}
	opts.Now = func() time.Time { return e.now }
	opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	if opts.Guard == nil { // tables of refusals from one address: no waits between them
		opts.Guard = guard.New(guard.Config{Free: 1 << 20})
	}
	e.srv = httptest.NewServer(serve.New(st, secrets, opts))
	t.Cleanup(e.srv.Close)
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// request is an upload: its body and the values that go into its headers and signature.
type request struct {
	body       []byte
	bodyReader io.Reader // instead of body, sent chunked (no Content-Length)
	store      string    // X-Posgate-Store
	key        string    // Idempotency-Key
	ts         string    // X-Posgate-Timestamp; "" means the env's clock
	secret     []byte    // signing secret; nil means the store's
	path       string    // path signed; "" means serve.BatchesPath
	sig        string    // X-Posgate-Signature instead of the computed one
	noSig      bool      // send no signature
	hash       string    // X-Posgate-Content-SHA256 instead of the body's, and signed as such
	noHash     bool      // send no content hash
}

// upload returns a request for batch b signed by its store, with its id as key.
func upload(b *hqwire.Batch) request {
	body, err := json.Marshal(b)
	if err != nil {
		panic(err)
	}
	return request{body: body, store: b.Store, key: b.ID}
}

func (e *env) send(r request) (*http.Response, []byte) {
	e.t.Helper()
	if r.ts == "" {
		r.ts = strconv.FormatInt(e.now.Unix(), 10)
	}
	if r.secret == nil {
		r.secret = secrets[r.store]
	}
	if r.path == "" {
		r.path = serve.BatchesPath
	}
	var body io.Reader = bytes.NewReader(r.body)
	if r.bodyReader != nil {
		body = r.bodyReader
	}
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+serve.BatchesPath, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hqwire.HeaderStore, r.store)
	req.Header.Set(hqwire.HeaderTimestamp, r.ts)
	req.Header.Set(hqwire.HeaderIdemKey, r.key)
	hash := r.hash
	if hash == "" {
		hash = hqwire.ContentHash(r.body)
	}
	if !r.noHash {
		req.Header.Set(hqwire.HeaderContentHash, hash)
	}
	if !r.noSig {
		sig := r.sig
		if sig == "" {
			sig = hqwire.SignHash(r.secret, http.MethodPost, r.path, r.store, r.ts, r.key, hash)
		}
		req.Header.Set(hqwire.HeaderSignature, sig)
	}
	return e.do(req)
}

func (e *env) do(req *http.Request) (*http.Response, []byte) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, out
}

func (e *env) mustStore(r request) hqwire.Receipt {
	e.t.Helper()
	resp, body := e.send(r)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("status %d, want 200: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("Content-Type %q", ct)
	}
	var rc hqwire.Receipt
	if err := json.Unmarshal(body, &rc); err != nil {
		e.t.Fatalf("receipt %s: %v", body, err)
	}
	if !hqwire.VerifyReceipt(secrets[r.store], resp.Header.Get(hqwire.HeaderSignature), r.store, rc.BatchID, body) {
		e.t.Fatalf("receipt %s not signed with store %s's secret (%q)", body, r.store, resp.Header.Get(hqwire.HeaderSignature))
	}
	return rc
}

// mustProblem checks an error answer: status, problem+json with the stable code.
func mustProblem(t *testing.T, resp *http.Response, body []byte, status int, code string) serve.Problem {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p serve.Problem
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem %s: %v", body, err)
	}
	if p.Code != code || p.Status != status || p.Type != serve.ProblemTypePrefix+code || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want code %s status %d", p, code, status)
	}
	return p
}

// sales returns n sales of terminal T1 of store from seq first on, dated D1.
func sales(store string, first int64, n int) []hqwire.Row {
	return storetest.Sales(store, "T1", first, n, storetest.D1, storetest.T0)
}

func batch(store, id string, rows []hqwire.Row, days ...hqwire.StoreDay) *hqwire.Batch {
	return &hqwire.Batch{V: hqwire.Version, Store: store, ID: id, Rows: rows, Days: days,
		SentAt: time.Date(2025, 3, 2, 0, 59, 0, 0, time.UTC)}
}

// TestBatches stores a good batch and its replay, refuses each bad request with its
// stable code while the database stays as it was, and still stores the next good batch.
func TestBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, serve.Options{})

	first := sales("S1", 1, 10)
	first = append(first, storetest.Refund("S1", "T1", 11, storetest.D1, storetest.T0.Add(time.Hour), 2, first[1].Amount, wire.MethodCard))
	first = append(first, storetest.DayClose("S1", "T1", 12, storetest.D1, storetest.T0.Add(2*time.Hour), first))
	good := batch("S1", "b-1", first, storetest.Day(storetest.D1, 1, storetest.T0.Add(3*time.Hour), first))
	rc := e.mustStore(upload(good))
	if rc.Store != "S1" || rc.BatchID != "b-1" || rc.Rows != 12 || rc.New != 12 || rc.Days != 1 || rc.Duplicate ||
		!rc.StoredAt.Equal(e.now) {
		t.Fatalf("receipt %+v", rc)
	}
	storetest.CheckRows(t, rowsOf(t, e, storetest.D1, "S1"), storedAll("S1", first, e.now))

	// The replay, later, is answered with the original receipt.
	e.now = e.now.Add(time.Minute)
	again := e.mustStore(upload(good))
	if !again.Duplicate || again.New != rc.New || again.Rows != rc.Rows || !again.StoredAt.Equal(rc.StoredAt) {
		t.Fatalf("replay receipt %+v, want a duplicate of %+v", again, rc)
	}

	next := func(id string, mod func(b *hqwire.Batch)) request { // a new good batch, modified
		b := batch("S1", id, sales("S1", 100, 3))
		if mod != nil {
			mod(b)
		}
		return upload(b)
	}
	raw := func(body string) request { // a raw body, correctly signed by S1
		return request{body: []byte(body), store: "S1", key: "b-raw"}
	}
	goodJSON := string(upload(batch("S1", "b-raw", sales("S1", 100, 2))).body)

	cases := []struct {
		name   string
		req    func() request
		status int
		code   string
		detail string // a part the detail must contain
	}{
		{"malformed JSON", func() request { return raw(`{"v":1,"store":"S1",`) }, 400, hqwire.CodeJSONInvalid, ""},
		{"not an object", func() request { return raw(`[1,2]`) }, 400, hqwire.CodeJSONInvalid, ""},
		{"empty body", func() request { return raw(``) }, 400, hqwire.CodeJSONInvalid, ""},
		{"unknown field", func() request {
			return raw(strings.Replace(goodJSON, `"v":1`, `"v":1,"extra":true`, 1))
		}, 400, hqwire.CodeJSONInvalid, "extra"},
		{"unknown field in a row", func() request {
			return raw(strings.Replace(goodJSON, `"kind":"sale"`, `"kind":"sale","discount":"1.00"`, 1))
		}, 400, hqwire.CodeJSONInvalid, "discount"},
		{"trailing data", func() request { return raw(goodJSON + `{}`) }, 400, hqwire.CodeJSONInvalid, "trailing"},
		{"amount as a JSON number", func() request {
			return raw(strings.Replace(goodJSON, `"amount":"`, `"amount":1`+`,"x":"`, 1))
		}, 400, hqwire.CodeJSONInvalid, ""},
		{"sub-fen amount", func() request {
			b := batch("S1", "b-raw", sales("S1", 100, 1))
			body := string(upload(b).body)
			a := b.Rows[0].Amount.String()
			return raw(strings.Replace(body, `"amount":"`+a+`"`, `"amount":"`+a+`1"`, 1))
		}, 400, hqwire.CodeJSONInvalid, "decimal places"},
		{"oversize", func() request {
			return raw(`{"v":1,"pad":"` + strings.Repeat("x", hqwire.MaxBatchBytes) + `"}`)
		}, 413, hqwire.CodeBodyTooLarge, ""},
		{"oversize without Content-Length", func() request {
			r := raw(`{"v":1,"pad":"` + strings.Repeat("x", hqwire.MaxBatchBytes) + `"}`)
			r.bodyReader = struct{ io.Reader }{bytes.NewReader(r.body)} // hides the length
			return r
		}, 413, hqwire.CodeBodyTooLarge, ""},
		{"no signature", func() request { r := next("b-2", nil); r.noSig = true; return r }, 401, hqwire.CodeUnauthorized, ""},
		{"no timestamp", func() request { r := next("b-2", nil); r.ts = " "; return r }, 401, hqwire.CodeUnauthorized, ""},
		{"no store header", func() request { r := next("b-2", nil); r.store = ""; r.secret = secrets["S1"]; return r }, 401, hqwire.CodeUnauthorized, ""},
		{"no content hash", func() request { r := next("b-2", nil); r.noHash = true; return r }, 401, hqwire.CodeUnauthorized, ""},
		{"wrong signature", func() request { r := next("b-2", nil); r.sig = strings.Repeat("0", 64); return r }, 401, hqwire.CodeUnauthorized, ""},
		{"signature with another store's secret", func() request {
			r := next("b-2", nil)
			r.secret = secrets["S2"]
			return r
		}, 401, hqwire.CodeUnauthorized, ""},
		{"signature of another path", func() request { r := next("b-2", nil); r.path = "/v1/other"; return r }, 401, hqwire.CodeUnauthorized, ""},
		{"signature of other content", func() request {
			r := next("b-2", nil)
			r.sig = hqwire.Sign(secrets["S1"], http.MethodPost, serve.BatchesPath, "S1", strconv.FormatInt(e.now.Unix(), 10), "b-2", []byte(`{}`))
			return r
		}, 401, hqwire.CodeUnauthorized, ""},
		{"body not the one signed", func() request {
			r := next("b-2", nil)
			r.hash = hqwire.ContentHash([]byte(`{}`)) // signed with this hash, sent with another body
			return r
		}, 400, hqwire.CodeContentHashMismatch, ""},
		{"unknown store", func() request {
			r := upload(batch("S9", "b-2", sales("S9", 1, 2)))
			r.secret = []byte("a guess")
			return r
		}, 401, hqwire.CodeUnauthorized, ""},
		{"store header is not the body's store", func() request {
			r := next("b-2", nil) // body of S1, signed by S2 as S2
			r.store = "S2"
			return r
		}, 403, hqwire.CodeStoreMismatch, "S1"},
		{"stale timestamp", func() request {
			r := next("b-2", nil)
			r.ts = strconv.FormatInt(e.now.Add(-hqwire.MaxClockSkew-time.Minute).Unix(), 10)
			return r
		}, 401, hqwire.CodeTimestampSkew, ""},
		{"timestamp in the future", func() request {
			r := next("b-2", nil)
			r.ts = strconv.FormatInt(e.now.Add(hqwire.MaxClockSkew+time.Minute).Unix(), 10)
			return r
		}, 401, hqwire.CodeTimestampSkew, ""},
		{"timestamp not a number", func() request { r := next("b-2", nil); r.ts = "yesterday"; return r }, 401, hqwire.CodeUnauthorized, ""},
		{"key is not the batch id", func() request { r := next("b-2", nil); r.key = "b-3"; return r }, 400, hqwire.CodeIdempotencyKeyMismatch, "b-3"},
		{"no key", func() request { r := next("b-2", nil); r.key = ""; return r }, 400, hqwire.CodeIdempotencyKeyMismatch, ""},
		{"wrong version", func() request { return next("b-2", func(b *hqwire.Batch) { b.V = 2 }) }, 400, hqwire.CodeBatchInvalid, "version 2"},
		{"bad batch id", func() request { return next("b/2", nil) }, 400, hqwire.CodeBatchInvalid, "batch_id"},
		{"too many rows", func() request {
			return next("b-2", func(b *hqwire.Batch) { b.Rows = sales("S1", 100, hqwire.MaxBatchRows+1) })
		}, 400, hqwire.CodeBatchInvalid, "limit"},
		{"row hash not its content's", func() request {
			return next("b-2", func(b *hqwire.Batch) { b.Rows[1].Hash = b.Rows[0].Hash })
		}, 400, hqwire.CodeBatchInvalid, "not the hash of the row's content"},
		{"amount not the payload's", func() request {
			// the row HQ holds of S1 (first[0]) under a new batch id: its hash, its payload, and
			// an amount a fen higher
			return next("b-2", func(b *hqwire.Batch) {
				r := first[0]
				r.Amount++
				r.ByMethod = map[string]money.Fen{}
				for m, v := range first[0].ByMethod {
					r.ByMethod[m] = v
				}
				for m := range r.ByMethod {
					r.ByMethod[m]++
					break
				}
				b.Rows = []hqwire.Row{r}
			})
		}, 400, hqwire.CodeBatchInvalid, "is not the payload's"},
		{"bad row kind", func() request { return next("b-2", func(b *hqwire.Batch) { b.Rows[1].Kind = "scan" }) }, 400, hqwire.CodeBatchInvalid, "rows[1]"},
		{"bad terminal id", func() request { return next("b-2", func(b *hqwire.Batch) { b.Rows[2].Terminal = "T 1" }) }, 400, hqwire.CodeBatchInvalid, "rows[2]"},
		{"seq 0", func() request { return next("b-2", func(b *hqwire.Batch) { b.Rows[0].Seq = 0 }) }, 400, hqwire.CodeBatchInvalid, "rows[0]"},
		{"by_method does not add up", func() request {
			return next("b-2", func(b *hqwire.Batch) { b.Rows[1].ByMethod = map[string]money.Fen{"cash": b.Rows[1].Amount + 1} })
		}, 400, hqwire.CodeBatchInvalid, "rows[1]"},
		{"unknown method", func() request {
			return next("b-2", func(b *hqwire.Batch) { b.Rows[1].ByMethod = map[string]money.Fen{"voucher": b.Rows[1].Amount} })
		}, 400, hqwire.CodeBatchInvalid, "voucher"},
		{"negative amount", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				b.Rows[2].Amount = -500
				b.Rows[2].ByMethod = map[string]money.Fen{"cash": -500}
			})
		}, 400, hqwire.CodeBatchInvalid, "rows[2]"},
		{"amount above the limit", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				b.Rows[2].Amount = wire.MaxAmount + 1
				b.Rows[2].ByMethod = map[string]money.Fen{"cash": wire.MaxAmount + 1}
			})
		}, 400, hqwire.CodeBatchInvalid, "above"},
		{"bad business date", func() request { return next("b-2", func(b *hqwire.Batch) { b.Rows[0].BusinessDate = "2025-02-30" }) }, 400, hqwire.CodeBatchInvalid, "rows[0]"},
		{"no hash", func() request { return next("b-2", func(b *hqwire.Batch) { b.Rows[0].Hash = "" }) }, 400, hqwire.CodeBatchInvalid, "hash"},
		{"duplicate row in batch", func() request {
			return next("b-2", func(b *hqwire.Batch) { b.Rows = append(b.Rows, b.Rows[0]) })
		}, 400, hqwire.CodeBatchInvalid, "rows[3]"},
		{"day close with a bad payload", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				dc := storetest.DayClose("S1", "T1", 200, storetest.D1, storetest.T0, b.Rows)
				dc.Payload = json.RawMessage(`{"business_date":"2025-03-01","sale_count":-1,"sale_amount":"0.00","refund_count":0,"refund_amount":"0.00","methods":[]}`)
				b.Rows = append(b.Rows, dc)
			})
		}, 400, hqwire.CodeBatchInvalid, "rows[3]"},
		{"day close of another date", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				dc := storetest.DayClose("S1", "T1", 200, storetest.D2, storetest.T0, b.Rows)
				dc.BusinessDate = storetest.D1
				b.Rows = append(b.Rows, dc)
			})
		}, 400, hqwire.CodeBatchInvalid, "rows[3]"},
		{"day without revision", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				b.Days = []hqwire.StoreDay{storetest.Day(storetest.D1, 0, storetest.T0, b.Rows)}
			})
		}, 400, hqwire.CodeBatchInvalid, "days[0]"},
		{"day part above its parts", func() request { return next("b-2", dayPart(3, 2)) }, 400, hqwire.CodeBatchInvalid,
			`days[0] (business_date "2025-03-01"): part 3 of 2 parts`},
		{"day part 0 of parts", func() request { return next("b-2", dayPart(0, 2)) }, 400, hqwire.CodeBatchInvalid,
			`days[0] (business_date "2025-03-01"): part 0 of 2 parts`},
		{"day part without parts", func() request { return next("b-2", dayPart(1, 0)) }, 400, hqwire.CodeBatchInvalid,
			`days[0] (business_date "2025-03-01"): part 1 of 0 parts`},
		{"day part of a negative number", func() request { return next("b-2", dayPart(-1, -1)) }, 400, hqwire.CodeBatchInvalid,
			`days[0] (business_date "2025-03-01"): part -1 of -1 parts`},
		{"day in too many parts", func() request { return next("b-2", dayPart(1, hqwire.MaxDayParts+1)) }, 400, hqwire.CodeBatchInvalid,
			`days[0] (business_date "2025-03-01"): part 1 of 1001 parts`},
		{"day part with a split id that is not an id", func() request {
			return next("b-2", func(b *hqwire.Batch) { dayPart(1, 2)(b); b.Days[0].Split = "a b" })
		}, 400, hqwire.CodeBatchInvalid, `days[0] (business_date "2025-03-01"): part 1 of 2 parts has a split id that is not`},
		{"second day with a bad part", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				good := storetest.Day(storetest.D1, 2, storetest.T0, b.Rows)
				good.Part, good.Parts, good.Split = 2, 2, "s1"
				bad := storetest.Day(storetest.D2, 1, storetest.T0, nil)
				bad.Parts, bad.Split = 2, "s2"
				b.Days = []hqwire.StoreDay{good, bad}
			})
		}, 400, hqwire.CodeBatchInvalid, `days[1] (business_date "2025-03-02"): part 0 of 2 parts`},
		{"day transaction that does not add up", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				d := storetest.Day(storetest.D1, 2, storetest.T0, b.Rows)
				d.Txns[1].Amount++
				b.Days = []hqwire.StoreDay{d}
			})
		}, 400, hqwire.CodeBatchInvalid, "txns[1]"},
		{"day declared twice", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				d := storetest.Day(storetest.D1, 2, storetest.T0, b.Rows)
				b.Days = []hqwire.StoreDay{d, d}
			})
		}, 400, hqwire.CodeBatchInvalid, "days[1]"},
		{"too many exceptions", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				for i := range hqwire.MaxBatchExceptions + 1 {
					b.Exceptions = append(b.Exceptions, storetest.Oversell("T1", int64(i+1), "SKU-0001", storetest.D1,
						storetest.T0, 1, 1))
				}
			})
		}, 400, hqwire.CodeBatchInvalid, "5001 exceptions are over the 5000"},
		{"exception of an unknown kind", func() request {
			return next("b-2", exceptions(1, func(x *hqwire.Exception) { x.Kind = "shrink" }))
		}, 400, hqwire.CodeBatchInvalid, `exceptions[1] (kind "shrink"`},
		{"exception listed twice", func() request {
			return next("b-2", func(b *hqwire.Batch) {
				exceptions(0, func(*hqwire.Exception) {})(b)
				b.Exceptions = append(b.Exceptions, storetest.Resolved(b.Exceptions[0], storetest.T0, "counted", 9))
			})
		}, 400, hqwire.CodeBatchInvalid, "exceptions[2]"},
		{"open oversell without qty_short", func() request {
			return next("b-2", exceptions(0, func(x *hqwire.Exception) { x.QtyShort = 0 }))
		}, 400, hqwire.CodeBatchInvalid, "exceptions[0]"},
		{"batch id replayed with other content", func() request {
			return upload(batch("S1", "b-1", sales("S1", 100, 3)))
		}, 422, hqwire.CodeBatchIDReused, "b-1"},
		{"row resent with other content", func() request {
			changed := storetest.Sale("S1", "T1", 3, storetest.D1, storetest.T0, 12345, wire.MethodQR)
			return next("b-2", func(b *hqwire.Batch) { b.Rows = append(b.Rows, changed) })
		}, 409, hqwire.CodeRowConflict, "S1/T1/3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			before := storetest.Take(t, e.store, storetest.D1, storetest.D2)
			resp, body := e.send(c.req())
			p := mustProblem(t, resp, body, c.status, c.code)
			if !strings.Contains(p.Detail, c.detail) {
				t.Errorf("detail %q does not mention %q", p.Detail, c.detail)
			}
			before.MustEqual(t, storetest.Take(t, e.store, storetest.D1, storetest.D2), "after "+c.name)
		})
	}
	e.t = t

	// The next good batch, which resends rows 9-10, is stored.
	rows := append(sales("S1", 9, 2), sales("S1", 13, 5)...)
	rc2 := e.mustStore(upload(batch("S1", "b-2", rows)))
	if rc2.Duplicate || rc2.Rows != 7 || rc2.New != 5 {
		t.Fatalf("next batch: %+v, want 5 new of 7", rc2)
	}
	if n := len(rowsOf(t, e, storetest.D1, "S1")); n != 17 {
		t.Fatalf("%d rows stored, want 17", n)
	}

	// A day in two parts: the first is kept aside, the second makes revision 2 stand, and a
	// part that does not follow is dropped.
	all := slices.Concat(first, sales("S1", 13, 5), sales("S1", 100, 3))
	parts := storetest.Parts(storetest.Day(storetest.D1, 2, storetest.T0.Add(4*time.Hour), all), 2)
	if rc := e.mustStore(upload(batch("S1", "b-3", nil, parts[0]))); rc.Days != 0 || rc.DayParts != 1 {
		t.Fatalf("part 1 of 2: %+v", rc)
	}
	stray := storetest.Parts(storetest.Day(storetest.D2, 1, storetest.T0, nil), 2)[1]
	rc3 := e.mustStore(upload(batch("S1", "b-4", nil, parts[1], stray)))
	if rc3.Days != 1 || rc3.DayParts != 0 || len(rc3.PartsDropped) != 1 || rc3.PartsDropped[storetest.D2] != 1 {
		t.Fatalf("part 2 of 2 and a stray part: %+v", rc3)
	}
	days, err := e.store.Days(context.Background(), storetest.D1, "S1")
	if err != nil || len(days) != 1 || days[0].Day.Revision != 2 || len(days[0].Day.Txns) != len(parts[0].Txns)+len(parts[1].Txns) {
		t.Fatalf("days of %s after its parts: %+v, %v", storetest.D1, days, err)
	}
}

// validExceptions returns a valid open oversell and a valid resolved refund exception.
func validExceptions() []hqwire.Exception {
	return []hqwire.Exception{
		storetest.Oversell("T1", 100, "SKU-0001", storetest.D1, storetest.T0, 2, 1),
		storetest.Resolved(storetest.RefundException("T1", 101, storetest.D1, storetest.T0.Add(time.Hour),
			"refund_sale_unknown", "sale T1/9 is not the sale accepted at seq 9", 2),
			storetest.T0.Add(2*time.Hour), "the customer had the receipt", 3),
	}
}

// exceptions returns a batch modifier that lists validExceptions, exceptions[i] changed
// by mod.
func exceptions(i int, mod func(x *hqwire.Exception)) func(b *hqwire.Batch) {
	return func(b *hqwire.Batch) {
		b.Exceptions = validExceptions()
		mod(&b.Exceptions[i])
	}
}

// TestValidateExceptions: each rule on an exception refuses the batch with batch_invalid,
// naming the exception and what is wrong with it; what the rules allow passes, a refund
// code this release does not know included.
func TestValidateExceptions(t *testing.T) {
	const oversell, refund = 0, 1
	withdrawn := func(mod func(x *hqwire.Exception)) func(x *hqwire.Exception) {
		return func(x *hqwire.Exception) {
			*x = storetest.Withdrawn(*x, x.Change+10)
			mod(x)
		}
	}
	for _, c := range []struct {
		name string
		i    int
		mod  func(x *hqwire.Exception)
	}{
		{"both as made", oversell, func(*hqwire.Exception) {}},
		{"a refund code of a later release", refund, func(x *hqwire.Exception) { x.Code = "refund_method_mismatch_2" }},
		{"a refund without detail", refund, func(x *hqwire.Exception) { x.Detail = "" }},
		{"an oversell with a detail", oversell, func(x *hqwire.Exception) { x.Detail = "two crates short" }},
		{"resolved without resolved_at or resolution", refund, func(x *hqwire.Exception) { x.ResolvedAt, x.Resolution = time.Time{}, "" }},
		{"open, without at", oversell, func(x *hqwire.Exception) { x.At = time.Time{} }},
		{"a withdrawn oversell", oversell, withdrawn(func(*hqwire.Exception) {})},
		{"a withdrawn refund", refund, withdrawn(func(*hqwire.Exception) {})},
		{"the longest code, detail, resolution and sku", refund, func(x *hqwire.Exception) {
			x.Code = strings.Repeat("z", hqwire.MaxCodeLen)
			x.Detail = strings.Repeat("é", hqwire.MaxExceptionText/2)
			x.Resolution = strings.Repeat("r", hqwire.MaxExceptionText)
		}},
		{"an oversell's longest sku", oversell, func(x *hqwire.Exception) { x.SKU = strings.Repeat("s", wire.MaxTextLen) }},
		{"a parked sale", refund, func(x *hqwire.Exception) {
			x.Kind, x.Code, x.Detail = hqwire.ExceptionParked, "payload_invalid", `sale "s1" of 3.00 (cash 3.00): bad`
		}},
		{"a parked event without time", refund, func(x *hqwire.Exception) { x.Kind, x.At = hqwire.ExceptionParked, time.Time{} }},
		{"a withdrawn parked event", refund, withdrawn(func(x *hqwire.Exception) { x.Kind = hqwire.ExceptionParked })},
		{"a seq gap", refund, func(x *hqwire.Exception) {
			x.Kind, x.Code, x.Detail = hqwire.ExceptionSeqGap, hqwire.SeqGapPruned, "seqs 4 to 9 of T1: pruned"
			x.Resolved, x.ResolvedAt, x.Resolution = false, time.Time{}, ""
		}},
	} {
		b := batch("S1", "b-1", nil)
		exceptions(c.i, c.mod)(b)
		if err := serve.Validate(b); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	maxed := batch("S1", "b-1", nil)
	for i := range hqwire.MaxBatchExceptions {
		maxed.Exceptions = append(maxed.Exceptions, storetest.Oversell("T1", int64(i+1), "SKU-0001", storetest.D1,
			storetest.T0, 1, 1))
	}
	if err := serve.Validate(maxed); err != nil {
		t.Errorf("%d exceptions: %v", hqwire.MaxBatchExceptions, err)
	}

	for _, c := range []struct {
		name   string
		i      int
		mod    func(x *hqwire.Exception)
		detail string // the detail must contain "exceptions[i] (" and this
	}{
		{"unknown kind", refund, func(x *hqwire.Exception) { x.Kind = "Refund" }, `kind "Refund" is not oversell, price, refund, parked or seq_gap`},
		{"no kind", oversell, func(x *hqwire.Exception) { x.Kind = "" }, "is not oversell, price, refund, parked or seq_gap"},
		{"parked with a sku too long", refund, func(x *hqwire.Exception) {
			x.Kind, x.SKU = hqwire.ExceptionParked, strings.Repeat("a", hqwire.MaxExceptionSKU+1)
		}, "a parked exception's sku is longer than 256 bytes"},
		{"parked with qty_short", refund, func(x *hqwire.Exception) { x.Kind, x.QtyShort = hqwire.ExceptionParked, 2 },
			"a parked exception has no qty_short"},
		{"parked without code", refund, func(x *hqwire.Exception) { x.Kind, x.Code = hqwire.ExceptionParked, "" },
			`code "" is not 1 to 64 characters`},
		{"terminal not an id", oversell, func(x *hqwire.Exception) { x.Terminal = "T/1" }, "terminal is not an id"},
		{"no terminal", refund, func(x *hqwire.Exception) { x.Terminal = "" }, "terminal is not an id"},
		{"seq 0", oversell, func(x *hqwire.Exception) { x.Seq = 0 }, "seq 0 is not positive"},
		{"negative seq", refund, func(x *hqwire.Exception) { x.Seq = -4 }, "seq -4 is not positive"},
		{"change 0", refund, func(x *hqwire.Exception) { x.Change = 0 }, "change 0 is not positive"},
		{"negative change", oversell, func(x *hqwire.Exception) { x.Change = -1 }, "change -1 is not positive"},
		{"bad business date", oversell, func(x *hqwire.Exception) { x.BusinessDate = "2025-02-30" }, `business_date "2025-02-30"`},
		{"no business date", refund, func(x *hqwire.Exception) { x.BusinessDate = "" }, "business_date"},
		{"oversell without sku", oversell, func(x *hqwire.Exception) { x.SKU = "" }, "an oversell needs a sku"},
		{"oversell sku too long", oversell, func(x *hqwire.Exception) { x.SKU = strings.Repeat("s", hqwire.MaxExceptionSKU+1) },
			"an oversell needs a sku of 1 to 256 bytes"},
		{"price without sku", refund, func(x *hqwire.Exception) { x.Kind, x.Code = hqwire.ExceptionPrice, "price_changed" },
			"a price exception needs a sku"},
		{"price with qty_short", oversell, func(x *hqwire.Exception) { x.Kind, x.Code = hqwire.ExceptionPrice, "price_changed" },
			"a price exception has no qty_short"},
		{"refund with a sku", refund, func(x *hqwire.Exception) { x.SKU = "SKU-0001" }, "a refund exception has no sku"},
		{"seq gap with a sku", refund, func(x *hqwire.Exception) { x.Kind, x.SKU = hqwire.ExceptionSeqGap, "SKU-0001" },
			"a seq_gap exception has no sku"},
		{"seq gap with qty_short", refund, func(x *hqwire.Exception) { x.Kind, x.QtyShort = hqwire.ExceptionSeqGap, 3 },
			"a seq_gap exception has no qty_short"},
		{"NUL in a detail", refund, func(x *hqwire.Exception) { x.Detail = "line\x001" }, "detail holds a NUL character"},
		{"NUL in a sku", oversell, func(x *hqwire.Exception) { x.SKU = "SKU\x00" }, "sku holds a NUL character"},
		{"oversell qty_short 0", oversell, func(x *hqwire.Exception) { x.QtyShort = 0 }, "qty_short 0 of an oversell"},
		{"oversell qty_short negative", oversell, func(x *hqwire.Exception) { x.QtyShort = -2 }, "qty_short -2 of an oversell"},
		{"oversell of another code", oversell, func(x *hqwire.Exception) { x.Code = "refund_sale_unknown" },
			`code "refund_sale_unknown" of an oversell is not oversold`},
		{"oversell without code", oversell, func(x *hqwire.Exception) { x.Code = "" }, "of an oversell is not oversold"},
		{"refund with qty_short", refund, func(x *hqwire.Exception) { x.QtyShort = 1 }, "a refund exception has no qty_short"},
		{"refund without code", refund, func(x *hqwire.Exception) { x.Code = "" }, `code "" is not 1 to 64 characters [a-z0-9_]`},
		{"refund code too long", refund, func(x *hqwire.Exception) { x.Code = strings.Repeat("z", hqwire.MaxCodeLen+1) },
			"is not 1 to 64 characters"},
		{"refund code in capitals", refund, func(x *hqwire.Exception) { x.Code = "Refund_Sale_Unknown" }, "is not 1 to 64"},
		{"refund code with a dash", refund, func(x *hqwire.Exception) { x.Code = "refund-sale-unknown" }, "is not 1 to 64"},
		{"refund code with a space", refund, func(x *hqwire.Exception) { x.Code = "refund sale" }, "is not 1 to 64"},
		{"detail too long", refund, func(x *hqwire.Exception) { x.Detail = strings.Repeat("é", hqwire.MaxExceptionText/2) + "d" },
			"detail is longer than 1000 bytes"},
		{"resolution too long", oversell, func(x *hqwire.Exception) {
			*x = storetest.Resolved(*x, storetest.T0, strings.Repeat("r", hqwire.MaxExceptionText+1), x.Change+1)
		}, "resolution is longer than 1000 bytes"},
		{"resolved_at without resolved", refund, func(x *hqwire.Exception) { x.Resolved = false }, "resolved_at without resolved"},
		{"resolution without resolved", refund, func(x *hqwire.Exception) { x.Resolved, x.ResolvedAt = false, time.Time{} },
			"a resolution without resolved"},
		{"withdrawn with a code", oversell, withdrawn(func(x *hqwire.Exception) { x.Code = hqwire.CodeOversold }),
			"a withdrawn exception carries no code"},
		{"withdrawn with a detail", refund, withdrawn(func(x *hqwire.Exception) { x.Detail = "d" }), "a withdrawn exception"},
		{"withdrawn with qty_short", oversell, withdrawn(func(x *hqwire.Exception) { x.QtyShort = 1 }), "a withdrawn exception"},
		{"withdrawn with at", refund, withdrawn(func(x *hqwire.Exception) { x.At = storetest.T0 }), "a withdrawn exception"},
		{"withdrawn and resolved", refund, withdrawn(func(x *hqwire.Exception) { x.Resolved = true }), "a withdrawn exception"},
		{"withdrawn with resolved_at", oversell, withdrawn(func(x *hqwire.Exception) { x.ResolvedAt = storetest.T0 }),
			"a withdrawn exception"},
		{"withdrawn with a resolution", refund, withdrawn(func(x *hqwire.Exception) { x.Resolution = "r" }),
			"a withdrawn exception"},
		{"withdrawn oversell without sku", oversell, withdrawn(func(x *hqwire.Exception) { x.SKU = "" }),
			"an oversell needs a sku"},
		{"withdrawn refund with a sku", refund, withdrawn(func(x *hqwire.Exception) { x.SKU = "s" }),
			"a refund exception has no sku"},
		{"withdrawn with change 0", refund, withdrawn(func(x *hqwire.Exception) { x.Change = 0 }), "change 0"},
	} {
		b := batch("S1", "b-1", sales("S1", 1, 2))
		exceptions(c.i, c.mod)(b)
		err := serve.Validate(b)
		if perr.KindOf(err) != perr.Invalid || perr.CodeOf(err) != hqwire.CodeBatchInvalid {
			t.Errorf("%s: %v, want %s", c.name, err, hqwire.CodeBatchInvalid)
			continue
		}
		msg := perr.As(err).Message
		if prefix := fmt.Sprintf("exceptions[%d] (", c.i); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, c.detail) {
			t.Errorf("%s: %q, want %q… and %q", c.name, msg, prefix, c.detail)
		}
	}

	// The same exception twice (its key: kind, terminal, seq and sku), whatever its states.
	b := batch("S1", "b-1", nil)
	b.Exceptions = append(validExceptions(), storetest.Withdrawn(validExceptions()[0], 9))
	err := serve.Validate(b)
	if msg := perr.As(err).Message; perr.CodeOf(err) != hqwire.CodeBatchInvalid ||
		!strings.Contains(msg, "exceptions[2] (") || !strings.Contains(msg, "the same exception as exceptions[0]") {
		t.Errorf("an exception twice: %v", err)
	}
	b.Exceptions[2].SKU = "SKU-0002" // another SKU of the same sale is another exception
	if err := serve.Validate(b); err != nil {
		t.Errorf("two SKUs of one sale: %v", err)
	}
}

// TestExceptions: a batch's exceptions are stored with its rows; the receipt counts those
// applied, and a replay answers the same; a state of a lower change number is not applied.
func TestExceptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, serve.Options{})
	xs := validExceptions()
	xs[1].Code = "refund_method_mismatch" // a code of a later store release
	later := storetest.Withdrawn(storetest.Oversell("T1", 102, "SKU-0003", storetest.D1, storetest.T0, 1, 1), 4)
	b := batch("S1", "b-1", sales("S1", 1, 3))
	b.Exceptions = append(xs, later)
	rc := e.mustStore(upload(b))
	if rc.Exceptions != 3 || rc.New != 3 || rc.Duplicate {
		t.Fatalf("receipt %+v, want 3 exceptions applied", rc)
	}
	stored := e.now
	want := []hqstore.StoredException{storetest.StoredException("S1", xs[0], stored), storetest.StoredException("S1", xs[1], stored)}
	got, err := e.store.Exceptions(context.Background(), storetest.D1, "S1")
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckExceptions(t, got, want)

	e.now = e.now.Add(time.Minute)
	again := e.mustStore(upload(b))
	if !again.Duplicate || again.Exceptions != 3 {
		t.Fatalf("replay receipt %+v, want a duplicate of %+v", again, rc)
	}
	older := batch("S1", "b-2", nil)
	older.Exceptions = []hqwire.Exception{storetest.Oversell("T1", 100, "SKU-0001", storetest.D1, storetest.T0, 5, 1)}
	if rc := e.mustStore(upload(older)); rc.Exceptions != 0 {
		t.Fatalf("an older state: %+v, want none applied", rc)
	}
	if got, err = e.store.Exceptions(context.Background(), storetest.D1, "S1"); err != nil {
		t.Fatal(err)
	}
	storetest.CheckExceptions(t, got, want)
}

// dayPart returns a batch modifier that declares the day of the batch's rows, numbered
// part of parts.
func dayPart(part, parts int) func(b *hqwire.Batch) {
	return func(b *hqwire.Batch) {
		d := storetest.Day(storetest.D1, 2, storetest.T0, b.Rows)
		d.Part, d.Parts, d.Split = part, parts, "s1"
		b.Days = []hqwire.StoreDay{d}
	}
}

func rowsOf(t *testing.T, e *env, date, store string) []hqstore.StoredRow {
	t.Helper()
	rows, err := e.store.Rows(context.Background(), date, store)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func storedAll(store string, rows []hqwire.Row, at time.Time) []hqstore.StoredRow {
	out := make([]hqstore.StoredRow, len(rows))
	for i, r := range rows {
		out[i] = storetest.Stored(store, r, at)
	}
	return out
}

// TestSkewOption checks a configured MaxClockSkew.
func TestSkewOption(t *testing.T) {
	t.Parallel()
	e := newEnv(t, serve.Options{MaxClockSkew: 30 * time.Second})
	r := upload(batch("S1", "b-1", sales("S1", 1, 2)))
	r.ts = strconv.FormatInt(e.now.Add(-time.Minute).Unix(), 10)
	resp, body := e.send(r)
	mustProblem(t, resp, body, 401, hqwire.CodeTimestampSkew)
	r.ts = strconv.FormatInt(e.now.Add(-20*time.Second).Unix(), 10)
	if rc := e.mustStore(r); rc.New != 2 {
		t.Fatalf("receipt %+v", rc)
	}
}

// TestRouting checks the health endpoint, methods and unknown paths.
func TestRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, serve.Options{})
	get := func(method, path string) (*http.Response, []byte) {
		req, err := http.NewRequest(method, e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return e.do(req)
	}
	resp, body := get(http.MethodGet, serve.HealthPath)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("healthz: %d %s", resp.StatusCode, body)
	}
	resp, body = get(http.MethodGet, serve.BatchesPath)
	mustProblem(t, resp, body, 405, hqwire.CodeMethodNotAllowed)
	if resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("Allow %q", resp.Header.Get("Allow"))
	}
	resp, body = get(http.MethodPost, serve.HealthPath)
	mustProblem(t, resp, body, 405, hqwire.CodeMethodNotAllowed)
	resp, body = get(http.MethodGet, "/v1/nothing")
	mustProblem(t, resp, body, 404, hqwire.CodeNotFound)
}

// TestStatus checks the code table.
func TestStatus(t *testing.T) {
	for code, want := range map[string]int{
		hqwire.CodeBatchIDReused: 422, hqwire.CodeRowConflict: 409, hqwire.CodeStoreMismatch: 403,
		hqwire.CodeBodyTooLarge: 413, hqwire.CodeUnauthorized: 401, hqwire.CodeBatchInvalid: 400,
		hqwire.CodeTooManyFailures: 429, hqwire.CodeContentHashMismatch: 400,
	} {
		if got := serve.Status(code, ""); got != want {
			t.Errorf("Status(%s) = %d, want %d", code, got, want)
		}
	}
}

// TestMountedUnderPrefix signs over the full path the uploader posts to, with the handler
// mounted under a prefix.
func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, serve.Options{})
	mux := http.NewServeMux()
	mux.Handle("/hq/", http.StripPrefix("/hq", e.srv.Config.Handler))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b := batch("S1", "b-1", sales("S1", 1, 2))
	r := upload(b)
	ts := strconv.FormatInt(e.now.Unix(), 10)
	for _, path := range []string{"/hq/v1/batches", serve.BatchesPath} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/hq"+serve.BatchesPath, bytes.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(hqwire.HeaderStore, "S1")
		req.Header.Set(hqwire.HeaderTimestamp, ts)
		req.Header.Set(hqwire.HeaderIdemKey, b.ID)
		req.Header.Set(hqwire.HeaderContentHash, hqwire.ContentHash(r.body))
		req.Header.Set(hqwire.HeaderSignature, hqwire.Sign(secrets["S1"], http.MethodPost, path, "S1", ts, b.ID, r.body))
		resp, body := e.do(req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("signed over %s: %d %s", path, resp.StatusCode, body)
		}
	}
}

// TestMetrics: each upload is counted by store and result (stored, duplicate, or the
// refusal's code), rows new to HQ are counted, and the store's last batch time is HQ's
// clock; a store HQ does not know is counted as "unknown", whatever its header says.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, serve.Options{Metrics: reg})
	good := upload(batch("S1", "S1-m-1", sales("S1", 1, 3)))
	e.mustStore(good)
	e.mustStore(good) // a replay
	bad := upload(batch("S1", "S1-m-2", sales("S1", 4, 1)))
	bad.sig = "00"
	resp, body := e.send(bad)
	mustProblem(t, resp, body, http.StatusUnauthorized, hqwire.CodeUnauthorized)
	stranger := upload(batch("S9", "S9-m-1", sales("S9", 1, 1)))
	stranger.secret = []byte("guess")
	resp, body = e.send(stranger)
	mustProblem(t, resp, body, http.StatusUnauthorized, hqwire.CodeUnauthorized)

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"posgate_hq_batches_total", map[string]string{"store": "S1", "result": "stored"}, 1},
		{"posgate_hq_batches_total", map[string]string{"store": "S1", "result": "duplicate"}, 1},
		{"posgate_hq_batches_total", map[string]string{"store": "S1", "result": hqwire.CodeUnauthorized}, 1},
		{"posgate_hq_batches_total", map[string]string{"store": "unknown", "result": hqwire.CodeUnauthorized}, 1},
		{"posgate_hq_rows_total", map[string]string{"store": "S1"}, 3},
		{"posgate_hq_last_batch_timestamp_seconds", map[string]string{"store": "S1"}, float64(e.now.Unix())},
	} {
		if got, ok := metricValue(t, reg, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "posgate_hq_batches_total"); err != nil || n != 4 {
		t.Errorf("%d batch series (%v), want 4", n, err)
	}

	// The last batch time comes from the database: a replay a minute later does not move
	// it, and a serve process started afresh on the same database has it at once (a store
	// that went quiet before HQ restarted is still seen as quiet). S2 never uploaded.
	stored := e.now
	e.now = e.now.Add(time.Minute)
	e.mustStore(good)
	reg2 := prometheus.NewRegistry()
	serve.New(e.store, secrets, serve.Options{Metrics: reg2})
	for _, r := range []*prometheus.Registry{reg, reg2} {
		if got, ok := metricValue(t, r, "posgate_hq_last_batch_timestamp_seconds", map[string]string{"store": "S1"}); !ok ||
			got != float64(stored.Unix()) {
			t.Errorf("last batch of S1 = %v (present %v), want %v", got, ok, float64(stored.Unix()))
		}
		if n, err := testutil.GatherAndCount(r, "posgate_hq_last_batch_timestamp_seconds"); err != nil || n != 1 {
			t.Errorf("%d last-batch series (%v), want 1 (S1's)", n, err)
		}
	}
	// A database that cannot answer fails the scrape, rather than leaving the gauge out
	// (which would resolve an alert on a quiet store).
	e.store.Close()
	if _, err := reg2.Gather(); err == nil || !strings.Contains(err.Error(), "last batch") {
		t.Errorf("scrape with the database closed: %v, want an error", err)
	}
}

// metricValue returns the value of the series of name with exactly labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return metricstest.Value(fams, name, labels)
}

// slowBody gives the start of a batch, then fails as the server's read timeout makes a
// slow uplink's body fail.
type slowBody struct{ sent bool }

func (b *slowBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, `{"v":1,`), nil
	}
	return 0, os.ErrDeadlineExceeded
}

// TestBodyIncomplete: a body HQ could not read whole is answered 408 body_incomplete,
// which the uploader retries, not 400, which it would hold as a refused batch.
func TestBodyIncomplete(t *testing.T) {
	e := newEnv(t, serve.Options{})
	req := httptest.NewRequest(http.MethodPost, serve.BatchesPath, &slowBody{})
	ts, hash := strconv.FormatInt(e.now.Unix(), 10), hqwire.ContentHash([]byte(`{"v":1}`))
	req.Header.Set(hqwire.HeaderStore, "S1")
	req.Header.Set(hqwire.HeaderTimestamp, ts)
	req.Header.Set(hqwire.HeaderContentHash, hash) // signed: the body is read only then
	req.Header.Set(hqwire.HeaderSignature, hqwire.SignHash(secrets["S1"], http.MethodPost, serve.BatchesPath, "S1", ts, "b1", hash))
	req.Header.Set(hqwire.HeaderIdemKey, "b1")
	rec := httptest.NewRecorder()
	e.srv.Config.Handler.ServeHTTP(rec, req)
	var p serve.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusRequestTimeout ||
		p.Code != hqwire.CodeBodyIncomplete {
		t.Fatalf("answer %d %s (%v), want 408 body_incomplete", rec.Code, rec.Body, err)
	}
}

// TestUnauthorizedAnswersAlike: an unknown store, a known store's wrong signature and a
// missing header get the same answer, word for word, so that HQ's answers name no store id
// that exists; the body is never read before the signature checks (a 2 MiB body of an
// unknown store is answered 401, not 413 or a read of it).
func TestUnauthorizedAnswersAlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t, serve.Options{})
	var answers []serve.Problem
	for _, r := range []request{
		func() request {
			r := upload(batch("S9", "b-1", sales("S9", 1, 2)))
			r.secret = []byte("a guess")
			return r
		}(),
		func() request { r := upload(batch("S1", "b-1", sales("S1", 1, 2))); r.secret = secrets["S2"]; return r }(),
		func() request { r := upload(batch("S1", "b-1", sales("S1", 1, 2))); r.noHash = true; return r }(),
		{body: bytes.Repeat([]byte("x"), 2<<20), store: "S9", key: "b-2", secret: []byte("a guess")},
	} {
		resp, body := e.send(r)
		answers = append(answers, mustProblem(t, resp, body, http.StatusUnauthorized, hqwire.CodeUnauthorized))
	}
	for i := 1; i < len(answers); i++ {
		if answers[i] != answers[0] {
			t.Errorf("answer %d %+v differs from answer 0 %+v", i, answers[i], answers[0])
		}
	}
	if strings.Contains(answers[0].Detail, "S9") || strings.Contains(answers[0].Detail, "S1") {
		t.Errorf("the answer names a store: %q", answers[0].Detail)
	}
}

// TestFailuresWait: after the guard's free failures, an address waits (429 with
// Retry-After) before its next attempt is even checked, a right signature included; once
// the wait is over, a right signature goes through and the address starts over.
func TestFailuresWait(t *testing.T) {
	t.Parallel()
	var e *env
	e = newEnv(t, serve.Options{Guard: guard.New(guard.Config{Free: 3, Base: time.Minute,
		Now: func() time.Time { return e.now }})})
	wrong := upload(batch("S1", "b-1", sales("S1", 1, 2)))
	wrong.secret = []byte("a guess")
	for range 3 {
		resp, body := e.send(wrong)
		mustProblem(t, resp, body, http.StatusUnauthorized, hqwire.CodeUnauthorized)
	}
	resp, body := e.send(wrong) // the fourth failure: counted, and the wait begins
	mustProblem(t, resp, body, http.StatusUnauthorized, hqwire.CodeUnauthorized)
	good := upload(batch("S1", "b-1", sales("S1", 1, 2)))
	resp, body = e.send(good)
	mustProblem(t, resp, body, http.StatusTooManyRequests, hqwire.CodeTooManyFailures)
	if ra := resp.Header.Get("Retry-After"); ra != "60" {
		t.Errorf("Retry-After %q, want 60", ra)
	}
	e.now = e.now.Add(time.Minute)
	if rc := e.mustStore(good); rc.New != 2 {
		t.Fatalf("after the wait: %+v", rc)
	}
}
