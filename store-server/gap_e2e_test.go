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
	agents   map[string]*e2e.Agent
	start    time.Time // before the store started (businessDays)
}

func newGapEnv(t *testing.T, terminals ...string) *gapEnv {
	t.Helper()
	start := time.Now()
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
	e := &gapEnv{t: t, store: srv, cashiers: map[string]*e2e.Cashier{}, agents: map[string]*e2e.Agent{}, start: start}
	t.Cleanup(func() {
		for _, a := range e.agents {
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
		e.agents[term] = a
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
// Redis, on every business date of the run, and that every event each cashier was answered
// 2xx for since is in the ledger.
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
	for _, date := range businessDays(e.store.Opts.TZ, e.start) {
		tot := must[client.TotalsAnswer](t, "totals")(m.Totals(ctx, date))
		for _, r := range tot.Terminals {
			if r.Redis == nil || r.Redis.Sales != r.Ledger.Sales || r.Redis.Amount != r.Ledger.Amount || r.Ledger.Sales == 0 {
				t.Errorf("totals of %s on %s: ledger %+v, redis %+v", r.Terminal, date, r.Ledger, biDeref(r.Redis))
			}
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

// restoreBackup stops the store, empties its data directory and unpacks a backup (GET
// /v1/backup) into it, as docs/store-server.md says; the store is not started again.
func (e *gapEnv) restoreBackup(body []byte) {
	e.t.Helper()
	if err := e.store.Stop(); err != nil {
		e.t.Fatal(err)
	}
	e.emptyDataDir()
	unpackBackup(e.t, body, e.store.Opts.DataDir)
}

// unpackBackup writes the files of a backup's tar into dir.
func unpackBackup(t *testing.T, body []byte, dir string) {
	t.Helper()
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
		if err := os.WriteFile(filepath.Join(dir, hd.Name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// backup takes a backup through GET /v1/backup.
func backupOf(t *testing.T, s *e2e.StoreServer) []byte {
	t.Helper()
	rc := must[io.ReadCloser](t, "backup")(s.Manager().Backup(context.Background()))
	defer rc.Close()
	body, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	return body
}

// TestTillsCatchUpAfterRestore: a store restored from a backup hears again from a till that
// traded after the backup was made: the store asks the till for the events the backup
// lacks, the till replays them, and the ledger holds every event the till was answered 2xx
// for, with no gap; stock and counters agree between the ledger and Redis. A till that did
// not trade since goes on in order.
func TestTillsCatchUpAfterRestore(t *testing.T) {
	e := newGapEnv(t, "T01", "T02")
	e.sell("T01", 2)
	e.sell("T02", 1)
	atBackup := e.lastSeqs()
	body := backupOf(t, e.store)
	e.sell("T01", 3) // after the backup: lost with the store's disk
	lost := e.lastSeqs()["T01"]

	e.restoreBackup(body)
	if err := e.store.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.lastSeqs()["T01"]; got != atBackup["T01"] {
		t.Fatalf("T01 in the restored ledger up to %d, want the backup's %d", got, atBackup["T01"])
	}
	e.sell("T01", 2)
	e.sell("T02", 2)
	if got := e.lastSeqs()["T01"]; got <= lost {
		t.Fatalf("T01 in the ledger up to %d, want beyond %d", got, lost)
	}
	if gaps := e.gaps(); len(gaps) != 0 {
		t.Fatalf("seq gaps %+v, want none", gaps)
	}
	e.checkAgrees(nil)
	e.checkFlows()
	if m := e.metrics(); !strings.Contains(m, "posgate_store_seq_gaps_total 0") {
		t.Errorf("metrics without posgate_store_seq_gaps_total 0")
	}
}

// TestTillsCatchUpOnAnEmptyDataDir: a store-server whose data directory was lost starts on
// an empty ledger; each till's next event, far beyond seq 1, makes the store ask for all of
// its events, and the ledger holds them all again, with no gap.
func TestTillsCatchUpOnAnEmptyDataDir(t *testing.T) {
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
	e.sell("T01", 2)
	e.sell("T02", 1)
	if gaps := e.gaps(); len(gaps) != 0 {
		t.Fatalf("seq gaps %+v, want none", gaps)
	}
	seqs := e.lastSeqs()
	if seqs["T01"] <= had["T01"] || seqs["T02"] <= had["T02"] {
		t.Fatalf("ledger's last seqs %v, want beyond %v", seqs, had)
	}
	e.checkAgrees(nil) // every event answered 2xx, before the loss too
	e.checkFlows()
}

// TestPrunedTillLeavesAGap: a till that pruned the events the restored ledger lacks (its
// retention passed) cannot send them again: its next event says so, the store takes it, and
// the gap is recorded as pruned, shown, and counted.
func TestPrunedTillLeavesAGap(t *testing.T) {
	e := newGapEnv(t, "T01", "T02")
	e.sell("T01", 2)
	atBackup := e.lastSeqs()
	body := backupOf(t, e.store)
	e.sell("T01", 3)
	lost := e.lastSeqs()["T01"]
	e.restoreBackup(body)

	// T01 starts again with a retention that has passed for every acked event: it prunes
	// them before the store is back.
	a := e.agents["T01"]
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	a.Args = append(a.Args, "--retention", "1ms", "--retention-max", "1ms", "--log-level", "info")
	if err := a.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitLog(a.Log, "pruned acked events")
	if err := e.store.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := e.oks()
	e.sell("T01", 2)
	g := e.gaps()["T01"]
	if len(g) != 1 || g[0].From != atBackup["T01"]+1 || g[0].To != lost || g[0].Reason != "pruned" {
		t.Fatalf("T01's seq gaps: %+v, want %d..%d pruned", g, atBackup["T01"]+1, lost)
	}
	e.checkAgrees(before)
	if !strings.Contains(e.metrics(), "posgate_store_seq_gaps_total 1") {
		t.Errorf("metrics without posgate_store_seq_gaps_total 1")
	}
}

// waitLog waits until the log at path says what.
func (e *gapEnv) waitLog(path, what string) {
	e.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), what) {
			return
		}
	}
	e.t.Fatalf("%s never says %q", path, what)
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

// checkFlows checks that every sale and refund each till holds acknowledged carries the flow
// number the ledger holds for it (the one its receipt printed), and that the ledger holds no
// flow number twice in a day.
func (e *gapEnv) checkFlows() {
	e.t.Helper()
	checkTillFlows(e.t, e.store.Opts.DataDir, e.agentDirs())
}

func (e *gapEnv) agentDirs() map[string]string {
	m := map[string]string{}
	for term, a := range e.agents {
		m[term] = a.Opts.DataDir
	}
	return m
}
