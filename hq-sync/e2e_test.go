package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sclient "github.com/posgate/posgate/store-server/client"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/hq-sync/upload"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
)

const (
	e2eStore  = "S1"
	e2eSecret = "s1-secret-for-the-e2e-test"
	e2eTZ     = "Asia/Shanghai"
)

func freePort(t *testing.T) string {
	t.Helper()
	addr, err := e2e.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// runCmd runs an hq-sync command in-process, as the binary would.
func runCmd(ctx context.Context, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// startServe runs "hq-sync serve" on db until the test ends and returns its batch URL and
// its metrics URL. A port found free can be taken by another test's process before serve
// binds it: serve is started again on other ports then.
func startServe(t *testing.T, db, stores string, extra ...string) (batches, metrics string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addr, maddr := freePort(t), freePort(t)
		ctx, cancel := context.WithCancel(context.Background())
		exited := make(chan string, 1)
		go func() {
			args := append([]string{"serve", "--listen", addr, "--metrics-listen", maddr, "--db", db,
				"--stores", stores, "--log-level", "warn"}, extra...)
			code, _, errs := runCmd(ctx, args...)
			if code != 0 {
				exited <- fmt.Sprintf("serve exited %d: %s", code, errs)
			}
			close(exited)
		}()
		wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
		listening := make(chan error, 1)
		go func() { listening <- e2e.WaitListening(wctx, addr) }()
		var msg string
		select {
		case err := <-listening:
			if err == nil {
				wcancel()
				t.Cleanup(func() {
					cancel()
					if msg, failed := <-exited; failed {
						t.Error(msg)
					}
				})
				scheme := "http://"
				if slices.Contains(extra, "--tls-cert") {
					scheme = "https://"
				}
				return scheme + addr + "/v1/batches", "http://" + maddr + "/metrics"
			}
			msg = err.Error()
		case msg = <-exited: // serve gave up before it listened
		}
		wcancel()
		cancel()
		if !strings.Contains(msg, "address already in use") || attempt == 3 {
			t.Fatalf("serve on %s: %s", addr, msg)
		}
	}
}

// TestChainReconciles runs agents → store-server → hq-sync upload → hq-sync serve →
// hq-sync reconcile, on SQLite and on PostgreSQL at HQ, and expects one identical report
// that reconciles the day exactly.
func TestChainReconciles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bins, st, srv, sdir := startE2EStore(ctx, t, stack.Options{Redis: true, MQTT: true, Postgres: true}, dir,
		"sku,name,price\nMILK,Milk 1L,12.50\nBREAD,Bread,8.99\nEGGS,Eggs x10,15.90\nTEA,Green tea,0.30\n")
	if err := srv.AllowOfflineRefunds(ctx); err != nil {
		t.Fatal(err)
	}
	cashiers := map[string]*e2e.Cashier{}
	for _, term := range []string{"T01", "T02"} {
		adir := filepath.Join(dir, "agent-"+term)
		os.MkdirAll(adir, 0o700)
		a, err := e2e.StartAgent(ctx, bins.TerminalAgent, e2e.AgentOptions{Store: e2eStore, Terminal: term,
			Broker: st.MQTTURL(), DataDir: adir, TZ: e2eTZ})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Kill() })
		c, err := e2e.ReadyCashier(ctx, a.API, a.Token, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Supervisor = &e2e.DutySupervisor
		cashiers[term] = c
	}
	// A short day of trading: mixed baskets and tenders, some refunds.
	loc, _ := wire.LoadLocation(e2eTZ)
	date := time.Now().In(loc).Format(wire.BusinessDate)
	var wg sync.WaitGroup
	for i, term := range []string{"T01", "T02"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cashiers[term]
			baskets := [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"TEA", "MILK"}}
			for n := i; n < i+30; n++ {
				if err := c.Sale(baskets[n%3], []string{"cash", "card", "qr"}[n%3]); err != nil {
					t.Error(err)
					return
				}
				if n%7 == 0 {
					c.RefundOne(n)
				}
			}
		}()
	}
	wg.Wait()
	// A shelf count finds no bread left (once every till has sent what it sold: a sale
	// decided offline under load arrives later); a till sells bread (3 loaves, the cashier's
	// quantity for BREAD) while the store-server is down: decided offline, the sale takes the
	// stock below zero, and the ledger flags an oversell that HQ's report lists.
	for _, c := range cashiers {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.WaitDrained(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Call(ctx, "POST", "/v1/stock/count", "application/json",
		strings.NewReader(`{"id":"count-bread","sku":"BREAD","counted":0}`), nil); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := cashiers["T02"].Sale([]string{"BREAD"}, "cash"); err != nil {
		t.Fatalf("an offline sale: %v", err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if now := time.Now().In(loc).Format(wire.BusinessDate); now != date {
		t.Skipf("the business day changed during the test (%s → %s); run it again", date, now)
	}
	// Each terminal closes its day; the close travels to the store like any event.
	for term, c := range cashiers {
		if st, body, err := c.Call("POST", "/v1/day-close", fmt.Sprintf(`{"business_date":%q}`, date)); err != nil || st != 200 {
			t.Fatalf("%s day close: %d %s %v", term, st, body, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := c.WaitDrained(wctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}

	stores := filepath.Join(dir, "stores.json")
	os.WriteFile(stores, []byte(fmt.Sprintf(`[{"store":%q,"secret":%q}]`, e2eStore, e2eSecret)), 0o600)
	engines := map[string]string{"sqlite": filepath.Join(dir, "hq.db"), "postgres": st.PostgresURL()}
	reports := map[string]reconcile.Report{}
	for name, db := range engines {
		url, metricsURL := startServe(t, db, stores)
		state := filepath.Join(dir, "upload-"+name+".db")
		t.Setenv("POSGATE_HQ_SECRET", e2eSecret)
		// The CLI sends every row; the day is not over yet, so it is not declared.
		code, _, errs := runCmd(ctx, "upload", "--once", "--store", e2eStore, "--ledger", filepath.Join(sdir, "ledger.db"),
			"--state", state, "--hq-url", url, "--tz", e2eTZ, "--log-level", "warn")
		if code != 0 {
			t.Fatalf("%s: upload exited %d: %s", name, code, errs)
		}
		if now := time.Now().In(loc).Format(wire.BusinessDate); now != date {
			// The upload may have run after the store's midnight and declared the day.
			t.Skipf("the business day changed during the test (%s → %s); run it again", date, now)
		}
		if body := get(t, metricsURL); !strings.Contains(body, `posgate_hq_batches_total{result="stored",store="`+e2eStore+`"}`) ||
			!strings.Contains(body, "posgate_hq_last_batch_timestamp_seconds{store=\""+e2eStore+"\"}") {
			t.Errorf("%s: serve's metrics do not count the upload:\n%s", name, body)
		}
		if code, out, _ := runCmd(ctx, "reconcile", "--db", db, "--date", date, "--format", "json"); code != 1 {
			t.Fatalf("%s: a day the store has not declared reconciled (exit %d): %s", name, code, out)
		}
		u, closeNext := declareNextMorning(ctx, t, db, filepath.Join(sdir, "ledger.db"), state, loc)
		// The status command reads the state the uploader holds; a second uploader may not.
		code, out, errs := runCmd(ctx, "upload", "--status", "--store", e2eStore, "--ledger", filepath.Join(sdir, "ledger.db"),
			"--state", state, "--tz", e2eTZ)
		var st sclient.UploadStatus
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
			t.Fatalf("%s: upload --status exited %d (%v): %s%s", name, code, err, out, errs)
		}
		if want, _ := u.Status(ctx); fmt.Sprint(st) != fmt.Sprint(want) || st.Backlog != 0 || st.Pending != "" || st.Declared[date] != 1 {
			t.Errorf("%s: upload --status %+v, the uploader's own %+v; want no backlog, nothing pending, %s declared", name, st, want, date)
		}
		if code, _, errs := runCmd(ctx, "upload", "--once", "--store", e2eStore, "--ledger", filepath.Join(sdir, "ledger.db"),
			"--state", state, "--hq-url", url, "--tz", e2eTZ, "--log-level", "warn"); code == 0 || !strings.Contains(errs, "in use") {
			t.Errorf("%s: a second uploader on a held state exited %d: %s", name, code, errs)
		}
		closeNext()
		code, out, errs = runCmd(ctx, "reconcile", "--db", db, "--date", date, "--format", "json")
		var rep reconcile.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: reconcile output: %v\n%s\n%s", name, err, out, errs)
		}
		if code != 0 || !rep.OK() {
			_, table, _ := runCmd(ctx, "reconcile", "--db", db, "--date", date)
			t.Errorf("%s: the day does not reconcile (exit %d):\n%s", name, code, table)
		}
		if rep.HQTxns == 0 || rep.HQTxns != rep.LedgerTxns || rep.DayCloses != 2 {
			t.Errorf("%s: report %+v", name, rep)
		}
		if x := rep.Exceptions; len(x) != 1 || x[0].Kind != hqwire.ExceptionOversell || x[0].SKU != "BREAD" ||
			x[0].Terminal != "T02" || x[0].QtyShort != 3 || x[0].Resolved || rep.OpenExceptions() != 1 {
			t.Errorf("%s: the report's exceptions %+v, want T02's open oversell of 3 loaves (the cashier's quantity for BREAD)", name, x)
		}
		reports[name] = rep
	}
	a, _ := json.Marshal(reports["sqlite"])
	b, _ := json.Marshal(reports["postgres"])
	if !bytes.Equal(a, b) {
		t.Errorf("SQLite and PostgreSQL reports differ:\n%s\n%s", a, b)
	}
	_, table, _ := runCmd(ctx, "reconcile", "--db", engines["sqlite"], "--date", date)
	t.Logf("reconcile %s:\n%s", date, table)
	// Every date's open exceptions, on both engines: the oversell, until a manager resolves it.
	for name, db := range engines {
		code, out, errs := runCmd(ctx, "reconcile", "--db", db, "--open", "--format", "json")
		var open reconcile.Open
		if err := json.Unmarshal([]byte(out), &open); err != nil || code != 1 || len(open.Exceptions) != 1 ||
			open.Exceptions[0].SKU != "BREAD" || open.Exceptions[0].BusinessDate != date {
			t.Errorf("%s: reconcile --open exited %d (%v): %s%s; want T02's oversell of bread of %s, exit 1",
				name, code, err, out, errs, date)
		}
	}

	// With serve's stores file: the store declared the day and it reconciles; a second store
	// in the file that HQ has nothing of (its upload stuck) makes the date fail.
	if code, out, errs := runCmd(ctx, "reconcile", "--db", engines["sqlite"], "--date", date, "--stores", stores); code != 0 {
		t.Errorf("reconcile with the stores file: exit %d\n%s%s", code, out, errs)
	}
	both := filepath.Join(dir, "stores2.json")
	os.WriteFile(both, []byte(fmt.Sprintf(`[{"store":%q,"secret":%q},{"store":"S_QUIET","secret":%q}]`, e2eStore, e2eSecret,
		e2eSecret)), 0o600)
	code, out, errs := runCmd(ctx, "reconcile", "--db", engines["sqlite"], "--date", date, "--stores", both, "--format", "json")
	var rep reconcile.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 1 || err != nil || rep.Counts[reconcile.NoStoreDay] != 1 {
		t.Errorf("a store HQ has nothing of: exit %d, %v\n%s%s", code, err, out, errs)
	}
	// A mistyped database path is a usage error, not an empty HQ that reconciles.
	missing := filepath.Join(dir, "no-such-hq.db")
	if code, _, errs := runCmd(ctx, "reconcile", "--db", missing, "--date", date); code != 2 {
		t.Errorf("reconcile of a missing database: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("reconcile created the missing database")
	}
}

// get returns the body of a GET that must answer 200.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// TestReconcileOpenFlags: --open conflicts only with flags given on its command line:
// POSGATE_HQ_STORES, which serve and reconcile share on an HQ host, does not stop it.
func TestReconcileOpenFlags(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(dir, "hq.db")
	st, err := openStorage(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	stores := filepath.Join(dir, "stores.json")
	if err := os.WriteFile(stores, []byte(`[{"store":"S1","secret":"s"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POSGATE_HQ_STORES", stores)
	if code, out, errs := runCmd(ctx, "reconcile", "--db", db, "--open"); code != 0 || !strings.Contains(out, "OPEN EXCEPTIONS (0)") {
		t.Errorf("--open with POSGATE_HQ_STORES set: exit %d: %s%s", code, out, errs)
	}
	for _, args := range [][]string{{"--date", "2026-11-29"}, {"--stores", stores}, {"--format", "csv"}} {
		if code, _, errs := runCmd(ctx, append([]string{"reconcile", "--db", db, "--open"}, args...)...); code != 2 ||
			!strings.Contains(errs, "--open lists every date's open exceptions") {
			t.Errorf("--open %v: exit %d: %s", args, code, errs)
		}
	}
}

// declareNextMorning has an uploader on state declare the store's day the next morning, to
// an HQ on db whose clock has moved on too (or it would refuse the request's timestamp). It
// returns the uploader, and what closes it and that HQ.
func declareNextMorning(ctx context.Context, t *testing.T, db, ledgerPath, state string, loc *time.Location) (*upload.Uploader, func()) {
	t.Helper()
	tomorrow := func() time.Time { return time.Now().Add(24 * time.Hour) }
	hqStore, err := openStorage(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	hqNext := httptest.NewServer(serve.New(hqStore, map[string][]byte{e2eStore: []byte(e2eSecret)}, serve.Options{Now: tomorrow}))
	u, err := upload.New(ctx, upload.Config{LedgerPath: ledgerPath, StatePath: state, Store: e2eStore,
		Location: loc, Secret: []byte(e2eSecret), HQURL: hqNext.URL + "/v1/batches", Now: tomorrow})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Once(ctx); err != nil {
		t.Fatalf("declaring the day: %v", err)
	}
	return u, func() { u.Close(); hqNext.Close(); hqStore.Close() }
}

// startE2EStore builds posgate's binaries, starts the stack o asks for and a store-server on
// it (data in dir/store) with the catalog catalogCSV, and books 500 of each of its SKUs as
// opening stock. It returns the binaries, the stack, the store-server and its data dir.
func startE2EStore(ctx context.Context, t *testing.T, o stack.Options, dir, catalogCSV string) (
	e2e.Binaries, *stack.Stack, *e2e.StoreServer, string) {
	t.Helper()
	stack.SkipShort(t) // before the build
	root, err := e2e.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := e2e.Build(ctx, root, t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	st := stack.Run(t, o)
	cat := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(cat, []byte(catalogCSV), 0o600); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "store")
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		t.Fatal(err)
	}
	srv, err := e2e.StartStore(ctx, bins.StoreServer, e2e.StoreOptions{Store: e2eStore, DataDir: sdir, TZ: e2eTZ,
		RedisAddr: st.Redis[0].Addr(), MQTTURL: st.MQTTURL(), Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Kill() })
	lines := strings.Split(strings.TrimSpace(catalogCSV), "\n")[1:]
	for _, line := range lines {
		sku, _, _ := strings.Cut(line, ",")
		body := fmt.Sprintf(`{"id":"open-%s","sku":%q,"delta":500,"reason":"opening"}`, sku, sku)
		if err := srv.Call(ctx, "POST", "/v1/stock/adjust", "application/json", strings.NewReader(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	return bins, st, srv, sdir
}
