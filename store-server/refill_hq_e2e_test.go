package main

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	agentclient "github.com/posgate/posgate/terminal-agent/client"
)

// restoreSecret is the secret startHQ gives store S1.
const restoreSecret = "s1-secret-for-the-restore-test"

// TestRefillFromHQWithNoBackup: three tills sell under a cashier load on a store with a
// Redis Sentinel trio and mosquitto, its uploader sending to hq-sync serve; MILK is counted,
// HQ never got TEA's opening stock, and T03, cut off, sold TEA beyond its stock: an oversell
// open at HQ. The store-server is SIGKILLed and its data directory destroyed with no backup
// while the tills go on selling. `store-server restore --from-hq` refills the empty ledger
// (a second run is refused: ledger_not_empty), the store starts again and its tills'
// catch-up fills in what HQ did not hold. The restored store lists the oversell open, as
// HQ held it, and its manager's resolution reaches HQ. Within a minute the ledger holds
// every 2xx event of every till exactly once, each sale and refund with the till's flow
// number; till = ledger = Redis per terminal and day; no seq gap; HQ = ledger row by row;
// stock is what the moves prove, and unknown (HQ's history lacks an adjustment) until
// counted.
func TestRefillFromHQWithNoBackup(t *testing.T) {
	t.Parallel() // mostly a cashier load's waiting: it runs beside the other long restores
	e := newEnv(t, "Asia/Shanghai", []string{"T01", "T02", "T03"}, "T03")
	dir := e.store.Opts.DataDir
	ctx := context.Background()
	m := e.store.Manager()
	counted := int64(1990)
	if _, err := m.Count(ctx, client.CountRequest{ID: "count-MILK", SKU: "MILK", Counted: &counted}); err != nil {
		t.Fatal(err)
	}
	hq := startHQ(t, binaries(t), dir)
	sellTEAOffline(t, e, "T03", 25) // 20 in stock: 5 short
	load, stop := context.WithCancel(ctx)
	defer stop()
	wg := e.load(load)
	time.Sleep(12 * time.Second)
	waitHQMoves(t, hq.db, 5, 20*time.Second) // 4 openings, a count
	over := waitHQOversell(t, hq.db, 20*time.Second)
	// An adjustment HQ never got (sent by no uploader before the disk went): TEA's opening.
	hqdb, err := sql.Open("sqlite3", "file:"+hq.db+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hqdb.Exec(`DELETE FROM stock_moves WHERE store = 'S1' AND id = 'opening-TEA'`); err != nil {
		t.Fatal(err)
	}
	hqdb.Close()

	hq.up.Kill()
	e.store.Kill()
	if err := os.RemoveAll(dir); err != nil { // the disk is gone, and there is no backup
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the tills sell on, offline
	restoreCmd := func() (string, error) {
		cmd := exec.Command(binaries(t).StoreServer, "restore", "--from-hq", hq.serve.BatchesURL(), "--store", "S1",
			"--data-dir", dir, "--tz", "Asia/Shanghai")
		cmd.Env = append(os.Environ(), "POSGATE_HQ_SECRET="+restoreSecret)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	began := time.Now()
	out, err := restoreCmd()
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	t.Logf("restore took %v:\n%s", time.Since(began).Round(time.Millisecond), tailString(out, 1500))
	if out, err := restoreCmd(); err == nil || !strings.Contains(out, "ledger_not_empty") {
		t.Fatalf("a second restore into the refilled ledger: %v\n%s", err, out)
	}
	restart := time.Now()
	if err := e.store.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	const note = "5 TEA sold offline by T03 with 20 on the shelf; counted"
	resolveRestoredOversell(t, m, over, note)
	sup, stopSup := context.WithCancel(ctx)
	supervised := make(chan struct{})
	go func() { defer close(supervised); hq.superviseUploader(sup) }()
	defer func() { stopSup(); <-supervised }()
	time.Sleep(5 * time.Second)
	stop()
	wg.Wait()
	within, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	for term, c := range e.cashiers {
		if _, err := c.WaitDrained(within); err != nil {
			t.Fatalf("%s not drained within a minute of the restart: %v", term, err)
		}
	}
	t.Logf("every till drained %v after the restart", time.Since(restart).Round(100*time.Millisecond))
	e.verify()
	dirs := map[string]string{}
	for term, a := range e.agents {
		dirs[term] = a.Opts.DataDir
	}
	n := checkTillFlows(t, dir, dirs)
	terms, err := m.Terminals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range terms.Terminals {
		if len(r.SeqGaps) > 0 {
			t.Errorf("%s: seq gaps %+v, want none", r.Terminal, r.SeqGaps)
		}
	}
	hq.waitUploaded(e.store, time.Minute)
	t.Logf("%d sales and refunds carry the till's flow number", n)
	waitHQResolved(t, hq.db, over, note, 30*time.Second)
	// Every row, exception, flow exception and stock adjustment of the refilled ledger is at
	// HQ as the ledger holds it, and HQ holds none the ledger lacks: those HQ gave back and
	// those booked since.
	rep := e2e.Report{OK: true}
	vctx, vdone := context.WithTimeout(ctx, 30*time.Second)
	defer vdone()
	e2e.VerifyHQ(vctx, e.store, hq.serve, &rep)
	if text := rep.String(); !rep.OK || strings.Contains(text, "ok   rows: 0 ") || strings.Contains(text, "ok   exceptions: 0 ") {
		t.Errorf("the refilled ledger and HQ (its rows and exceptions, the oversells among them):\n%s", rep)
	} else {
		t.Logf("the refilled ledger and HQ:\n%s", rep)
	}
	checkRefilledStock(t, m)
}

// hqOversell is an oversell exception as HQ holds it.
type hqOversell struct {
	terminal, sku string
	seq, short    int64
}

// sellTEAOffline cuts term off the store, sells n TEA there (the till sells offline) and
// joins it again: the store books the sale as paid once the till syncs, an oversell
// beyond TEA's stock.
func sellTEAOffline(t *testing.T, e *env, term string, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.cashiers[term]
	e.proxies[term].Cut()
	defer e.proxies[term].Restore()
	for st, _ := c.Status(); st.Online; st, _ = c.Status() {
		if ctx.Err() != nil {
			t.Fatalf("%s never went offline", term)
		}
		time.Sleep(50 * time.Millisecond)
	}
	api := c.Client()
	open, err := api.OpenSale(ctx, agentclient.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.AddLine(ctx, agentclient.NewKey(), open.Sale.ID, agentclient.AddLineRequest{SKU: "TEA", Qty: n}); err != nil {
		t.Fatal(err)
	}
	s, err := api.Sale(ctx, open.Sale.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Pay(ctx, agentclient.NewKey(), open.Sale.ID, agentclient.PayRequest{Method: wire.MethodCard,
		Amount: s.Sale.Total.String(), Reference: "REF-TEA"}); err != nil {
		t.Fatalf("%s's offline sale of %d TEA: %v", term, n, err)
	}
}

// waitHQOversell waits until HQ holds an open oversell exception of S1's TEA and returns
// the first (a till still offline as the load starts may oversell more).
func waitHQOversell(t *testing.T, path string, within time.Duration) hqOversell {
	t.Helper()
	db := openRO(t, path)
	defer db.Close()
	var o hqOversell
	var err error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		err = db.QueryRow(`SELECT terminal, seq, sku, qty_short FROM exceptions WHERE store = 'S1' AND kind = 'oversell'
			AND sku = 'TEA' AND NOT withdrawn AND NOT resolved ORDER BY terminal, seq LIMIT 1`).Scan(&o.terminal, &o.seq, &o.sku, &o.short)
		if err == nil {
			return o
		}
	}
	t.Fatalf("HQ holds no open oversell of TEA within %v: %v", within, err)
	return o
}

// resolveRestoredOversell checks that the refilled store lists the oversell HQ held, open as
// HQ held it, and resolves it with note.
func resolveRestoredOversell(t *testing.T, m *client.Client, o hqOversell, note string) {
	t.Helper()
	ctx := context.Background()
	open, err := m.Oversells(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range open.Oversells {
		found = found || x.Terminal == o.terminal && x.Seq == o.seq && x.SKU == o.sku && x.Short == o.short && !x.Resolved
	}
	if !found {
		t.Fatalf("the refilled store's open oversells %+v lack HQ's %+v", open.Oversells, o)
	}
	r, err := m.ResolveOversell(ctx, client.ResolveOversellRequest{Terminal: o.terminal, Seq: o.seq, SKU: o.sku, Note: note})
	if err != nil || !r.Applied {
		t.Fatalf("resolve the restored oversell: %+v, %v", r, err)
	}
}

// waitHQResolved waits until HQ holds the oversell resolved with note, the refilled store's
// resolution.
func waitHQResolved(t *testing.T, path string, o hqOversell, note string, within time.Duration) {
	t.Helper()
	db := openRO(t, path)
	defer db.Close()
	var resolved bool
	var got string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		err := db.QueryRow(`SELECT resolved, resolution FROM exceptions WHERE store = 'S1' AND kind = 'oversell'
			AND terminal = ? AND seq = ? AND sku = ?`, o.terminal, o.seq, o.sku).Scan(&resolved, &got)
		if err == nil && resolved && got == note {
			return
		}
	}
	t.Fatalf("HQ holds %+v resolved %v with %q within %v, want the store's resolution %q", o, resolved, got, within, note)
}

// checkRefilledStock checks that stock is what the moves prove, that every SKU is unknown
// (HQ lacked an adjustment: the history is incomplete), and that a count makes a SKU known.
func checkRefilledStock(t *testing.T, m *client.Client) {
	t.Helper()
	ctx := context.Background()
	st, err := m.Stock(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Stock {
		if s.Proven == nil || *s.Proven != s.Ledger {
			t.Errorf("%s: ledger %d, proven from the moves %v", s.SKU, s.Ledger, s.Proven)
		}
		if s.Unknown != "incomplete" {
			t.Errorf("%s: unknown %q, want incomplete (HQ lacked TEA's opening)", s.SKU, s.Unknown)
		}
	}
	if len(st.Stock) != 4 {
		t.Errorf("stock of %d SKUs, want 4", len(st.Stock))
	}
	twenty := int64(20)
	if _, err := m.Count(ctx, client.CountRequest{ID: "count-TEA", SKU: "TEA", Counted: &twenty}); err != nil {
		t.Fatal(err)
	}
	if st, err = m.Stock(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Stock {
		if (s.SKU == "TEA") != (s.Unknown == "") {
			t.Errorf("%s after TEA's count: %+v", s.SKU, s)
		}
	}
}

// waitHQMoves waits until HQ holds n stock moves of S1.
func waitHQMoves(t *testing.T, path string, n int, within time.Duration) {
	t.Helper()
	var got int
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		db, err := sql.Open("sqlite3", "file:"+filepath.Clean(path)+"?mode=ro&_busy_timeout=5000")
		if err != nil {
			t.Fatal(err)
		}
		err = db.QueryRow(`SELECT count(*) FROM stock_moves WHERE store = 'S1'`).Scan(&got)
		db.Close()
		if err == nil && got >= n {
			return
		}
	}
	t.Fatalf("HQ holds %d stock moves, want %d", got, n)
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
