package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	sclient "github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/terminal-agent/client"
)

// TestRestoredTillReconciles: a till's outbox is restored from a backup taken earlier in the
// day (the device re-imaged) while the store's ledger keeps what the till sent since. The
// restored till numbers its next events with seqs the ledger holds with other content: the
// store answers them conflict and parks them, the till parks them too and keeps selling, the
// uploader sends them to HQ as parked exceptions, and HQ's reconciliation of the day shows
// the totals difference together with the parked sales that explain it. Every sale the till
// made is in the ledger or parked.
func TestRestoredTillReconciles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bins, st, srv, sdir := startE2EStore(ctx, t, stack.Options{Redis: true, MQTT: true}, dir,
		"sku,name,price\nMILK,Milk 1L,12.50\nBREAD,Bread,8.99\nEGGS,Eggs x10,15.90\n")
	// Live limits no cashier of this test reaches: every sale completes.
	if err := srv.Call(ctx, "PUT", "/v1/limits", "application/json", strings.NewReader(
		`{"window_ms":1000,"store":1000,"terminal":1000,"scan":1000,"pay":1000,"refund":1000}`), nil); err != nil {
		t.Fatal(err)
	}
	const term = "T01"
	adir := filepath.Join(dir, "agent-"+term)
	os.MkdirAll(adir, 0o700)
	agent, err := e2e.StartAgent(ctx, bins.TerminalAgent, e2e.AgentOptions{Store: e2eStore, Terminal: term,
		Broker: st.MQTTURL(), DataDir: adir, TZ: e2eTZ})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Kill() })
	c := agent.Cashier()
	wait := func(what string, f func(context.Context) error) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := f(wctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	drained := func(ctx context.Context) error { _, err := c.WaitDrained(ctx); return err }
	wait("catalog", c.WaitCatalog)
	loc, _ := wire.LoadLocation(e2eTZ)
	date := time.Now().In(loc).Format(wire.BusinessDate)
	baskets := [][]string{{"MILK"}, {"BREAD", "EGGS"}, {"EGGS"}, {"MILK", "BREAD"}}
	sell := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if err := c.Sale(baskets[i%len(baskets)], []string{"cash", "card", "qr"}[i%3]); err != nil {
				t.Fatal(err)
			}
		}
	}
	ledgerTotals := func() saleTotals {
		t.Helper()
		var tot struct {
			Terminals []sclient.TerminalTotals `json:"terminals"`
		}
		if err := srv.Call(ctx, "GET", "/v1/totals?date="+date, "", nil, &tot); err != nil {
			t.Fatal(err)
		}
		for _, x := range tot.Terminals {
			if x.Terminal == term {
				return saleTotals{Sales: x.Ledger.Sales, Amount: x.Ledger.Amount}
			}
		}
		return saleTotals{}
	}

	ldb, err := sqlitedb.OpenQueryOnly(ctx, filepath.Join(sdir, "ledger.db"), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ldb.Close()
	lastSeq := func() int64 {
		t.Helper()
		var n int64
		if err := ldb.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM events WHERE terminal = ?`, term).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The morning: sales the backup will hold, all acknowledged by the store.
	sell(0, 3)
	wait("drain the morning", drained)
	atBackup, backupSeq := ledgerTotals(), lastSeq()
	if err := agent.Stop(); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "backup")
	if err := agent.BackupOutbox(backup); err != nil {
		t.Fatal(err)
	}
	if err := agent.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// Sales after the backup: the ledger keeps them, the restored till forgets them.
	sell(3, 3)
	wait("drain the sales the till forgets", drained)
	beforeRestore, storeSeq := ledgerTotals(), lastSeq()
	forgotten := saleTotals{Sales: beforeRestore.Sales - atBackup.Sales, Amount: beforeRestore.Amount - atBackup.Amount}
	if err := agent.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := agent.RestoreOutbox(backup); err != nil {
		t.Fatal(err)
	}
	if err := agent.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The restored till sells on: its events up to storeSeq reuse seqs the ledger holds.
	sell(6, 6)
	wait("drain after the restore", drained)
	if now := time.Now().In(loc).Format(wire.BusinessDate); now != date {
		t.Skipf("the business day changed during the test (%s → %s); run it again", date, now)
	}
	if st, body, err := c.Call("POST", "/v1/day-close", fmt.Sprintf(`{"business_date":%q}`, date)); err != nil || st != 200 {
		t.Fatalf("day close: %d %s %v", st, body, err)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	status, err := c.WaitDrained(dctx)
	cancel()
	if err != nil {
		t.Fatalf("drain the day close: %v", err)
	}
	if n := len(c.Sales()); n != 12 {
		t.Fatalf("the till completed %d sales, want 12: %v", n, c.Counts())
	}

	// Every seq the restored till reused is parked, at the store and at the till, whatever
	// its kind; the sales among them with their content.
	var want []string
	for seq := backupSeq + 1; seq <= storeSeq; seq++ {
		want = append(want, wire.Key(term, seq))
	}
	var storeParked struct {
		Parked []sclient.Parked `json:"parked"`
	}
	if err := srv.Call(ctx, "GET", "/v1/parked?all=1", "", nil, &storeParked); err != nil {
		t.Fatal(err)
	}
	var storeKeys, parkedSaleKeys []string
	for _, p := range storeParked.Parked {
		storeKeys = append(storeKeys, wire.Key(p.Terminal, p.Seq))
		if p.Code != ledger.CodeIdempotencyConflict || p.BusinessDate != date || p.Resolved {
			t.Errorf("store's parked %s: %+v, want an open idempotency_conflict of %s", wire.Key(p.Terminal, p.Seq), p, date)
		}
		if p.Kind == wire.KindSale {
			parkedSaleKeys = append(parkedSaleKeys, wire.Key(p.Terminal, p.Seq))
		}
	}
	slices.SortFunc(storeKeys, byKey)
	slices.SortFunc(parkedSaleKeys, byKey)
	if !slices.Equal(storeKeys, want) || len(parkedSaleKeys) == 0 {
		t.Errorf("the store parked %v (sales %v), want the reused seqs %v, sales among them", storeKeys, parkedSaleKeys, want)
	}
	_, body, err := c.Call("GET", "/v1/parked", "")
	var tillParked client.ParkedAnswer
	if err != nil || json.Unmarshal(body, &tillParked) != nil {
		t.Fatalf("the till's parked events: %v %s", err, body)
	}
	var tillKeys []string
	for _, p := range tillParked.Parked {
		tillKeys = append(tillKeys, p.Key)
		if p.Code != ledger.CodeIdempotencyConflict {
			t.Errorf("the till parked %s with %q, want idempotency_conflict", p.Key, p.Code)
		}
	}
	slices.SortFunc(tillKeys, byKey)
	if !slices.Equal(tillKeys, want) || status.Parked != int64(len(want)) {
		t.Errorf("the till parked %v (status: %d), want the reused seqs %v", tillKeys, status.Parked, want)
	}

	// The ledger's own record: each parked sale's content, and every sale it holds.
	parked := map[string]money.Fen{} // parked sale key → its total
	var parkedSum money.Fen
	where := map[string]string{} // sale id → "ledger" or its parked key
	rows, err := ldb.QueryContext(ctx, `SELECT seq, payload FROM parked WHERE terminal = ? AND kind = 'sale'`, term)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var seq int64
		var payload []byte
		var p wire.SalePayload
		if err := rows.Scan(&seq, &payload); err != nil || json.Unmarshal(payload, &p) != nil {
			t.Fatalf("parked sale %d: %v %s", seq, err, payload)
		}
		parked[wire.Key(term, seq)], where[p.SaleID] = p.Total, wire.Key(term, seq)
		parkedSum += p.Total
	}
	rows.Close()
	rows, err = ldb.QueryContext(ctx, `SELECT payload FROM events WHERE terminal = ? AND kind = 'sale' AND status = 'accepted'`, term)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var payload []byte
		var p wire.SalePayload
		if err := rows.Scan(&payload); err != nil || json.Unmarshal(payload, &p) != nil {
			t.Fatalf("a ledger sale: %v %s", err, payload)
		}
		if w, ok := where[p.SaleID]; ok {
			t.Errorf("sale %s is in the ledger and parked (%s)", p.SaleID, w)
		}
		where[p.SaleID] = "ledger"
	}
	rows.Close()
	for _, id := range c.Sales() {
		if where[id] == "" {
			t.Errorf("sale %s the till completed is neither in the ledger nor parked", id)
		}
	}
	if got := slices.SortedFunc(maps.Keys(parked), byKey); !slices.Equal(got, parkedSaleKeys) {
		t.Errorf("the ledger's parked sales %v, the store's API lists %v", got, parkedSaleKeys)
	}
	// The sales after the reused seqs flow: the ledger holds them.
	end := ledgerTotals()
	if flowed := end.Sales - beforeRestore.Sales; flowed != 6-int64(len(parked)) || flowed == 0 {
		t.Errorf("the ledger took %d of the restored till's 6 sales, %d parked", flowed, len(parked))
	}

	// HQ: upload, declare the day the next morning, reconcile.
	stores := filepath.Join(dir, "stores.json")
	os.WriteFile(stores, []byte(fmt.Sprintf(`[{"store":%q,"secret":%q}]`, e2eStore, e2eSecret)), 0o600)
	db := filepath.Join(dir, "hq.db")
	url, _ := startServe(t, db, stores)
	state := filepath.Join(dir, "upload.db")
	t.Setenv("POSGATE_HQ_SECRET", e2eSecret)
	if code, _, errs := runCmd(ctx, "upload", "--once", "--store", e2eStore, "--ledger", filepath.Join(sdir, "ledger.db"),
		"--state", state, "--hq-url", url, "--tz", e2eTZ, "--log-level", "warn"); code != 0 {
		t.Fatalf("upload exited %d: %s", code, errs)
	}
	u, closeNext := declareNextMorning(ctx, t, db, filepath.Join(sdir, "ledger.db"), state, loc)
	if us, err := u.Status(ctx); err != nil || us.Backlog != 0 || us.Pending != "" || us.Declared[date] == 0 {
		t.Errorf("uploader status %+v (%v), want everything sent and %s declared", us, err, date)
	}
	closeNext()
	code, out, errs := runCmd(ctx, "reconcile", "--db", db, "--date", date, "--format", "json")
	var rep reconcile.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("reconcile output: %v\n%s\n%s", err, out, errs)
	}
	_, table, _ := runCmd(ctx, "reconcile", "--db", db, "--date", date)
	t.Logf("reconcile %s (exit %d):\n%s", date, code, table)
	// The day does not reconcile: the till's close counts the parked sales, which the ledger
	// does not hold, and not the sales it forgot, which the ledger holds; HQ has the ledger's.
	if code != 1 || rep.OK() || len(rep.Txns) != 0 || len(rep.Missing) != 0 || rep.DayCloses != 1 {
		t.Errorf("reconcile exit %d, report %+v; want only a totals difference", code, rep)
	}
	var all *reconcile.TotalsDiff
	for i := range rep.Totals {
		if x := &rep.Totals[i]; x.Terminal == term && x.Method == reconcile.MethodAll {
			all = x
		}
	}
	switch {
	case all == nil || all.Declared == nil || all.Ledger == nil:
		t.Errorf("no difference of %s's day totals in %+v", term, rep.Totals)
	case all.Declared.SaleAmount-all.Ledger.SaleAmount != parkedSum-forgotten.Amount ||
		all.Declared.SaleCount-all.Ledger.SaleCount != int64(len(parked))-forgotten.Sales ||
		all.HQ.SaleAmount != all.Ledger.SaleAmount || all.Ledger.SaleAmount != end.Amount:
		t.Errorf("%s declared %+v, ledger %+v, HQ %+v: want the declared less the ledger's = the parked sales "+
			"(%d, %s) less the ones the till forgot (%d, %s)", term, *all.Declared, *all.Ledger, all.HQ,
			len(parked), parkedSum, forgotten.Sales, forgotten.Amount)
	}
	// And it lists the parked events, each sale with its amount: what explains the difference.
	var hqKeys []string
	for _, x := range rep.Exceptions {
		key := wire.Key(x.Terminal, x.Seq)
		if x.Kind != hqwire.ExceptionParked || x.Code != ledger.CodeIdempotencyConflict || x.Resolved {
			t.Errorf("exception %s: %+v, want an open parked idempotency_conflict", key, x)
			continue
		}
		hqKeys = append(hqKeys, key)
		if total, ok := parked[key]; ok && !strings.Contains(x.Detail, " of "+total.String()+" (") {
			t.Errorf("parked sale %s: detail %q does not name its amount %s", key, x.Detail, total)
		}
	}
	slices.SortFunc(hqKeys, byKey)
	if !slices.Equal(hqKeys, want) {
		t.Errorf("HQ's parked exceptions %v, want %v", hqKeys, want)
	}
}

// byKey orders event keys of one terminal by seq.
func byKey(a, b string) int {
	sa, _ := strconv.ParseInt(a[strings.LastIndexByte(a, ':')+1:], 10, 64)
	sb, _ := strconv.ParseInt(b[strings.LastIndexByte(b, ':')+1:], 10, 64)
	return cmp.Or(strings.Compare(a[:strings.LastIndexByte(a, ':')], b[:strings.LastIndexByte(b, ':')]), cmp.Compare(sa, sb))
}

// saleTotals are a terminal's sales in the ledger on one date.
type saleTotals struct {
	Sales  int64
	Amount money.Fen
}
