package hqview

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/internal/stack"
)

// TestCatalogs: both languages have the same keys, and every key the page, its script and
// the HTML report name is in them.
func TestCatalogs(t *testing.T) {
	cats := map[string]Catalog{}
	for _, l := range Languages {
		c, err := LoadCatalog(l)
		if err != nil {
			t.Fatal(err)
		}
		cats[l] = c
	}
	for k := range cats["en"] {
		if cats["zh-CN"][k] == "" {
			t.Errorf("zh-CN lacks %q", k)
		}
	}
	for k := range cats["zh-CN"] {
		if cats["en"][k] == "" {
			t.Errorf("en lacks %q", k)
		}
	}
	used := map[string]bool{}
	for _, re := range []*regexp.Regexp{regexp.MustCompile(`\bt\("([a-z][\w.]*[a-z])"`),
		regexp.MustCompile(`data-i18n(?:-placeholder)?="([^"]+)"`), regexp.MustCompile(`\{\{t "([^"]+)"`)} {
		for _, f := range []string{"page/hq.js", "page/index.html", "report.go"} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				used[m[1]] = true
			}
		}
	}
	if len(used) < 50 {
		t.Fatalf("found %d keys in use; the page has more", len(used))
	}
	for k := range used {
		if _, ok := cats["en"][k]; !ok {
			t.Errorf("%q is used but in no catalog", k)
		}
	}
	// Keys built from the values the API gives.
	for _, k := range []string{"kind.missing_at_hq", "kind.extra_at_hq", "kind.amount_differs", "kind.listed_twice", "kind.late",
		"kind.no_store_day", "kind.no_day_close", "exkind.oversell", "exkind.price", "exkind.refund", "exkind.parked", "exkind.seq_gap", "exkind.flow",
		"status." + TxnMatches, "status." + TxnMissingAtHQ, "status." + TxnNotDeclared, "status." + TxnAmountDiffers,
		"status." + TxnNoDeclaration, "txnkind.sale", "txnkind.refund", "figure.sale_count", "method.all"} {
		if _, ok := cats["en"][k]; !ok {
			t.Errorf("no words for %q", k)
		}
	}
}

// TestGroupAmount: amounts are grouped from their decimal text.
func TestGroupAmount(t *testing.T) {
	for in, want := range map[string]string{"0.00": "¥0.00", "12.50": "¥12.50", "1234.56": "¥1,234.56",
		"-1234567.80": "¥-1,234,567.80", "100000": "¥100,000", "92233720368547758.07": "¥92,233,720,368,547,758.07"} {
		if got := GroupAmount(in); got != want {
			t.Errorf("GroupAmount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHandler: the page's files are served to anyone (they hold no data) under a strict
// CSP; the API answers only the viewer token; an HQ without a declaration answers an empty
// overview, and the HTML report of it is written.
func TestHandler(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(st, Options{Token: "short"}); err == nil {
		t.Fatal("a viewer token of 5 bytes was taken")
	}
	const token = "viewer-token-of-the-test"
	h, err := New(st, Options{Token: token, Stores: []string{"S1"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path, tok string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := res.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return res, []byte(b.String())
	}
	for _, p := range []string{"/", "/hq/hq.js", "/hq/hq.css", "/hq/i18n/zh-CN.json"} {
		res, _ := get(p, "")
		if res.StatusCode != 200 || res.Header.Get("Content-Security-Policy") != "default-src 'self'; frame-ancestors 'none'" {
			t.Errorf("GET %s: %d, CSP %q", p, res.StatusCode, res.Header.Get("Content-Security-Policy"))
		}
	}
	if res, _ := get(OverviewPath, ""); res.StatusCode != 401 {
		t.Errorf("overview without the token: %d", res.StatusCode)
	}
	if res, _ := get(OverviewPath, "another-token-entirely"); res.StatusCode != 401 {
		t.Errorf("overview with another token: %d", res.StatusCode)
	}
	if res, _ := get(OverviewPath+"?date=2026-1-2", token); res.StatusCode != 400 {
		t.Errorf("overview of a bad date: %d", res.StatusCode)
	}
	res, body := get(OverviewPath, token)
	var o Overview
	if err := json.Unmarshal(body, &o); res.StatusCode != 200 || err != nil || o.Date != "" || len(o.Stores) != 1 ||
		o.Stores[0].Store != "S1" || o.Stores[0].LastBatchAt != nil || len(o.Dates) != DaysShown {
		t.Fatalf("overview of an empty HQ: %d %v %s", res.StatusCode, err, body)
	}
	var html strings.Builder
	o.Now = time.Date(2026, 1, 2, 8, 0, 0, 0, time.UTC)
	if err := WriteHTML(&html, o, "zh-CN"); err != nil {
		t.Fatal(err)
	}
	if s := html.String(); !strings.Contains(s, "所示日期内尚无门店申报营业日") || strings.Contains(s, "<script") ||
		strings.Contains(s, "http://") || strings.Contains(s, "https://") || !strings.Contains(s, "<style>") {
		t.Errorf("report:\n%s", s)
	}
}

// TestScriptParses runs node's syntax check on the page's script (make deps installs
// nodejs): a script that does not parse leaves HQ finance a blank page.
func TestScriptParses(t *testing.T) {
	stack.SkipShort(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to check hq.js (make deps installs nodejs): %v", err)
	}
	if out, err := exec.Command(node, "--check", "page/hq.js").CombinedOutput(); err != nil {
		t.Fatalf("node --check hq.js: %v\n%s", err, out)
	}
}
