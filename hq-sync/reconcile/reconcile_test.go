package reconcile

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

const date = storetest.D1

var (
	t0       = storetest.T0
	received = time.Date(2025, 3, 2, 1, 0, 0, 0, time.UTC) // HQ receives the day's upload
)

// MustOpenHQ opens a fresh HQ database (the real SQLite engine).
func MustOpenHQ(tb testing.TB) (*sqlite.Store, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "hq.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, path
}

// storeDay is one store's day as its uploader would send it: the rows, the terminals' day
// closes and the store's declaration.
type storeDay struct {
	store  string
	rows   []hqwire.Row // sales and refunds
	closes []hqwire.Row // day closes
	day    hqwire.StoreDay
}

// newStoreDay returns a store's clean day: terminals T1..Tn with sales (mixed methods, a
// split sale with change eating the cash) and a refund each, each terminal's day close of
// exactly those, and the store's declaration of them.
func newStoreDay(store string, terminals, sales int) *storeDay {
	sd := &storeDay{store: store}
	for t := 1; t <= terminals; t++ {
		term := fmt.Sprintf("T%d", t)
		rows := storetest.Sales(store, term, 1, sales, date, t0)
		split := storetest.Sale(store, term, int64(sales+1), date, t0.Add(time.Hour), 1000, wire.MethodCard)
		split.ByMethod = map[string]money.Fen{wire.MethodCash: 0, wire.MethodCard: 1000}
		rows = append(rows, split)
		rows = append(rows, storetest.Refund(store, term, int64(sales+2), date, t0.Add(2*time.Hour), 1,
			rows[0].Amount, wire.MethodQR))
		sd.rows = append(sd.rows, rows...)
		sd.closes = append(sd.closes, storetest.DayClose(store, term, int64(sales+3), date, t0.Add(12*time.Hour), rows))
	}
	sd.day = storetest.Day(date, 1, t0.Add(14*time.Hour), sd.rows)
	return sd
}

// dayCloseRow returns a terminal's day-close row declaring p.
func dayCloseRow(store, terminal string, seq int64, at time.Time, p *wire.DayClosePayload) hqwire.Row {
	js, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return hqwire.Row{Kind: hqwire.KindDayClose, Terminal: terminal, Seq: seq, BusinessDate: p.BusinessDate, At: at,
		Hash: wire.Hash(wire.KindDayClose, store, terminal, seq, at, js), Payload: js}
}

// put uploads rows and days as one batch received at at.
func put(tb testing.TB, st hqstore.Storage, store, id string, at time.Time, rows []hqwire.Row, days ...hqwire.StoreDay) {
	tb.Helper()
	b, hash := storetest.NewBatch(store, id, rows, days...)
	storetest.MustPut(tb, st, b, hash, at)
}

// upload sends the store's day: its rows and day closes, then (a second later) its
// declaration.
func (sd *storeDay) upload(tb testing.TB, st hqstore.Storage) {
	tb.Helper()
	put(tb, st, sd.store, "rows", received, append(append([]hqwire.Row{}, sd.rows...), sd.closes...))
	put(tb, st, sd.store, "day", received.Add(time.Second), nil, sd.day)
}

// MustRun reconciles the date or fails the test.
func MustRun(tb testing.TB, st hqstore.Storage, store string) Report {
	tb.Helper()
	r, err := Run(context.Background(), st, date, store)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func TestCleanDayReconciles(t *testing.T) {
	st, _ := MustOpenHQ(t)
	days := []*storeDay{newStoreDay("S1", 3, 20), newStoreDay("S2", 2, 10), newStoreDay("S3", 1, 5)}
	for _, sd := range days {
		sd.upload(t, st)
	}
	r := MustRun(t, st, "")
	if !r.OK() {
		var b bytes.Buffer
		r.WriteTable(&b)
		t.Fatalf("a clean day does not reconcile:\n%s", b.String())
	}
	want := 3*22 + 2*12 + 1*7
	if r.Stores != 3 || r.Terminals != 6 || r.HQTxns != want || r.LedgerTxns != want || r.DayCloses != 6 {
		t.Errorf("report %s", r.Summary())
	}
	if len(r.Txns)+len(r.Totals)+len(r.Missing) != 0 {
		t.Errorf("entries in a clean report: %+v", r)
	}
	one := MustRun(t, st, "S2")
	if !one.OK() || one.Stores != 1 || one.HQTxns != 24 || one.Store != "S2" {
		t.Errorf("store S2 alone: %s", one.Summary())
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil || !strings.Contains(table.String(), ": OK") {
		t.Errorf("table %q %v", table.String(), err)
	}
	empty := MustRun(t, st, "S9")
	if !empty.OK() || empty.Stores != 0 {
		t.Errorf("a store without anything: %s", empty.Summary())
	}
}

// TestExpectedStoreWithNothing: a store HQ expects (its stores file) but holds nothing of
// for the date, its upload stuck all day, is reported no_store_day and the date does not
// reconcile; without the list it goes unnoticed, as before.
func TestExpectedStoreWithNothing(t *testing.T) {
	st, _ := MustOpenHQ(t)
	newStoreDay("S1", 2, 10).upload(t, st)
	expect := []string{"S1", "S2"}
	for _, store := range []string{"", "S2"} {
		r, err := Run(context.Background(), st, date, store, expect...)
		if err != nil {
			t.Fatal(err)
		}
		if r.OK() || len(r.Missing) != 1 || r.Missing[0] != (MissingDeclaration{Kind: NoStoreDay, Store: "S2"}) ||
			r.Counts[NoStoreDay] != 1 {
			t.Errorf("store %q: %s, missing %+v; want S2's day missing", store, r.Summary(), r.Missing)
		}
	}
	if r, err := Run(context.Background(), st, date, "S1", expect...); err != nil || !r.OK() || r.Stores != 1 {
		t.Errorf("S1 alone with the list: %s (%v)", r.Summary(), err)
	}
	if r := MustRun(t, st, ""); !r.OK() {
		t.Errorf("without the list: %s", r.Summary())
	}
}

// findTxn returns the transaction difference of a kind and key, or fails the test.
func findTxn(tb testing.TB, r *Report, kind, store, terminal string, seq int64) TxnDiff {
	tb.Helper()
	for _, d := range r.Txns {
		if d.Kind == kind && d.Store == store && d.Terminal == terminal && d.Seq == seq {
			return d
		}
	}
	tb.Errorf("no %s difference for %s/%s/%d", kind, store, terminal, seq)
	return TxnDiff{}
}

func findTotals(r *Report, store, terminal, method string) *TotalsDiff {
	for i, d := range r.Totals {
		if d.Store == store && d.Terminal == terminal && d.Method == method {
			return &r.Totals[i]
		}
	}
	return nil
}

func rowOf(tb testing.TB, sd *storeDay, terminal string, seq int64) int {
	tb.Helper()
	for i, r := range sd.rows {
		if r.Terminal == terminal && r.Seq == seq {
			return i
		}
	}
	tb.Fatalf("no row %s/%d", terminal, seq)
	return -1
}

func without(rows []hqwire.Row, i int) []hqwire.Row {
	return append(append([]hqwire.Row{}, rows[:i]...), rows[i+1:]...)
}

// plantedDay builds a day with one difference of each kind, all through the SQLite engine:
//
//	S1/T1/5   missing at HQ (never uploaded)
//	S1/T2/7   missing at HQ (deleted from HQ's database after the upload)
//	S1/T1/9   amount differs (HQ's row says 1.00 more, on its method)
//	S2/T1/999 extra at HQ (not in the store's declaration)
//	S3/T2     the terminal's declared sale total is 1.00 over the ledger's and HQ's
//	S2/T2/4   late: uploaded after the store declared the day, and declared again
//	S4        rows but no declaration of the day
//	S1/T3     sales but no day close
func plantedDay(t *testing.T) (Report, hqstore.Storage) {
	st, path := MustOpenHQ(t)
	s1, s2, s3, s4 := newStoreDay("S1", 3, 20), newStoreDay("S2", 2, 10), newStoreDay("S3", 2, 10), newStoreDay("S4", 1, 3)

	// S1: one row never uploaded, one changed, one deleted afterwards, T3's day close lost.
	rows := append([]hqwire.Row{}, s1.rows...)
	changed := rowOf(t, s1, "T1", 9)
	rows[changed].Amount += 100
	bm := map[string]money.Fen{}
	for m, v := range rows[changed].ByMethod {
		bm[m] = v + 100
	}
	rows[changed].ByMethod = bm
	rows = without(rows, rowOf(t, &storeDay{rows: rows}, "T1", 5))
	put(t, st, "S1", "rows", received, append(rows, s1.closes[:2]...))
	put(t, st, "S1", "day", received.Add(time.Second), nil, s1.day)
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := db.Exec(`DELETE FROM rows WHERE store = 'S1' AND terminal = 'T2' AND seq = 7`); err != nil {
		t.Fatal(err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("deleted %d rows", n)
	}
	db.Close()

	// S2: an extra row; T2/4 arrives after the first declaration, with revision 2.
	extra := storetest.Sale("S2", "T1", 999, date, t0.Add(5*time.Hour), 4242, wire.MethodCash)
	late := rowOf(t, s2, "T2", 4)
	put(t, st, "S2", "rows", received, append(append(without(s2.rows, late), extra), s2.closes...))
	first := s2.day
	first.Txns = nil
	for _, tx := range s2.day.Txns {
		if tx.Terminal != "T2" || tx.Seq != 4 {
			first.Txns = append(first.Txns, tx)
		}
	}
	put(t, st, "S2", "day", received.Add(time.Second), nil, first)
	second := s2.day
	second.Revision = 2
	put(t, st, "S2", "late", received.Add(time.Hour), []hqwire.Row{s2.rows[late]}, second)
	// The terminal counted the late sale in its day close (it sold it offline before
	// closing), so once it is at HQ and declared the totals agree.

	// S3: T2 declares 1.00 more than it sold.
	var p wire.DayClosePayload
	if err := json.Unmarshal(s3.closes[1].Payload, &p); err != nil {
		t.Fatal(err)
	}
	p.SaleAmount += 100
	s3.closes[1] = dayCloseRow("S3", "T2", s3.closes[1].Seq, s3.closes[1].At, &p)
	s3.upload(t, st)

	// S4: rows, no declaration.
	put(t, st, "S4", "rows", received, append(s4.rows, s4.closes...))

	return MustRun(t, st, ""), st
}

func TestPlantedDifferencesAreNamedByTransaction(t *testing.T) {
	r, _ := plantedDay(t)
	if r.OK() {
		t.Fatal("a day with planted differences reconciles")
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	m := findTxn(t, &r, MissingAtHQ, "S1", "T1", 5)
	if m.Ledger == nil || m.HQ != nil {
		t.Errorf("missing row: %+v", m)
	}
	findTxn(t, &r, MissingAtHQ, "S1", "T2", 7)
	a := findTxn(t, &r, AmountDiffers, "S1", "T1", 9)
	if a.Ledger == nil || a.HQ == nil || a.HQ.Amount != a.Ledger.Amount+100 || !strings.Contains(a.Detail, "amount") {
		t.Errorf("changed amount: %+v", a)
	}
	x := findTxn(t, &r, ExtraAtHQ, "S2", "T1", 999)
	if x.HQ == nil || x.HQ.Amount != 4242 {
		t.Errorf("extra row: %+v", x)
	}
	l := findTxn(t, &r, Late, "S2", "T2", 4)
	if !l.ReceivedAt.After(l.DeclaredAt) || l.DeclaredAt.IsZero() {
		t.Errorf("late row: %+v", l)
	}
	if got := r.Counts; got[MissingAtHQ] != 2 || got[AmountDiffers] != 1 || got[ExtraAtHQ] != 1 || got[Late] != 1 ||
		got[ListedTwice] != 0 {
		t.Errorf("counts %v", got)
	}

	// Totals: S3/T2 declared 1.00 more than the ledger and HQ hold.
	d := findTotals(&r, "S3", "T2", MethodAll)
	if d == nil || d.Declared == nil || d.Ledger == nil || d.Declared.SaleAmount != d.Ledger.SaleAmount+100 ||
		d.Ledger.SaleAmount != d.HQ.SaleAmount {
		t.Errorf("S3/T2 totals: %+v", d)
	}
	// The missing and changed rows show in S1's terminal totals too (ledger ≠ HQ).
	for _, term := range []string{"T1", "T2"} {
		if d := findTotals(&r, "S1", term, MethodAll); d == nil || *d.Ledger == d.HQ {
			t.Errorf("S1/%s totals: %+v", term, d)
		}
	}
	// The extra row: S2/T1's HQ figures are over the ledger's and the terminal's.
	if d := findTotals(&r, "S2", "T1", MethodAll); d == nil || d.HQ.SaleAmount != d.Ledger.SaleAmount+4242 {
		t.Errorf("S2/T1 totals: %+v", d)
	}
	// The late row alone leaves S2/T2 in agreement.
	if d := findTotals(&r, "S2", "T2", MethodAll); d != nil {
		t.Errorf("S2/T2 totals differ: %+v", d)
	}
	wantMissing := []MissingDeclaration{
		{Kind: NoDayClose, Store: "S1", Terminal: "T3", Txns: 22},
		{Kind: NoStoreDay, Store: "S4", Txns: 5},
	}
	if !reflect.DeepEqual(r.Missing, wantMissing) {
		t.Errorf("missing declarations %+v, want %+v", r.Missing, wantMissing)
	}

	// JSON parses back into the same report.
	js, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	normalise := func(r *Report) {
		for i := range r.Txns {
			r.Txns[i].ReceivedAt = r.Txns[i].ReceivedAt.UTC()
			r.Txns[i].DeclaredAt = r.Txns[i].DeclaredAt.UTC()
		}
	}
	normalise(&r)
	normalise(&back)
	if !reflect.DeepEqual(back, r) {
		t.Errorf("JSON round trip differs:\n got %+v\nwant %+v", back, r)
	}

	// CSV parses back: a header, one record per difference and per disagreeing figure.
	var cb bytes.Buffer
	if err := r.WriteCSV(&cb); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(recs[0], CSVHeader) {
		t.Errorf("CSV header %v", recs[0])
	}
	figures := 0
	for i := range r.Totals {
		figures += len(r.Totals[i].figures())
	}
	if len(recs) != 1+len(r.Txns)+figures+len(r.Missing) {
		t.Errorf("%d CSV records for %d txns, %d figures, %d missing", len(recs), len(r.Txns), figures, len(r.Missing))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	found := map[string]bool{}
	for _, rec := range recs[1:] {
		key := rec[col["kind"]] + " " + rec[col["store"]] + "/" + rec[col["terminal"]] + "/" + rec[col["seq"]]
		switch key {
		case "amount_differs S1/T1/9":
			found[key] = rec[col["hq"]] != rec[col["ledger"]] && rec[col["ledger"]] != ""
		case "missing_at_hq S1/T1/5", "extra_at_hq S2/T1/999", "late S2/T2/4", "missing_at_hq S1/T2/7":
			found[key] = true
		case "totals_differ S3/T2/":
			if rec[col["method"]] == MethodAll && rec[col["figure"]] == FigureSaleAmount {
				found[key] = rec[col["declared"]] != rec[col["ledger"]] && rec[col["ledger"]] == rec[col["hq"]]
			}
		case "no_store_day S4//":
			found[key] = rec[col["detail"]] == "5"
		}
	}
	if len(found) != 7 {
		t.Errorf("CSV records found %v", found)
	}
	for k, ok := range found {
		if !ok {
			t.Errorf("CSV record %s is wrong", k)
		}
	}
	for _, s := range []string{"S1  T1  5", "S2  T1  999", "S3  T2  all  sale_amount", "no_store_day  S4", "NOT OK"} {
		if !strings.Contains(squeeze(table.String()), s) {
			t.Errorf("table lacks %q", s)
		}
	}
}

// squeeze turns runs of spaces into two spaces, for matching aligned columns.
func squeeze(s string) string {
	var b strings.Builder
	spaces := 0
	for _, c := range s {
		if c == ' ' {
			spaces++
			continue
		}
		if spaces > 0 {
			if spaces == 1 {
				b.WriteByte(' ')
			} else {
				b.WriteString("  ")
			}
			spaces = 0
		}
		b.WriteRune(c)
	}
	return b.String()
}

func TestLateAloneStillReconciles(t *testing.T) {
	st, _ := MustOpenHQ(t)
	sd := newStoreDay("S1", 2, 10)
	late := rowOf(t, sd, "T2", 3)
	put(t, st, "S1", "rows", received, append(without(sd.rows, late), sd.closes...))
	first := sd.day
	first.Txns = nil
	for _, tx := range sd.day.Txns {
		if tx.Terminal != "T2" || tx.Seq != 3 {
			first.Txns = append(first.Txns, tx)
		}
	}
	put(t, st, "S1", "day", received.Add(time.Second), nil, first)

	// Before the late row arrives: the terminal counted a sale HQ and the ledger lack.
	r := MustRun(t, st, "")
	if r.OK() || findTotals(&r, "S1", "T2", MethodAll) == nil {
		t.Errorf("before the late sale: %s", r.Summary())
	}

	second := sd.day
	second.Revision = 2
	put(t, st, "S1", "late", received.Add(3*time.Hour), []hqwire.Row{sd.rows[late]}, second)
	r = MustRun(t, st, "")
	if !r.OK() || r.Counts[Late] != 1 || len(r.Txns) != 1 {
		var b bytes.Buffer
		r.WriteTable(&b)
		t.Errorf("late alone does not reconcile:\n%s", b.String())
	}
	findTxn(t, &r, Late, "S1", "T2", 3)
}

func TestCountsAndMethods(t *testing.T) {
	// A sale paid by card with cash entirely given back as change names cash with 0.00: it
	// counts as a cash sale for the terminal, the ledger and HQ alike.
	st, _ := MustOpenHQ(t)
	sd := newStoreDay("S1", 1, 2)
	sd.upload(t, st)
	r := MustRun(t, st, "")
	if !r.OK() {
		t.Fatalf("%s", r.Summary())
	}
	// The same day where HQ's row dropped the 0.00 cash entry: by-method differs, and the
	// cash sale count with it.
	st2, _ := MustOpenHQ(t)
	rows := append([]hqwire.Row{}, sd.rows...)
	i := rowOf(t, sd, "T1", 3)
	rows[i].ByMethod = map[string]money.Fen{wire.MethodCard: 1000}
	put(t, st2, "S1", "rows", received, append(rows, sd.closes...))
	put(t, st2, "S1", "day", received.Add(time.Second), nil, sd.day)
	r = MustRun(t, st2, "")
	d := findTxn(t, &r, AmountDiffers, "S1", "T1", 3)
	if !strings.Contains(d.Detail, "cash 0.00 ≠ none") {
		t.Errorf("detail %q", d.Detail)
	}
	if c := findTotals(&r, "S1", "T1", wire.MethodCash); c == nil || c.HQ.SaleCount != c.Ledger.SaleCount-1 {
		t.Errorf("cash totals %+v", c)
	}
}

// uploading is HQ's storage while a store uploads: right after reconcile's first read of
// the rows, a late row and the store's revision that lists it are stored.
type uploading struct {
	hqstore.Storage
	once    sync.Once
	between func()
}

func (u *uploading) Rows(ctx context.Context, date, store string) ([]hqstore.StoredRow, error) {
	rows, err := u.Storage.Rows(ctx, date, store)
	u.once.Do(u.between)
	return rows, err
}

// TestReconcileWhileUploading: a late row and the revision listing it stored between
// reconcile's reads of the rows and of the declarations are not reported missing at HQ:
// the reads are taken again until they agree.
func TestReconcileWhileUploading(t *testing.T) {
	st, _ := MustOpenHQ(t)
	sd := newStoreDay("S1", 1, 5)
	late := storetest.Sale("S1", "T1", 100, date, t0.Add(3*time.Hour), 777, wire.MethodCash)
	all := append(append([]hqwire.Row{}, sd.rows...), late)
	closeRow := storetest.DayClose("S1", "T1", 200, date, t0.Add(12*time.Hour), all) // counts the late sale
	put(t, st, "S1", "rows", received, append(append([]hqwire.Row{}, sd.rows...), closeRow))
	put(t, st, "S1", "day", received.Add(time.Second), nil, sd.day)
	rev2 := storetest.Day(date, 2, t0.Add(20*time.Hour), all)
	u := &uploading{Storage: st, between: func() {
		put(t, st, "S1", "late", received.Add(time.Hour), []hqwire.Row{late})
		put(t, st, "S1", "day2", received.Add(time.Hour+time.Second), nil, rev2)
	}}
	r, err := Run(context.Background(), u, date, "")
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.HQTxns != len(all) {
		t.Fatalf("reconcile while the store uploads: %s %+v; want OK with the late sale", r.Summary(), r.Txns)
	}
}

// TestExceptionsListed: the exceptions the stores flagged on the date are listed, open and
// resolved, withdrawn ones and other dates' left out, in (store, kind, terminal, seq, sku)
// order; a clean day with exceptions still reconciles, and the summary, the table, the CSV
// and the JSON carry them.
func TestExceptionsListed(t *testing.T) {
	st, _ := MustOpenHQ(t)
	s1, s2 := newStoreDay("S1", 2, 10), newStoreDay("S2", 1, 5)
	s1.upload(t, st)
	s2.upload(t, st)
	at := t0.Add(time.Hour)
	shortB := storetest.Oversell("T1", 2, "SKU-B", date, t0, 3, 1)
	shortA := storetest.Oversell("T1", 2, "SKU-A", date, t0, 1, 2)
	shortA.Detail = "2 crates"
	shortA = storetest.Resolved(shortA, at, "found\tin the\nback room", 5)
	refund := storetest.RefundException("T2", 12, date, t0, "refund_exceeds_sale", "line 1: 2 refunded\nof 1 sold", 3)
	gone := storetest.Withdrawn(storetest.RefundException("T1", 12, date, t0, "refund_sale_unknown", "", 4), 6)
	other := storetest.Oversell("T1", 30, "SKU-A", storetest.D2, t0.Add(24*time.Hour), 1, 7)
	b, h := storetest.ExceptionBatch("S1", "exceptions", nil, refund, shortB, gone, other, shortA)
	storetest.MustPut(t, st, b, h, received.Add(time.Hour))
	b, h = storetest.ExceptionBatch("S2", "exceptions", nil, storetest.RefundException("T1", 7, date, t0,
		"refund_sale_unknown", "", 1))
	storetest.MustPut(t, st, b, h, received.Add(time.Hour))

	r := MustRun(t, st, "")
	want := []StoreException{
		{Kind: hqwire.ExceptionOversell, Store: "S1", BusinessDate: date, Terminal: "T1", Seq: 2, SKU: "SKU-A",
			Code: hqwire.CodeOversold, Detail: "2 crates", QtyShort: 1, Resolved: true, Resolution: "found\tin the\nback room"},
		{Kind: hqwire.ExceptionOversell, Store: "S1", BusinessDate: date, Terminal: "T1", Seq: 2, SKU: "SKU-B",
			Code: hqwire.CodeOversold, QtyShort: 3},
		{Kind: hqwire.ExceptionRefund, Store: "S1", BusinessDate: date, Terminal: "T2", Seq: 12, Code: "refund_exceeds_sale",
			Detail: "line 1: 2 refunded\nof 1 sold"},
		{Kind: hqwire.ExceptionRefund, Store: "S2", BusinessDate: date, Terminal: "T1", Seq: 7, Code: "refund_sale_unknown"},
	}
	if !reflect.DeepEqual(r.Exceptions, want) {
		t.Fatalf("exceptions\n got %+v\nwant %+v", r.Exceptions, want)
	}
	// Every date's open ones: the three of the date, then the next day's.
	open, err := RunOpen(context.Background(), st, "")
	wantOpen := append(slices.Clone(want[1:]), StoreException{Kind: hqwire.ExceptionOversell, Store: "S1",
		BusinessDate: storetest.D2, Terminal: "T1", Seq: 30, SKU: "SKU-A", Code: hqwire.CodeOversold, QtyShort: 1})
	if err != nil || !reflect.DeepEqual(open.Exceptions, wantOpen) {
		t.Fatalf("open exceptions (%v)\n got %+v\nwant %+v", err, open.Exceptions, wantOpen)
	}
	var openTable strings.Builder
	if err := open.WriteTable(&openTable); err != nil || !strings.Contains(openTable.String(), "OPEN EXCEPTIONS (4)") ||
		!strings.Contains(openTable.String(), storetest.D2+"  oversell  S1") {
		t.Fatalf("open exceptions' table (%v):\n%s", err, openTable.String())
	}
	if !r.OK() || len(r.Txns)+len(r.Totals)+len(r.Missing) != 0 || r.OpenExceptions() != 3 {
		t.Fatalf("a clean day with exceptions: %s", r.Summary())
	}
	if s := r.Summary(); !strings.HasSuffix(s, ": 0 differences, 0 late, 4 exceptions (3 open): OK") {
		t.Errorf("summary %q", s)
	}
	if one := MustRun(t, st, "S2"); !reflect.DeepEqual(one.Exceptions, want[3:]) || !one.OK() {
		t.Errorf("store S2 alone: %s, exceptions %+v", one.Summary(), one.Exceptions)
	}

	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	text := squeeze(table.String())
	for _, s := range []string{
		"EXCEPTIONS (4, 3 open)",
		"KIND  STORE  TERMINAL  SEQ  SKU  CODE  QTY_SHORT  STATE  DETAIL\n",
		"oversell  S1  T1  2  SKU-A  oversold  1  resolved  2 crates; resolution: found in the back room\n",
		"oversell  S1  T1  2  SKU-B  oversold  3  open  -\n",
		"refund  S1  T2  12  -  refund_exceeds_sale  -  open  line 1: 2 refunded of 1 sold\n",
		"refund  S2  T1  7  -  refund_sale_unknown  -  open  -\n",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("table lacks %q", s)
		}
	}

	var cb bytes.Buffer
	if err := r.WriteCSV(&cb); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cb).ReadAll() // every record as long as the header
	if err != nil {
		t.Fatal(err)
	}
	// The columns of the other sections stay where they were.
	before := []string{"section", "kind", "store", "terminal", "seq", "method", "figure", "declared", "ledger", "hq", "detail"}
	if !reflect.DeepEqual(recs[0], CSVHeader) || !reflect.DeepEqual(CSVHeader[:len(before)], before) {
		t.Errorf("CSV header %v", recs[0])
	}
	wantCSV := [][]string{
		{"exception", "oversell", "S1", "T1", "2", "", "", "", "", "", "2 crates", "SKU-A", "oversold", "1", "true",
			"found\tin the\nback room"},
		{"exception", "oversell", "S1", "T1", "2", "", "", "", "", "", "", "SKU-B", "oversold", "3", "false", ""},
		{"exception", "refund", "S1", "T2", "12", "", "", "", "", "", "line 1: 2 refunded\nof 1 sold", "",
			"refund_exceeds_sale", "", "false", ""},
		{"exception", "refund", "S2", "T1", "7", "", "", "", "", "", "", "", "refund_sale_unknown", "", "false", ""},
	}
	if !reflect.DeepEqual(recs[1:], wantCSV) {
		t.Errorf("CSV records\n got %q\nwant %q", recs[1:], wantCSV)
	}

	js, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || !reflect.DeepEqual(back.Exceptions, want) {
		t.Errorf("JSON round trip: %+v (%v)", back.Exceptions, err)
	}
}

// TestExceptionsDoNotDecide: exceptions neither make a day that does not reconcile pass
// nor count among its differences, and a day without any lists none.
func TestExceptionsDoNotDecide(t *testing.T) {
	st, _ := MustOpenHQ(t)
	sd := newStoreDay("S1", 1, 5)
	put(t, st, "S1", "rows", received, append(append([]hqwire.Row{}, sd.rows...), sd.closes...))
	r := MustRun(t, st, "")
	if r.Exceptions == nil || len(r.Exceptions) != 0 {
		t.Fatalf("exceptions of a day without any: %#v, want an empty list", r.Exceptions)
	}
	b, h := storetest.ExceptionBatch("S1", "exceptions", nil, storetest.Resolved(
		storetest.RefundException("T1", 7, date, t0, "refund_sale_unknown", "", 1), t0, "explained", 2))
	storetest.MustPut(t, st, b, h, received)
	r = MustRun(t, st, "")
	if r.OK() || len(r.Missing) != 1 || len(r.Exceptions) != 1 || r.OpenExceptions() != 0 ||
		!strings.Contains(r.Summary(), "1 differences, 0 late, 1 exceptions (0 open): NOT OK") {
		t.Fatalf("a day without its declaration, with a resolved exception: %s", r.Summary())
	}
}

// TestCSVTextIsNoFormula: text a store or its manager wrote goes into the CSV as text, not
// as a formula a spreadsheet would run (a resolution of "=HYPERLINK(…)", say); amounts keep
// their sign.
func TestCSVTextIsNoFormula(t *testing.T) {
	r := Report{Date: date,
		Txns: []TxnDiff{{Kind: AmountDiffers, Store: "S1", Terminal: "-T1", Seq: 4, Detail: "+1 line",
			Ledger: &Amounts{Amount: -1230}, HQ: &Amounts{Amount: 1230}}},
		Exceptions: []StoreException{{Kind: hqwire.ExceptionParked, Store: "S1", Terminal: "T1", Seq: 9, SKU: "@SUM(A1)",
			Code: "payload_invalid", Detail: "-2+3", Resolved: true, Resolution: `=HYPERLINK("http://x","ok")`}}}
	var cb bytes.Buffer
	if err := r.WriteCSV(&cb); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	txn, x := recs[1], recs[2]
	for _, c := range []struct{ got, want string }{
		{txn[col["terminal"]], "'-T1"}, {txn[col["detail"]], "'+1 line"}, {txn[col["ledger"]], "-12.30"},
		{x[col["sku"]], "'@SUM(A1)"}, {x[col["detail"]], "'-2+3"}, {x[col["resolution"]], `'=HYPERLINK("http://x","ok")`},
		{x[col["terminal"]], "T1"},
	} {
		if c.got != c.want {
			t.Errorf("CSV cell %q, want %q", c.got, c.want)
		}
	}
}
