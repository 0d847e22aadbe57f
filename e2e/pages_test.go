//go:build unix

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e/browser"

	dto "github.com/prometheus/client_model/go"

	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// pagesLead is the least time from choosing the store's zone to its midnight: starting the
// store, HQ and the tills, and the trade of the day before.
const pagesLead = 25 * time.Second

// pagesRun is what TestPagesWithRealData started.
type pagesRun struct {
	store    *StoreServer
	hq       *Serve
	cashiers map[string]*Cashier
	proxy    *Proxy // T02's link
	uploader *Uploader
	hqSync   string // the hq-sync binary
	hqDB     string
	loc      *time.Location
	midnight time.Time
	shots    string // the screenshots' directory
}

// screenshotDir is where the pages' screenshots go: $POSGATE_SCREENSHOTS, or
// posgate-screenshots in the system's temporary directory. It is emptied first; the test
// logs it.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("POSGATE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "posgate-screenshots")
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPagesWithRealData (which also checks, while everything runs, that every metric the
// Grafana dashboard and the alert rules of deploy/ name is exported) loads the store dashboard and the HQ page in headless Chromium
// (in English and in Simplified Chinese, picked from the browser's languages) with real
// data: a store-server (charts sampled every second), two terminal-agents, hq-sync serve
// and upload. The store keeps the clock of a zone whose midnight falls during the test,
// so the day traded is closed by the tills, declared and reconciled at HQ. It checks that
// every chart has drawn its series with as many points as the API answers, that the till
// cut off shows its backlog as unknown, and clicks through HQ's drill-down to a store's
// transactions; it writes a screenshot of each page in each language to the directory it
// logs.
func TestPagesWithRealData(t *testing.T) {
	stack.SkipShort(t)
	t.Parallel() // mostly waiting for the store's midnight and the new day's second minute
	r := startPagesRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	closed := r.midnight.Add(-time.Second).In(r.loc).Format(wire.BusinessDate)
	r.trade(ctx, t)

	// T02 is back; the tills close the day before midnight; HQ has it declared.
	r.proxy.Restore()
	for term, c := range r.cashiers {
		drained(ctx, t, c)
		if st, body, err := c.Call("POST", "/v1/day-close", fmt.Sprintf(`{"business_date":%q}`, closed)); err != nil || st != 200 {
			t.Fatalf("%s day close: %d %s %v", term, st, body, err)
		}
		drained(ctx, t, c)
	}
	txns, err := WaitDeclared(ctx, r.store, r.hq, closed)
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"en-US,en", "zh-CN,zh"} {
		b := browser.Start(t, lang)
		b.Open(r.hq.PageURL())
		b.WaitDrawn(1)
		r.checkHQ(t, b, lang, closed, txns)
	}
	r.checkDeployMetrics(t)
	r.checkHTMLReport(t, closed)

	// T02 goes offline again and sells; the dashboard, a minute into the new day, shows
	// its backlog unknown, and today's sales beside the day before's.
	r.proxy.Cut()
	r.sell(t, "T02", 2, "MILK")
	if d := time.Until(r.midnight.Add(61 * time.Second)); d > 0 {
		t.Logf("waiting %v for the new day's second minute", d.Round(time.Second))
		time.Sleep(d)
	}
	r.sell(t, "T01", 2, "RICE")
	drained(ctx, t, r.cashiers["T01"])
	for _, lang := range []string{"en-US,en", "zh-CN,zh"} {
		b := browser.Start(t, lang)
		b.Open("http://" + r.store.API + "/#token=" + r.store.Opts.Token)
		b.WaitDrawn(1)
		r.checkDashboard(ctx, t, b, lang)
		b.Screenshot(filepath.Join(r.shots, "dashboard-"+lang[:5]+".png"))
	}
	t.Logf("screenshots in %s", r.shots)
	fmt.Fprintf(os.Stderr, "TestPagesWithRealData: screenshots in %s\n", r.shots)
}

func startPagesRun(t *testing.T) *pagesRun {
	ctx := context.Background()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := Build(ctx, root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	r := &pagesRun{cashiers: map[string]*Cashier{}, shots: screenshotDir(t), hqSync: bins.HQSync}
	st := stack.Run(t, stack.Options{Redis: true})
	// Starting the store, HQ and the tills and the trade before midnight take a few seconds,
	// more beside the package's other tests.
	var zone string
	r.midnight, zone = ZoneWithMidnight(time.Now().Add(pagesLead))
	if r.loc, err = wire.LoadLocation(zone); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cat := filepath.Join(dir, "catalog.csv")
	os.WriteFile(cat, []byte("sku,name,price\nMILK,Milk 1L,12.50\nRICE,Rice 5kg,1049.00\nTEA,Green tea,0.30\n"), 0o600)
	sdir := filepath.Join(dir, "store")
	os.MkdirAll(sdir, 0o700)
	r.store, err = StartStore(ctx, bins.StoreServer, StoreOptions{Store: "S001", DataDir: sdir, TZ: zone,
		RedisAddr: st.Redis[0].Addr(), Catalog: cat, Extra: []string{"--chart-every", "2s"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.store.Stop() })
	for sku, q := range map[string]int64{"MILK": 500, "RICE": 500, "TEA": 1} {
		if _, err := r.store.Manager().Adjust(ctx, client.AdjustRequest{ID: "open-" + sku, SKU: sku, Delta: q,
			Reason: client.ReasonOpening}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.store.AllowOfflineRefunds(ctx); err != nil {
		t.Fatal(err)
	}
	hqDir := filepath.Join(dir, "hq")
	os.MkdirAll(hqDir, 0o700)
	const secret = "S001-secret-of-the-pages-test"
	r.hqDB = filepath.Join(hqDir, "hq.db")
	if r.hq, err = StartServe(ctx, bins.HQSync, ServeOptions{DB: r.hqDB, Dir: hqDir,
		Stores: map[string]string{"S001": secret}, ViewerToken: "pages-test-viewer-token"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.hq.Stop() })
	if r.uploader, err = StartUploader(ctx, bins.HQSync, UploaderOptions{Store: "S001", DataDir: sdir,
		HQURL: r.hq.BatchesURL(), Secret: secret, TZ: zone}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.uploader.Stop() })
	if r.proxy, err = NewProxy(strings.TrimPrefix(r.store.Broker, "tcp://")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.proxy.Close() })
	for _, term := range []string{"T01", "T02"} {
		broker := r.store.Broker
		if term == "T02" {
			broker = "tcp://" + r.proxy.Addr()
		}
		adir := filepath.Join(dir, "agent-"+term)
		os.MkdirAll(adir, 0o700)
		a, err := StartAgent(ctx, bins.TerminalAgent, AgentOptions{Store: "S001", Terminal: term, Broker: broker,
			DataDir: adir, TZ: zone, Extra: []string{"--backlog-every", "1s"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Stop() })
		if r.cashiers[term], err = ReadyCashier(ctx, a.API, a.Token, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		r.cashiers[term].Supervisor = &DutySupervisor
	}
	return r
}

// trade sells on both tills before the store's midnight, T02 going offline and selling the
// last tea T01 already sold (an oversell), then on T01 after midnight (today's chart).
func (r *pagesRun) trade(ctx context.Context, t *testing.T) {
	sell := func(term string, n int, skus ...string) { r.sell(t, term, n, skus...) }
	sell("T01", 6, "MILK")
	sell("T02", 4, "MILK", "RICE")
	sell("T01", 1, "TEA")
	drained(ctx, t, r.cashiers["T01"])
	drained(ctx, t, r.cashiers["T02"])
	r.proxy.Cut()
	sell("T02", 3, "TEA", "MILK")
	if time.Now().After(r.midnight.Add(-time.Second)) {
		t.Fatalf("the trade before the store's midnight (%v) ended after it: the machine is too slow for the test's %v", r.midnight,
			pagesLead)
	}
	if d := time.Until(r.midnight.Add(time.Second)); d > 0 {
		t.Logf("waiting %v for the store's midnight", d.Round(time.Second))
		time.Sleep(d)
	}
	sell("T01", 5, "MILK", "RICE")
	drained(ctx, t, r.cashiers["T01"])
}

// sell has term's cashier sell n sales of skus, tenders in turn.
func (r *pagesRun) sell(t *testing.T, term string, n int, skus ...string) {
	t.Helper()
	for i := range n {
		if err := r.cashiers[term].Sale(skus, []string{"cash", "card", "qr"}[i%3]); err != nil {
			t.Fatal(err)
		}
	}
}

func drained(ctx context.Context, t *testing.T, c *Cashier) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.WaitDrained(wctx); err != nil {
		t.Fatal(err)
	}
}

// chartState is what the test reads of one drawn chart.
type chartState struct {
	Series int  `json:"series"` // drawn series (the x values aside)
	Points int  `json:"points"`
	Drawn  bool `json:"drawn"` // every series has its paths drawn
	Last   []any
}

const readCharts = `Object.fromEntries(Object.entries(window.posgateCharts).map(([k, u]) => [k, {
  series: u.series.length - 1, points: u.data[0].length,
  drawn: u.series.slice(1).every((s) => s._paths && s._paths.stroke),
  Last: u.data.slice(1).map((d) => d[d.length - 1]) }]))`

// checkDashboard checks the dashboard as the browser shows it: its language, T02's
// backlog unknown, and every chart drawn with as many points as the API answers. The page
// is made to refresh between two reads of the API that agree, so that it draws what they
// answer.
func (r *pagesRun) checkDashboard(ctx context.Context, t *testing.T, b *browser.Browser, lang string) {
	var pageLang string
	b.Eval(`document.documentElement.lang`, &pageLang)
	unknown := "unknown since"
	if strings.HasPrefix(lang, "zh") {
		unknown = "起未知"
		if pageLang != "zh-CN" || !strings.Contains(b.Text("#terminals thead"), "收银机") {
			t.Errorf("a browser in %s shows the dashboard in %q: %s", lang, pageLang, b.Text("#terminals thead"))
		}
	}
	b.WaitText("#terminals tbody", unknown)
	if row := strings.ReplaceAll(b.Text("#terminals tbody"), "\t", " "); !strings.Contains(row, "v1") {
		t.Errorf("the tills' catalog versions are not shown: %s", row)
	}
	m := r.store.Manager()
	for attempt := 1; ; attempt++ {
		h1, err1 := m.History(ctx)
		s1, err2 := m.SalesChart(ctx, "")
		var before int
		b.Eval(`Number(document.body.dataset.drawn)`, &before)
		b.Eval(`(refresh(), 0)`, new(int))
		b.WaitDrawn(before + 1)
		var charts map[string]chartState
		if err := b.Eval(readCharts, &charts); err != nil {
			t.Fatal(err)
		}
		h2, err3 := m.History(ctx)
		s2, err4 := m.SalesChart(ctx, "")
		if err := firstErr(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
		if len(h1.Times) != len(h2.Times) || len(s1.Minutes) != len(s2.Minutes) {
			if attempt < 5 {
				continue // a sample or a minute came between the reads
			}
			t.Fatalf("the API's answers kept changing: %d/%d samples, %d/%d minutes", len(h1.Times), len(h2.Times),
				len(s1.Minutes), len(s2.Minutes))
		}
		r.checkCharts(t, charts, h2, s2)
		// The minutes add up to the ledger's day.
		tot, err := m.Totals(ctx, s2.BusinessDate)
		if err != nil {
			t.Fatal(err)
		}
		var sales int64
		var takings money.Fen
		for _, mi := range s2.Minutes {
			sales, takings = sales+mi.Sales, takings+mi.Takings
		}
		if sales != tot.Store.Sales || takings != tot.Store.Amount || sales == 0 {
			t.Errorf("the sales chart of %s adds up to %d sales, %s; the ledger's day %d, %s", s2.BusinessDate, sales, takings,
				tot.Store.Sales, tot.Store.Amount)
		}
		return
	}
}

func (r *pagesRun) checkCharts(t *testing.T, charts map[string]chartState, h client.HistoryAnswer, s client.SalesChart) {
	want := map[string][2]int{"sales": {2, len(s.Minutes)}, "takings": {2, len(s.Minutes)},
		"backlog": {len(h.Tills), len(h.Times)}, "oldest": {len(h.Tills), len(h.Times)},
		"mode": {1, len(h.Times)}, "acks": {2, len(h.Times)}}
	for name, w := range want {
		c, ok := charts[name]
		if !ok || c.Series != w[0] || c.Points != w[1] || !c.Drawn || w[1] < 2 {
			t.Errorf("chart %s: %+v, want %d series of %d points (at least 2), drawn", name, c, w[0], w[1])
		}
	}
	if len(h.Tills) != 2 || s.CompareDate == "" {
		t.Errorf("history of tills %+v, sales compared with %q: want T01 and T02, and the day before", h.Tills, s.CompareDate)
	}
	// T02 is offline: its last backlog is unknown (null), T01's known.
	for i, till := range h.Tills {
		last := charts["backlog"].Last[i]
		if till.Terminal == "T02" && last != nil || till.Terminal == "T01" && last == nil {
			t.Errorf("chart backlog: %s's last point is %v", till.Terminal, last)
		}
	}
}

// checkHQ checks the HQ page: the day reconciles with T02's oversell among its exceptions,
// and the drill-down lists the store's transactions of it, each matching.
func (r *pagesRun) checkHQ(t *testing.T, b *browser.Browser, lang, date string, txns int) {
	verdict, reconciles, tx := "Reconciles", "yes", "Transactions"
	if strings.HasPrefix(lang, "zh") {
		verdict, reconciles, tx = "对账一致", "是", "交易明细"
	}
	b.WaitText("#verdict", verdict)
	if row := b.Text("#stores tbody"); !strings.Contains(row, "S001") || !strings.Contains(row, date) || !strings.Contains(row, reconciles) {
		t.Errorf("%s: the stores' table: %s", lang, row)
	}
	if x := b.Text("#exceptions tbody"); !strings.Contains(x, "T02") || !strings.Contains(x, "TEA") {
		t.Errorf("%s: the exceptions do not list T02's oversell of tea: %s", lang, x)
	}
	b.Screenshot(filepath.Join(r.shots, "hq-"+lang[:5]+".png"))
	b.WaitText("#stores tbody", tx)
	b.Click(`#stores tbody button[data-store="S001"]`)
	b.WaitText("#txns-title", date)
	var rows, matching int
	b.Eval(`document.querySelectorAll("#txns tbody tr").length`, &rows)
	b.Eval(`[...document.querySelectorAll("#txns tbody td.good")].length`, &matching)
	if rows != txns || matching != txns {
		t.Errorf("%s: the drill-down lists %d transactions, %d matching; HQ holds %d", lang, rows, matching, txns)
	}
	if c := b.Text("#closes tbody"); !strings.Contains(c, "T01") || !strings.Contains(c, "T02") {
		t.Errorf("%s: the tills' day closes: %s", lang, c)
	}
	b.Screenshot(filepath.Join(r.shots, "hq-drill-"+lang[:5]+".png"))
	b.Click("#back")
	b.WaitText("#verdict", verdict)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// checkDeployMetrics scrapes the store-server, the uploader and serve, and checks that
// every metric deploy/'s alert rules and Grafana dashboard name is among what they export
// (a histogram's _bucket, _sum and _count by its name). The TLS certificates' expiry is
// exported only by a listener with a certificate (none here): for those two the metrics
// code must name them.
func (r *pagesRun) checkDeployMetrics(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, f := range []string{"deploy/prometheus/posgate-rules.yml", "deploy/grafana/posgate.json"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		// Comments name families by prefix (posgate_store_*): only the rules and panels count.
		b = regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAll(b, nil)
		for _, m := range regexp.MustCompile(`posgate_[a-z0-9_]*[a-z0-9]`).FindAllString(string(b), -1) {
			named[m] = true
		}
	}
	exported := map[string]bool{}
	for _, src := range []struct{ url, token string }{{"http://" + r.store.API + "/metrics", r.store.Opts.Token},
		{r.uploader.MetricsURL, ""}, {r.hq.MetricsURL, ""}} {
		for _, f := range scrapeFamilies(t, src.url, src.token) {
			exported[f.GetName()] = true
			if f.GetType() == dto.MetricType_HISTOGRAM {
				for _, sfx := range []string{"_bucket", "_sum", "_count"} {
					exported[f.GetName()+sfx] = true
				}
			}
		}
	}
	tlsOnly := map[string]string{"posgate_store_tls_cert_expiry_timestamp_seconds": "store-server/metrics/metrics.go",
		"posgate_hq_tls_cert_expiry_timestamp_seconds": "hq-sync/serve.go"}
	if len(named) < 30 {
		t.Fatalf("deploy/ names %d metrics; it names more", len(named))
	}
	for m := range named {
		if exported[m] {
			continue
		}
		if src, ok := tlsOnly[m]; ok {
			b, err := os.ReadFile(filepath.Join(root, src))
			if err == nil && strings.Contains(string(b), "tls_cert_expiry_timestamp_seconds") {
				continue
			}
		}
		t.Errorf("deploy/ names %s, which no binary exports", m)
	}
}

func scrapeFamilies(t *testing.T, url, token string) []*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, res.StatusCode, err)
	}
	fams, err := metricstest.Parse(body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return fams
}

// checkHTMLReport has hq-sync reconcile write the day's report as an HTML file, in Chinese,
// and checks it says the day reconciles, lists T02's oversell and fetches nothing; it is
// photographed as a mail reader would show it.
func (r *pagesRun) checkHTMLReport(t *testing.T, date string) {
	out := filepath.Join(t.TempDir(), "reconcile.html")
	cmd := exec.Command(r.hqSync, "reconcile", "--db", r.hqDB, "--date", date, "--stores", r.hq.StoresFile,
		"--html", out, "--lang", "zh-CN")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reconcile --html: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, bad := range []string{"<script", "<link", "src=", "http://", "https://", "url("} {
		if strings.Contains(html, bad) {
			t.Errorf("the HTML report holds %q: it must load nothing", bad)
		}
	}
	if !strings.Contains(html, "对账一致") || !strings.Contains(html, "TEA") || !strings.Contains(html, "S001") {
		t.Errorf("the HTML report does not say the day reconciles with T02's oversell of tea:\n%.2000s", html)
	}
	b2 := browser.Start(t, "")
	b2.Open("file://" + out)
	b2.Screenshot(filepath.Join(r.shots, "reconcile-html-zh-CN.png"))
}
