package main

import (
	"archive/tar"
	"context"
	"database/sql"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/store-server/client"
)

// gapEnv is a store-server with its embedded broker on a plain Redis, and real agents.
type gapEnv struct {
	t        *testing.T
	store    *e2e.StoreServer
	cashiers map[string]*e2e.Cashier
}

func newGapEnv(t *testing.T, terminals ...string) *gapEnv {
	t.Helper()
	b := binaries(t)
	st := stack.Run(t, stack.Options{Redis: true})
	dir := t.TempDir()
	cat := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(cat, []byte(e2eCatalog), 0o600); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "store")
	os.MkdirAll(sdir, 0o700)
	ctx := context.Background()
	srv, err := e2e.StartStore(ctx, b.StoreServer, e2e.StoreOptions{Store: "S1", DataDir: sdir,
		RedisAddr: st.Redis[0].Addr(), Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	e := &gapEnv{t: t, store: srv, cashiers: map[string]*e2e.Cashier{}}
	var agents []*e2e.Agent
	t.Cleanup(func() {
		for _, a := range agents {
			a.Kill()
		}
		srv.Kill()
		if t.Failed() {
			t.Logf("store-server log: %s", tail(srv.Log))
		}
	})
	e.opening("opening")
	for _, term := range terminals {
		adir := filepath.Join(dir, "agent-"+term)
		os.MkdirAll(adir, 0o700)
		a, err := e2e.StartAgent(ctx, b.TerminalAgent, e2e.AgentOptions{Store: "S1", Terminal: term,
			Broker: srv.Broker, DataDir: adir})
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
		c, err := e2e.ReadyCashier(ctx, a.API, a.Token, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e.cashiers[term] = c
	}
	return e
}

// opening books the opening stock (idempotent by id: prefix tells one opening from another).
func (e *gapEnv) opening(prefix string) {
	for sku, q := range e2eOpening {
		req := client.AdjustRequest{ID: prefix + "-" + sku, SKU: sku, Delta: q, Reason: client.ReasonOpening}
		if _, err := e.store.Manager().Adjust(context.Background(), req); err != nil {
			e.t.Fatal(err)
		}
	}
}

// sell makes n sales at the terminal and waits until the store acknowledged them all.
func (e *gapEnv) sell(term string, n int) {
	e.t.Helper()
	c := e.cashiers[term]
	for i := range n {
		if err := c.Sale([]string{"MILK", "BREAD"}, []string{"cash", "card"}[i%2]); err != nil {
			e.t.Fatalf("%s sale: %v", term, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.WaitDrained(ctx); err != nil {
		e.t.Fatalf("%s after %d sales: %v", term, n, err)
	}
}

// lastSeqs returns each terminal's highest seq in the store's ledger (read from its file).
func (e *gapEnv) lastSeqs() map[string]int64 {
	e.t.Helper()
	out := must[client.TerminalsAnswer](e.t, "terminals")(e.store.Manager().Terminals(context.Background()))
	m := map[string]int64{}
	for _, r := range out.Terminals {
		m[r.Terminal] = r.LastSeq
	}
	return m
}

// gaps returns the seq gaps GET /v1/terminals shows, by terminal.
func (e *gapEnv) gaps() map[string][]client.SeqGap {
	e.t.Helper()
	out := must[client.TerminalsAnswer](e.t, "terminals")(e.store.Manager().Terminals(context.Background()))
	m := map[string][]client.SeqGap{}
	for _, r := range out.Terminals {
		if len(r.SeqGaps) > 0 {
			m[r.Terminal] = r.SeqGaps
		}
	}
	return m
}

// emptyDataDir removes the store's files from its (stopped) data directory, its log aside.
func (e *gapEnv) emptyDataDir() {
	e.t.Helper()
	dir := e.store.Opts.DataDir
	ents, err := os.ReadDir(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range ents {
		if p := filepath.Join(dir, d.Name()); p != e.store.Log {
			if err := os.RemoveAll(p); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// checkAgrees checks that stock and each terminal's counters agree between the ledger and
// Redis, and that every event each cashier was answered 2xx for since is in the ledger.
func (e *gapEnv) checkAgrees(since map[string]map[string]bool) {
	t := e.t
	t.Helper()
	ctx, m := context.Background(), e.store.Manager()
	stock := must[client.StockAnswer](t, "stock")(m.Stock(ctx, true))
	for _, r := range stock.Stock {
		if r.Redis == nil || *r.Redis != r.Ledger {
			t.Errorf("stock %s: ledger %d, redis %v", r.SKU, r.Ledger, biDeref(r.Redis))
		}
	}
	tot := must[client.TotalsAnswer](t, "totals")(m.Totals(ctx, today("Asia/Shanghai")))
	for _, r := range tot.Terminals {
		if r.Redis == nil || r.Redis.Sales != r.Ledger.Sales || r.Redis.Amount != r.Ledger.Amount || r.Ledger.Sales == 0 {
			t.Errorf("totals of %s: ledger %+v, redis %+v", r.Terminal, r.Ledger, biDeref(r.Redis))
		}
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(e.store.Opts.DataDir, "ledger.db")+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for term, c := range e.cashiers {
		for key := range c.OK() {
			if since[term][key] {
				continue
			}
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM events WHERE terminal || ':' || seq = ? AND status = 'accepted'`, key).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("event %s answered 2xx after the gap is not in the ledger", key)
			}
		}
	}
}

func (e *gapEnv) oks() map[string]map[string]bool {
	m := map[string]map[string]bool{}
	for term, c := range e.cashiers {
		m[term] = c.OK()
	}
	return m
}

// TestTillsResumeAfterRestore: a store restored from a backup (GET /v1/backup, unpacked into
// an empty data directory as docs/store-server.md says) hears again from a till that
// traded after the backup was made: the till's next sales are accepted and in the ledger,
// the gap of events the ledger lost is recorded and shown, and stock and counters agree
// between the ledger and Redis. A till that did not trade since goes on in order. Before,
// the till's every event was answered out_of_order for good and its sales stayed queued.
func TestTillsResumeAfterRestore(t *testing.T) {
	e := newGapEnv(t, "T01", "T02")
	e.sell("T01", 2)
	e.sell("T02", 1)
	atBackup := e.lastSeqs()

	backup := must[io.ReadCloser](t, "backup")(e.store.Manager().Backup(context.Background()))
	body, err := io.ReadAll(backup)
	backup.Close()
	if err != nil {
		t.Fatalf("backup: %v", err)
	}

	e.sell("T01", 3) // after the backup: lost with the store's disk
	lost := e.lastSeqs()["T01"]

	if err := e.store.Stop(); err != nil {
		t.Fatal(err)
	}
	e.emptyDataDir()
	tr := tar.NewReader(strings.NewReader(string(body)))
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if err := os.WriteFile(filepath.Join(e.store.Opts.DataDir, hd.Name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.lastSeqs()["T01"]; got != atBackup["T01"] {
		t.Fatalf("T01 in the restored ledger up to %d, want the backup's %d", got, atBackup["T01"])
	}
	before := e.oks()
	e.sell("T01", 2)
	e.sell("T02", 2)
	e.sell("T01", 1)

	gaps := e.gaps()
	if g := gaps["T01"]; len(g) != 1 || g[0].From != atBackup["T01"]+1 || g[0].To != lost || g[0].Reason != "restored" {
		t.Fatalf("T01's seq gaps: %+v, want %d..%d restored", g, atBackup["T01"]+1, lost)
	}
	if g := gaps["T02"]; len(g) != 0 {
		t.Fatalf("T02's seq gaps: %+v, want none (it did not trade after the backup)", g)
	}
	e.checkAgrees(before)
	if !strings.Contains(e.metrics(), "posgate_store_seq_gaps_total 1") {
		t.Errorf("metrics without posgate_store_seq_gaps_total 1")
	}
}

// TestTillsResumeOnAnEmptyDataDir: a store-server whose data directory was lost starts on an
// empty ledger; the tills' next events, far beyond seq 1, are accepted, each till's gap
// recorded as new_ledger.
func TestTillsResumeOnAnEmptyDataDir(t *testing.T) {
	e := newGapEnv(t, "T01", "T02")
	e.sell("T01", 2)
	e.sell("T02", 1)
	had := e.lastSeqs()
	if err := e.store.Stop(); err != nil {
		t.Fatal(err)
	}
	e.emptyDataDir()
	if err := e.store.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The opening booked again, under new ids: Redis, not emptied, remembers the first ones.
	e.opening("reopening")
	before := e.oks()
	e.sell("T01", 2)
	e.sell("T02", 1)
	gaps := e.gaps()
	for _, term := range []string{"T01", "T02"} {
		if g := gaps[term]; len(g) != 1 || g[0].From != 1 || g[0].To != had[term] || g[0].Reason != "new_ledger" {
			t.Fatalf("%s's seq gaps: %+v, want 1..%d new_ledger", term, g, had[term])
		}
	}
	e.checkAgrees(before)
}

func (e *gapEnv) metrics() string {
	req, _ := http.NewRequest("GET", "http://"+e.store.API+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.store.Opts.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
