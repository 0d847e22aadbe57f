package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"pgregory.net/rapid"
)

const testStore = "S1"

var shanghai = MustLoadLocation("Asia/Shanghai")

// day is a business day in Shanghai at 10:00 store time.
var day = time.Date(2025, 3, 1, 10, 0, 0, 0, shanghai)

const dayDate = "2025-03-01"

// MustLoadLocation loads a time zone or panics.
func MustLoadLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// MustOpen opens a fresh ledger (openNew) in a temporary directory; its clock stands at now.
func MustOpen(tb testing.TB, now time.Time) *Ledger {
	tb.Helper()
	l, err := openNew(filepath.Join(tb.TempDir(), "ledger.db"))
	if err != nil {
		tb.Fatal(err)
	}
	l.Now = func() time.Time { return now }
	tb.Cleanup(func() { l.Close() })
	return l
}

// openNew opens a new ledger of testStore at path, which must not exist: a copy of a new
// ledger Open made once in this test binary, so that each test does not run the migrations
// again (some 20 ms of CPU and a dozen syncs a ledger). Open makes a new file itself in
// mustOpenAt's tests (TestOpen among them) and in the migration tests.
func openNew(path string) (*Ledger, error) {
	b, err := newLedgerFile()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, err
	}
	return Open(context.Background(), path, testStore, shanghai)
}

// newLedgerFile is the file of a new ledger of testStore, as Open makes it.
var newLedgerFile = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "posgate-ledger-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, FileName)
	l, err := Open(context.Background(), path, testStore, shanghai)
	if err != nil {
		return nil, err
	}
	if err := l.Close(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("a closed new ledger left its write-ahead log: %v", err)
	}
	return os.ReadFile(path)
})

func mustOpenAt(tb testing.TB, path string, now time.Time) *Ledger {
	tb.Helper()
	l, err := Open(context.Background(), path, testStore, shanghai)
	if err != nil {
		tb.Fatal(err)
	}
	l.Now = func() time.Time { return now }
	tb.Cleanup(func() { l.Close() })
	return l
}

// MustAdjust adjusts stock or fails the test.
func MustAdjust(tb testing.TB, l *Ledger, id, sku string, delta int64) {
	tb.Helper()
	if _, _, err := l.Adjust(context.Background(), id, sku, delta, ReasonOpening); err != nil {
		tb.Fatal(err)
	}
}

// MustCommit commits records and fails the test on a whole-commit error.
func MustCommit(tb testing.TB, l *Ledger, recs ...Record) []Outcome {
	tb.Helper()
	out, err := l.Commit(context.Background(), recs)
	if err != nil {
		tb.Fatal(err)
	}
	if len(out) != len(recs) {
		tb.Fatalf("%d outcomes for %d records", len(out), len(recs))
	}
	return out
}

type item struct {
	sku   string
	qty   int64
	price money.Fen
}

func cash(a money.Fen) wire.Payment { return wire.Payment{Method: wire.MethodCash, Amount: a} }
func card(a money.Fen) wire.Payment {
	return wire.Payment{Method: wire.MethodCard, Amount: a, Reference: "card-ref"}
}
func qr(a money.Fen) wire.Payment {
	return wire.Payment{Method: wire.MethodQR, Amount: a, Reference: "qr-ref"}
}

// salePayload builds a valid sale; without payments it is paid by card, exactly.
func salePayload(id string, items []item, pays ...wire.Payment) *wire.SalePayload {
	p := &wire.SalePayload{SaleID: id, OpenedAt: day}
	for i, it := range items {
		amt := it.price * money.Fen(it.qty)
		p.Lines = append(p.Lines, wire.Line{Line: i + 1, SKU: it.sku, Name: "item " + it.sku, Qty: it.qty,
			UnitPrice: it.price, Amount: amt})
		p.Total += amt
	}
	if len(pays) == 0 {
		pays = []wire.Payment{card(p.Total)}
	}
	p.Payments = pays
	var paid money.Fen
	for _, pm := range pays {
		paid += pm.Amount
	}
	p.Change = paid - p.Total
	return p
}

// refundPayload refunds items of a sale.
func refundPayload(id, saleID string, saleSeq int64, restock bool, method string, items []item) *wire.RefundPayload {
	p := &wire.RefundPayload{RefundID: id, SaleID: saleID, SaleSeq: saleSeq, Method: method, Restock: restock}
	if method != wire.MethodCash {
		p.Reference = "refund-ref"
	}
	for i, it := range items {
		amt := it.price * money.Fen(it.qty)
		p.Lines = append(p.Lines, wire.RefundLine{Line: i + 1, SKU: it.sku, Qty: it.qty, Amount: amt})
		p.Amount += amt
	}
	return p
}

// onLines names the sale's lines a refund returns: its i-th line returns line lines[i]
// (refundPayload numbers them 1, 2, … as if they were the sale's first lines).
func onLines(p *wire.RefundPayload, lines ...int) *wire.RefundPayload {
	for i, n := range lines {
		p.Lines[i].Line = n
	}
	return p
}

// accepted builds an accepted, final record of a payload as a terminal would send it.
func accepted(terminal string, seq int64, at time.Time, p wire.Payload) Record {
	body, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	r := Record{Terminal: terminal, Seq: seq, At: at, Payload: body, Status: wire.AckAccepted, Final: true}
	switch v := p.(type) {
	case *wire.SalePayload:
		r.Kind, r.Sale = wire.KindSale, v
	case *wire.RefundPayload:
		r.Kind, r.Refund = wire.KindRefund, v
	case *wire.DayClosePayload:
		r.Kind, r.DayClose = wire.KindDayClose, v
	case *wire.ScanPayload:
		r.Kind, r.Scan = wire.KindScan, v
	case *wire.HeartbeatPayload:
		r.Kind = wire.KindHeartbeat
	default:
		panic(fmt.Sprintf("payload %T", p))
	}
	r.Hash = wire.Hash(r.Kind, testStore, terminal, seq, at, body)
	return r
}

// refused turns a record into a refusal (its decoded payload dropped, as ingest sends it).
func refused(r Record, status wire.AckStatus, final bool, code string) Record {
	r.Status, r.Final, r.Code, r.Message = status, final, code, "refused: "+code
	r.Sale, r.Refund, r.DayClose, r.Scan = nil, nil, nil, nil
	return r
}

func withFlow(r Record, flow int64) Record { r.FlowNo = flow; return r }
func offline(r Record) Record              { r.Offline = true; return r }
func checkStock(r Record) Record           { r.CheckStock = true; return r }

var tables = []string{"events", "sales", "sale_lines", "payments", "refunds", "refund_lines",
	"stock", "stock_moves", "stock_flow", "adjustments", "oversells", "refund_exceptions", "parked", "day_closes",
	"hq_outbox"}

// counts returns the number of rows of every ledger table (and of the view stock_flow: every
// stock movement, sales' lines included).
func counts(tb testing.TB, l *Ledger) map[string]int {
	tb.Helper()
	m := map[string]int{}
	for _, t := range tables {
		var n int
		if err := l.db.R.QueryRow(`SELECT count(*) FROM ` + t).Scan(&n); err != nil {
			tb.Fatal(err)
		}
		m[t] = n
	}
	return m
}

func mustStock(tb testing.TB, l *Ledger) map[string]int64 {
	tb.Helper()
	s, err := l.Stock(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	p, err := l.ProvenStock(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if !reflect.DeepEqual(s, p) {
		tb.Fatalf("stock %v is not the proven stock %v", s, p)
	}
	return s
}

func mustLookup(tb testing.TB, l *Ledger, terminal string, seq int64) Stored {
	tb.Helper()
	s, ok, err := l.Lookup(context.Background(), terminal, seq)
	if err != nil || !ok {
		tb.Fatalf("lookup %s:%d: ok=%v err=%v", terminal, seq, ok, err)
	}
	return s
}

func TestCommitMixedGroup(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 10)
	MustAdjust(t, l, "open-B", "B", 5)
	sale := salePayload("s1", []item{{"A", 2, 1000}, {"B", 1, 550}}, cash(3000))
	recs := []Record{
		withFlow(accepted("T1", 1, day, sale), 1),
		withFlow(accepted("T1", 2, day.Add(time.Minute), refundPayload("r1", "s1", 1, true, wire.MethodCash, []item{{"A", 1, 1000}})), 2),
		withFlow(accepted("T1", 3, day.Add(2*time.Minute), onLines(refundPayload("r2", "s1", 1, false, wire.MethodCard, []item{{"B", 1, 550}}), 2)), 3),
		accepted("T1", 4, day.Add(10*time.Hour), &wire.DayClosePayload{BusinessDate: dayDate, SaleCount: 1,
			SaleAmount: 2550, RefundCount: 2, RefundAmount: 1550, Methods: []wire.MethodTotal{}}),
		accepted("T1", 5, day, &wire.ScanPayload{SaleID: "s2", Line: 1, SKU: "A", Qty: 1, UnitPrice: 1000}),
		refused(accepted("T2", 1, day, salePayload("x", []item{{"A", 1, 1}})), wire.AckRejected, true, "payload_invalid"),
		accepted("T2", 2, day, &wire.HeartbeatPayload{Backlog: 3}),
	}
	out := MustCommit(t, l, recs...)
	want := []Outcome{
		{Status: wire.AckAccepted, FlowNo: 1, BusinessDate: dayDate},
		{Status: wire.AckAccepted, FlowNo: 2, BusinessDate: dayDate},
		{Status: wire.AckAccepted, FlowNo: 3, BusinessDate: dayDate},
		{Status: wire.AckAccepted, BusinessDate: dayDate},
		{Status: wire.AckAccepted, BusinessDate: dayDate},
		{Status: wire.AckRejected, Code: "payload_invalid", Message: "refused: payload_invalid", BusinessDate: dayDate},
		{Status: wire.AckAccepted, BusinessDate: dayDate},
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("outcomes\n got %+v\nwant %+v", out, want)
	}
	wantCounts := map[string]int{"events": 7, "sales": 1, "sale_lines": 2, "payments": 1,
		"refunds": 2, "refund_lines": 2, "stock": 2, "stock_moves": 3, "stock_flow": 5, "adjustments": 2, "oversells": 0,
		"refund_exceptions": 0, "parked": 1, "day_closes": 1, "hq_outbox": 4}
	if got := counts(t, l); !reflect.DeepEqual(got, wantCounts) {
		t.Errorf("rows\n got %v\nwant %v", got, wantCounts)
	}
	if got := mustStock(t, l); !reflect.DeepEqual(got, map[string]int64{"A": 9, "B": 4}) {
		t.Errorf("stock %v, want A 9 (10 − 2 sold + 1 restocked), B 4 (no restock)", got)
	}
	rows, err := l.db.R.Query(`SELECT kind, terminal, seq, business_date FROM hq_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var hq []string
	for rows.Next() {
		var kind, terminal, date string
		var seq int64
		if err := rows.Scan(&kind, &terminal, &seq, &date); err != nil {
			t.Fatal(err)
		}
		hq = append(hq, fmt.Sprintf("%s %s:%d %s", kind, terminal, seq, date))
	}
	rows.Close()
	wantHQ := []string{"sale T1:1 2025-03-01", "refund T1:2 2025-03-01", "refund T1:3 2025-03-01", "day_close T1:4 2025-03-01"}
	if !reflect.DeepEqual(hq, wantHQ) {
		t.Errorf("hq_outbox %q, want %q", hq, wantHQ)
	}
	if s := mustLookup(t, l, "T1", 1); s.Hash != recs[0].Hash || s.Kind != wire.KindSale || !s.Final || s.FlowNo != 1 {
		t.Errorf("lookup T1:1 = %+v", s)
	}
	if s := mustLookup(t, l, "T2", 1); s.Status != wire.AckRejected || !s.Final || s.Code != "payload_invalid" {
		t.Errorf("lookup T2:1 = %+v", s)
	}
	if _, ok, err := l.Lookup(ctx, "T2", 3); ok || err != nil {
		t.Errorf("lookup of an unknown key: ok=%v err=%v", ok, err)
	}
	next, err := l.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"T1": 6, "T2": 3}; !reflect.DeepEqual(next, want) {
		t.Errorf("next %v, want %v", next, want)
	}
}

func TestReplayOfFinalRecordChangesNothing(t *testing.T) {
	sale := accepted("T1", 1, day, salePayload("s1", []item{{"A", 3, 100}}))
	tests := []struct {
		name string
		rec  Record
		want Outcome
	}{
		{"accepted sale", withFlow(sale, 4), Outcome{Status: wire.AckAccepted, FlowNo: 4, BusinessDate: dayDate, Oversold: true}},
		{"degrade sale", sale, Outcome{Status: wire.AckAccepted, FlowNo: 1, BusinessDate: dayDate, Oversold: true}},
		{"final rejection", refused(sale, wire.AckRejected, true, "payload_invalid"),
			Outcome{Status: wire.AckRejected, Code: "payload_invalid", Message: "refused: payload_invalid", BusinessDate: dayDate}},
		{"day close", accepted("T1", 1, day, &wire.DayClosePayload{BusinessDate: dayDate, Methods: []wire.MethodTotal{}}),
			Outcome{Status: wire.AckAccepted, BusinessDate: dayDate}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := MustOpen(t, day)
			first := MustCommit(t, l, tt.rec)[0]
			if !reflect.DeepEqual(first, tt.want) {
				t.Fatalf("first commit %+v, want %+v", first, tt.want)
			}
			before, stock := counts(t, l), mustStock(t, l)
			dup := tt.want
			dup.Duplicate = true
			// Replayed alone, and twice within one group commit.
			for _, batch := range [][]Record{{tt.rec}, {tt.rec, tt.rec}} {
				for i, o := range MustCommit(t, l, batch...) {
					if !reflect.DeepEqual(o, dup) {
						t.Errorf("replay %d: %+v, want %+v", i, o, dup)
					}
				}
			}
			if after := counts(t, l); !reflect.DeepEqual(after, before) {
				t.Errorf("a replay changed rows: before %v after %v", before, after)
			}
			if after := mustStock(t, l); !reflect.DeepEqual(after, stock) {
				t.Errorf("a replay changed stock: before %v after %v", stock, after)
			}
		})
	}
}

func TestNonFinalRecordIsReplaced(t *testing.T) {
	ctx := context.Background()
	live := checkStock(accepted("T1", 7, day, salePayload("s1", []item{{"A", 2, 100}})))
	tests := []struct {
		name   string
		first  Record
		second Record
		want   Outcome
		rows   map[string]int // rows that differ from zero after the second commit
	}{
		{
			name:   "out of stock live, then sold offline",
			first:  live,
			second: offline(live),
			want:   Outcome{Status: wire.AckAccepted, FlowNo: 1, BusinessDate: dayDate, Oversold: true},
			rows: map[string]int{"events": 1, "sales": 1, "sale_lines": 1, "payments": 1,
				"stock": 1, "stock_moves": 1, "stock_flow": 2, "adjustments": 1, "oversells": 1, "hq_outbox": 1},
		},
		{
			name:   "rate limited, then refused for good",
			first:  refused(live, wire.AckRateLimited, true, "rate_limited"), // stored non-final anyway
			second: refused(live, wire.AckRejected, true, "sale_closed"),
			want:   Outcome{Status: wire.AckRejected, Code: "sale_closed", Message: "refused: sale_closed", BusinessDate: dayDate},
			rows:   map[string]int{"events": 1, "parked": 1, "stock": 1, "stock_moves": 1, "stock_flow": 1, "adjustments": 1},
		},
		{
			name:   "refused twice live",
			first:  refused(live, wire.AckRejected, false, "out_of_stock"),
			second: refused(live, wire.AckRejected, false, "still_out"),
			want:   Outcome{Status: wire.AckRejected, Code: "still_out", Message: "refused: still_out", BusinessDate: dayDate},
			rows:   map[string]int{"events": 1, "stock": 1, "stock_moves": 1, "stock_flow": 1, "adjustments": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := MustOpen(t, day)
			MustAdjust(t, l, "open-A", "A", 1)
			o := MustCommit(t, l, tt.first)[0]
			if o.Status == wire.AckAccepted || o.Err != nil {
				t.Fatalf("first commit %+v, want a refusal", o)
			}
			if s := mustLookup(t, l, "T1", 7); s.Final {
				t.Fatalf("the first refusal is stored final: %+v", s)
			}
			if o := MustCommit(t, l, tt.second)[0]; !reflect.DeepEqual(o, tt.want) {
				t.Fatalf("second commit %+v, want %+v", o, tt.want)
			}
			s := mustLookup(t, l, "T1", 7)
			if s.Status != tt.want.Status || s.Code != tt.want.Code || s.Final != tt.second.Final {
				t.Errorf("stored %+v, want the second record (final %v)", s, tt.second.Final)
			}
			got := counts(t, l)
			for _, table := range tables {
				if got[table] != tt.rows[table] {
					t.Errorf("%s has %d rows, want %d", table, got[table], tt.rows[table])
				}
			}
			if next, _ := l.Next(ctx); next["T1"] != 8 {
				t.Errorf("next %v, want T1 8", next)
			}
		})
	}
}

func TestConflictOverFinalRecord(t *testing.T) {
	original := withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 500}})), 1)
	other := withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 900}})), 2)
	rejected := refused(original, wire.AckRejected, true, "payload_invalid")
	tests := []struct {
		name        string
		first, then Record
		parked      string // the contents parked under the key after the conflict: first, then or both
	}{
		{"accepted, then other content", original, other, "then"},
		{"rejected, then other content", rejected, other, "both"},
		{"accepted, then a rejection with another hash", original, refused(other, wire.AckRejected, true, "x"), "then"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := MustOpen(t, day)
			MustCommit(t, l, tt.first)
			before := counts(t, l)
			o := MustCommit(t, l, tt.then)[0]
			if o.Status != wire.AckConflict || o.Code != CodeIdempotencyConflict || o.Err != nil || o.Duplicate {
				t.Errorf("outcome %+v, want a conflict", o)
			}
			if s := mustLookup(t, l, "T1", 1); s.Hash != tt.first.Hash || s.Status != tt.first.Status {
				t.Errorf("stored %+v: the original must stand", s)
			}
			// The till kept the conflicting content: it is parked, beside the first content
			// if that was refused (parked too). Nothing else changes, and a redelivery
			// changes nothing at all.
			before["parked"]++
			if after := counts(t, l); !reflect.DeepEqual(after, before) {
				t.Errorf("a conflict changed rows: want %v after %v", before, after)
			}
			parked, err := l.Parked(context.Background(), 0, false)
			want := map[string][][]byte{"then": {tt.then.Payload}, "both": {tt.first.Payload, tt.then.Payload}}[tt.parked]
			if err != nil || len(parked) != len(want) {
				t.Fatalf("parked %+v, %v", parked, err)
			}
			var payloads [][]byte
			if err := sqlitedb.EachRow(l.db.R.Query(`SELECT payload FROM parked ORDER BY id`))(func(rows *sql.Rows) error {
				var p []byte
				payloads = append(payloads, p)
				return rows.Scan(&payloads[len(payloads)-1])
			}); err != nil || !reflect.DeepEqual(payloads, want) {
				t.Errorf("parked payloads %q (%v), want the %s content(s) %q", payloads, err, tt.parked, want)
			}
			if c := parked[0]; c.Code != CodeIdempotencyConflict || c.BusinessDate != dayDate || c.Hash != tt.then.Hash {
				t.Errorf("parked conflict %+v", c)
			}
			xs, last := exceptionsAfter(t, l, 0, 100)
			MustCommit(t, l, tt.then)
			if again, _ := exceptionsAfter(t, l, last, 100); len(xs) == 0 || len(again) != 0 {
				t.Errorf("exception changes %q, then after a redelivery %q", briefs(xs), briefs(again))
			}
		})
	}
}

func TestFlowNumberClash(t *testing.T) {
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 10)
	out := MustCommit(t, l,
		withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 7),
		withFlow(accepted("T2", 1, day, salePayload("s2", []item{{"A", 2, 100}})), 7),                          // same date, same flow
		withFlow(accepted("T2", 2, day, refundPayload("r1", "s1", 1, true, "cash", []item{{"A", 1, 100}})), 7), // refunds share the sequence
		withFlow(accepted("T2", 3, day.AddDate(0, 0, 1), salePayload("s3", []item{{"A", 1, 100}})), 7),         // another date: free
	)
	for i, wantErr := range []bool{false, true, true, false} {
		if got := out[i].Err != nil; got != wantErr {
			t.Errorf("record %d: err %v, want error %v", i, out[i].Err, wantErr)
			continue
		}
		if wantErr && perr.CodeOf(out[i].Err) != CodeFlowClash {
			t.Errorf("record %d: code %q, want %q", i, perr.CodeOf(out[i].Err), CodeFlowClash)
		}
	}
	if _, ok, _ := l.Lookup(context.Background(), "T2", 1); ok {
		t.Error("the clashing sale was stored")
	}
	if got := mustStock(t, l); got["A"] != 8 {
		t.Errorf("stock A %d, want 8: only the two stored sales take stock", got["A"])
	}
	if got := counts(t, l); got["events"] != 2 || got["sales"] != 2 || got["refunds"] != 0 || got["hq_outbox"] != 2 {
		t.Errorf("rows %v: the clashing records left rows behind", got)
	}
}

func TestDegradeModeAllocatesFlowNumbers(t *testing.T) {
	l := MustOpen(t, day)
	next := day.AddDate(0, 0, 1)
	out := MustCommit(t, l,
		withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 5), // from the gate
		accepted("T1", 2, day, salePayload("s2", []item{{"A", 1, 100}})),
		accepted("T2", 1, day, refundPayload("r1", "s1", 1, false, "card", []item{{"A", 1, 100}})),
		accepted("T2", 2, day, &wire.HeartbeatPayload{}),
		accepted("T2", 3, next, salePayload("s3", []item{{"A", 1, 100}})),
	)
	out = append(out, MustCommit(t, l, accepted("T1", 3, day, salePayload("s4", []item{{"A", 1, 100}})))...)
	want := []int64{5, 6, 7, 0, 1, 8}
	for i, o := range out {
		if o.Err != nil || o.FlowNo != want[i] {
			t.Errorf("record %d: flow %d err %v, want flow %d", i, o.FlowNo, o.Err, want[i])
		}
	}
}

func TestCheckStockRefusesWholeSale(t *testing.T) {
	tests := []struct {
		name      string
		stock     map[string]int64
		items     []item
		offline   bool
		wantOK    bool
		wantStock map[string]int64
	}{
		{"enough", map[string]int64{"A": 3, "B": 2}, []item{{"A", 2, 100}, {"B", 2, 100}}, false, true, map[string]int64{"A": 1, "B": 0}},
		{"one line short", map[string]int64{"A": 3, "B": 1}, []item{{"A", 2, 100}, {"B", 2, 100}}, false, false, map[string]int64{"A": 3, "B": 1}},
		{"same sku on two lines", map[string]int64{"A": 3}, []item{{"A", 2, 100}, {"A", 2, 100}}, false, false, map[string]int64{"A": 3}},
		{"sku never stocked", map[string]int64{"A": 3}, []item{{"A", 1, 100}, {"Z", 1, 100}}, false, false, map[string]int64{"A": 3}},
		{"offline is never refused", map[string]int64{"A": 1}, []item{{"A", 2, 100}}, true, true, map[string]int64{"A": -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := MustOpen(t, day)
			for sku, q := range tt.stock {
				MustAdjust(t, l, "open-"+sku, sku, q)
			}
			before := counts(t, l)
			r := checkStock(accepted("T1", 1, day, salePayload("s1", tt.items)))
			r.Offline = tt.offline
			o := MustCommit(t, l, r)[0]
			if got := mustStock(t, l); !reflect.DeepEqual(got, tt.wantStock) {
				t.Errorf("stock %v, want %v", got, tt.wantStock)
			}
			if tt.wantOK {
				if o.Status != wire.AckAccepted || o.FlowNo != 1 || o.Oversold != tt.offline {
					t.Errorf("outcome %+v, want accepted with flow 1", o)
				}
				return
			}
			if o.Status != wire.AckRejected || o.Code != CodeOutOfStock || o.FlowNo != 0 || o.Err != nil {
				t.Errorf("outcome %+v, want rejected out_of_stock", o)
			}
			if s := mustLookup(t, l, "T1", 1); s.Final || s.Status != wire.AckRejected {
				t.Errorf("stored %+v, want a non-final rejection", s)
			}
			after := counts(t, l)
			before["events"]++ // the refusal itself, and nothing else
			if !reflect.DeepEqual(after, before) {
				t.Errorf("rows after a refusal %v, want %v", after, before)
			}
		})
	}
}

func TestOfflineOversell(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 1)
	MustAdjust(t, l, "open-B", "B", 5)
	out := MustCommit(t, l,
		offline(accepted("T1", 1, day, salePayload("s1", []item{{"A", 3, 100}, {"B", 1, 100}}))),
		offline(accepted("T1", 2, day.Add(time.Hour), salePayload("s2", []item{{"A", 2, 100}}))),
		withFlow(accepted("T2", 1, day.AddDate(0, 0, 1), salePayload("s3", []item{{"A", 1, 100}})), 1), // live, gate let it through
		func() Record { // the gate says oversold, the ledger's stock disagrees
			r := offline(accepted("T2", 2, day.AddDate(0, 0, 1), salePayload("s4", []item{{"B", 1, 100}})))
			r.Oversold = true
			return r
		}(),
		offline(accepted("T2", 3, day.AddDate(0, 0, 1), salePayload("s5", []item{{"B", 1, 100}}))),
	)
	for i, want := range []bool{true, true, true, true, false} {
		if out[i].Oversold != want || out[i].Status != wire.AckAccepted {
			t.Errorf("record %d: %+v, want accepted, oversold %v", i, out[i], want)
		}
	}
	if got := mustStock(t, l); !reflect.DeepEqual(got, map[string]int64{"A": -5, "B": 2}) {
		t.Errorf("stock %v, want A -5 B 2", got)
	}
	all, err := l.Oversells(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.Oversell{
		{Terminal: "T1", Seq: 1, SKU: "A", Short: 2, At: day, BusinessDate: dayDate},
		{Terminal: "T1", Seq: 2, SKU: "A", Short: 2, At: day.Add(time.Hour), BusinessDate: dayDate},
		{Terminal: "T2", Seq: 1, SKU: "A", Short: 1, At: day.AddDate(0, 0, 1), BusinessDate: "2025-03-02"},
	}
	if !reflect.DeepEqual(all, want) {
		t.Errorf("oversells\n got %+v\nwant %+v", all, want)
	}
	if got, _ := l.Oversells(ctx, "2025-03-02", false); !reflect.DeepEqual(got, want[2:]) {
		t.Errorf("oversells of 2025-03-02: %+v", got)
	}
	if got, _ := l.Oversells(ctx, "2025-02-28", false); len(got) != 0 {
		t.Errorf("oversells of a quiet day: %+v", got)
	}

	// A manager resolves the first: it leaves the open list, keeps its note, and a retry
	// changes nothing.
	resolvedAt := day.Add(3 * time.Hour)
	l.Now = func() time.Time { return resolvedAt }
	o, applied, err := l.ResolveOversell(ctx, "T1", 1, "A", "  counted the shelf: 2 behind the till; adjusted ")
	resolved := want[0]
	resolved.Resolved, resolved.ResolvedAt, resolved.Resolution = true, resolvedAt, "counted the shelf: 2 behind the till; adjusted"
	if err != nil || !applied || !reflect.DeepEqual(o, resolved) {
		t.Fatalf("resolve: %+v applied %v err %v, want %+v", o, applied, err, resolved)
	}
	l.Now = func() time.Time { return resolvedAt.Add(time.Hour) }
	if o, applied, err := l.ResolveOversell(ctx, "T1", 1, "A", "another note"); err != nil || applied || !reflect.DeepEqual(o, resolved) {
		t.Errorf("resolving again: %+v applied %v err %v, want the first resolution unchanged", o, applied, err)
	}
	if got, _ := l.Oversells(ctx, "", false); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("open oversells after resolving one: %+v", got)
	}
	if got, _ := l.Oversells(ctx, dayDate, true); !reflect.DeepEqual(got, []client.Oversell{resolved, want[1]}) {
		t.Errorf("all oversells of %s: %+v", dayDate, got)
	}
	for _, tc := range []struct {
		terminal  string
		seq       int64
		sku, note string
		code      string
	}{
		{"T1", 1, "B", "x", CodeOversellNotFound}, // T1:1 sold B, but B was not short
		{"T9", 1, "A", "x", CodeOversellNotFound},
		{"T1", 2, "A", " ", CodeResolutionRequired},
		{"T1", 2, "A", strings.Repeat("é", wire.MaxTextLen/2+1), CodeResolutionRequired}, // 2 bytes each
	} {
		if _, _, err := l.ResolveOversell(ctx, tc.terminal, tc.seq, tc.sku, tc.note); perr.CodeOf(err) != tc.code {
			t.Errorf("resolve %s:%d %s %.10q: %v, want %s", tc.terminal, tc.seq, tc.sku, tc.note, err, tc.code)
		}
	}
	if got, _ := l.Oversells(ctx, "", false); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("open oversells after refused resolutions: %+v", got)
	}
}

// TestStockIsConserved checks invariant 4 over random adjustments, shelf counts, sales (live,
// offline, degrade mode) and refunds in random group commits: Stock = ProvenStock = a model.
func TestStockIsConserved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		l, err := openNew(filepath.Join(dir, fmt.Sprintf("ledger-%d.db", runs)))
		if err != nil {
			rt.Fatal(err)
		}
		defer l.Close()
		skus := []string{"A", "B", "C"}
		model := map[string]int64{}
		type sold struct {
			seq   int64
			items []item
		}
		var sales []sold
		var pending []Record
		var wantStatus []wire.AckStatus
		var seq, adj int64
		flush := func() {
			out, err := l.Commit(ctx, pending)
			if err != nil {
				rt.Fatal(err)
			}
			for i, o := range out {
				if o.Err != nil || o.Status != wantStatus[i] {
					rt.Fatalf("record %d: %+v, want %s", i, o, wantStatus[i])
				}
			}
			pending, wantStatus = nil, nil
		}
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0: // adjustment, sometimes a repeated id
				flush()
				sku := rapid.SampledFrom(skus).Draw(rt, "sku")
				delta := rapid.Int64Range(-5, 20).Draw(rt, "delta")
				id := fmt.Sprintf("adj-%s-%d", sku, delta)
				if rapid.Bool().Draw(rt, "new id") {
					adj++
					id = fmt.Sprintf("adj-%d", adj)
				}
				_, applied, err := l.Adjust(ctx, id, sku, delta, ReasonAdjust)
				if err != nil {
					rt.Fatal(err)
				}
				if applied {
					model[sku] += delta
				}
			case 1: // sale
				n := rapid.IntRange(1, 3).Draw(rt, "lines")
				var items []item
				need := map[string]int64{}
				for range n {
					it := item{rapid.SampledFrom(skus).Draw(rt, "sku"), rapid.Int64Range(1, 4).Draw(rt, "qty"), 100}
					items = append(items, it)
					need[it.sku] += it.qty
				}
				seq++
				r := accepted("T1", seq, day, salePayload(fmt.Sprintf("s%d", seq), items))
				r.Offline = rapid.Bool().Draw(rt, "offline")
				r.CheckStock = rapid.Bool().Draw(rt, "check stock")
				ok := true
				if r.CheckStock && !r.Offline {
					for sku, q := range need {
						ok = ok && model[sku] >= q
					}
				}
				pending = append(pending, r)
				if !ok {
					wantStatus = append(wantStatus, wire.AckRejected)
					break
				}
				wantStatus = append(wantStatus, wire.AckAccepted)
				for sku, q := range need {
					model[sku] -= q
				}
				sales = append(sales, sold{seq, items})
			case 2: // refund of an earlier sale
				if len(sales) == 0 {
					break
				}
				s := rapid.SampledFrom(sales).Draw(rt, "sale")
				it := rapid.SampledFrom(s.items).Draw(rt, "line")
				it.qty = rapid.Int64Range(1, it.qty).Draw(rt, "refund qty")
				restock := rapid.Bool().Draw(rt, "restock")
				seq++
				pending = append(pending, accepted("T1", seq, day, refundPayload(fmt.Sprintf("r%d", seq),
					fmt.Sprintf("s%d", s.seq), s.seq, restock, wire.MethodCash, []item{it})))
				wantStatus = append(wantStatus, wire.AckAccepted)
				if restock {
					model[it.sku] += it.qty
				}
			case 3:
				flush()
			case 4: // shelf count, sometimes a repeated id: the stock becomes what was counted
				flush()
				sku := rapid.SampledFrom(skus).Draw(rt, "sku")
				counted := rapid.Int64Range(0, 20).Draw(rt, "counted")
				id := fmt.Sprintf("count-%s-%d", sku, counted)
				if rapid.Bool().Draw(rt, "new id") {
					adj++
					id = fmt.Sprintf("count-%d", adj)
				}
				delta, _, applied, err := l.Count(ctx, id, sku, counted)
				if err != nil {
					rt.Fatal(err)
				}
				if applied {
					if delta != counted-model[sku] {
						rt.Fatalf("count of %d %s with %d in the model booked %+d", counted, sku, model[sku], delta)
					}
					model[sku] = counted
				}
			}
		}
		flush()
		stock, err := l.Stock(ctx)
		if err != nil {
			rt.Fatal(err)
		}
		proven, err := l.ProvenStock(ctx)
		if err != nil {
			rt.Fatal(err)
		}
		if !reflect.DeepEqual(stock, proven) {
			rt.Fatalf("stock %v != proven stock %v", stock, proven)
		}
		for sku, q := range model {
			if stock[sku] != q {
				rt.Fatalf("stock %v, model %v", stock, model)
			}
		}
		for sku, q := range stock {
			if model[sku] != q {
				rt.Fatalf("stock %v, model %v", stock, model)
			}
		}
	})
}

func TestBusinessDateIsTheSaleTime(t *testing.T) {
	late := time.Date(2025, 3, 1, 23, 59, 30, 0, shanghai)
	synced := time.Date(2025, 3, 2, 0, 10, 0, 0, shanghai)
	l := MustOpen(t, synced)
	for _, tt := range []struct {
		name string
		at   time.Time
		want string
	}{
		{"23:59:30 store time", late, "2025-03-01"},
		{"the same instant in UTC", late.UTC(), "2025-03-01"},
		{"midnight store time", time.Date(2025, 3, 2, 0, 0, 0, 0, shanghai), "2025-03-02"},
		{"16:00 UTC is midnight in Shanghai", time.Date(2025, 3, 1, 16, 0, 0, 0, time.UTC), "2025-03-02"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := l.BusinessDate(tt.at); got != tt.want {
				t.Errorf("BusinessDate(%v) = %s, want %s", tt.at, got, tt.want)
			}
		})
	}
	// Sold at 23:59:30, committed after midnight (the clock says 00:10): the earlier day.
	r := offline(accepted("T1", 1, late.UTC(), salePayload("s1", []item{{"A", 1, 100}})))
	o := MustCommit(t, l, r)[0]
	if o.BusinessDate != "2025-03-01" || o.FlowNo != 1 {
		t.Errorf("outcome %+v, want business date 2025-03-01, flow 1", o)
	}
	ctx := context.Background()
	if got, _ := l.Totals(ctx, "2025-03-01"); got["T1"].Sales != 1 {
		t.Errorf("totals of 2025-03-01: %+v", got)
	}
	if got, _ := l.Totals(ctx, "2025-03-02"); len(got) != 0 {
		t.Errorf("totals of 2025-03-02: %+v, want none", got)
	}
}

func TestTotalsMatchTheTerminalDefinitions(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	t1 := []Record{
		accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 1250}}, cash(2000))),          // change 750
		accepted("T1", 2, day, salePayload("s2", []item{{"B", 2, 1500}}, card(3000))),          // card
		accepted("T1", 3, day, salePayload("s3", []item{{"C", 1, 500}}, cash(200), qr(300))),   // split, no change
		accepted("T1", 4, day, salePayload("s4", []item{{"D", 4, 220}}, cash(500), card(400))), // 880, change 20
		accepted("T1", 5, day, refundPayload("r1", "s1", 1, true, wire.MethodCash, []item{{"A", 1, 1250}})),
		accepted("T1", 6, day, refundPayload("r2", "s3", 3, false, wire.MethodQR, []item{{"C", 1, 300}})),
		refused(accepted("T1", 7, day, salePayload("s7", []item{{"A", 1, 999}})), wire.AckRejected, true, "x"),
		refused(accepted("T1", 8, day, salePayload("s8", []item{{"A", 1, 999}})), wire.AckRejected, false, "y"),
		accepted("T1", 9, day.AddDate(0, 0, 1), salePayload("s9", []item{{"A", 1, 999}}, cash(1000))), // next day
	}
	t2 := []Record{accepted("T2", 1, day, salePayload("t2s1", []item{{"A", 1, 100}}, cash(100)))}
	for _, o := range MustCommit(t, l, append(t1, t2...)...) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
	}
	got, err := l.Totals(ctx, dayDate)
	if err != nil {
		t.Fatal(err)
	}
	// By hand: cash 2000 − 750 + 200 + 500 − 20 = 1930, card 3000 + 400 = 3400, qr 300:
	// 1930 + 3400 + 300 = 5630 = 1250 + 3000 + 500 + 880.
	want := map[string]client.Counters{
		"T1": {Sales: 4, Amount: 5630,
			ByMethod: map[string]money.Fen{"cash": 1930, "card": 3400, "qr": 300},
			Refunds:  2, RefundAmount: 1550, RefundByMethod: map[string]money.Fen{"cash": 1250, "qr": 300}},
		"T2": {Sales: 1, Amount: 100, ByMethod: map[string]money.Fen{"cash": 100}, RefundByMethod: map[string]money.Fen{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("totals\n got %+v\nwant %+v", got, want)
	}
	for term, c := range got {
		var sum money.Fen
		for _, a := range c.ByMethod {
			sum += a
		}
		if sum != c.Amount {
			t.Errorf("%s: Σ by method %s != amount %s", term, sum, c.Amount)
		}
	}
	next, err := l.Totals(ctx, "2025-03-02")
	if err != nil {
		t.Fatal(err)
	}
	if c := next["T1"]; c.Sales != 1 || c.Amount != 999 || c.ByMethod["cash"] != 999 {
		t.Errorf("totals of the next day %+v", next)
	}
}

func TestSnapshot(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day.Add(2*time.Hour))
	MustAdjust(t, l, "open-A", "A", 10)
	MustAdjust(t, l, "open-B", "B", 0)
	old := day.AddDate(0, 0, -(SnapshotDays + 3))
	MustCommit(t, l,
		withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}}, cash(100))), 3),
		accepted("T1", 2, day.AddDate(0, 0, -1), salePayload("s2", []item{{"A", 1, 200}}, card(200))),
		withFlow(accepted("T2", 1, old, salePayload("s3", []item{{"A", 1, 300}})), 9),
		accepted("T2", 2, day, refundPayload("r1", "s3", 1, true, "card", []item{{"A", 1, 300}})),
	)
	s, err := l.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"A": 8, "B": 0}; !reflect.DeepEqual(s.Stock, want) {
		t.Errorf("stock %v, want %v", s.Stock, want)
	}
	oldDate := l.BusinessDate(old)
	if want := map[string]int64{dayDate: 4, "2025-02-28": 1, oldDate: 9}; !reflect.DeepEqual(s.MaxFlow, want) {
		t.Errorf("max flow %v, want %v", s.MaxFlow, want)
	}
	// The window's dates, from SnapshotDays before today to tomorrow, each with the ledger's
	// counters or none; nothing older.
	if _, ok := s.Counters[oldDate]; ok || len(s.Counters) != SnapshotDays+2 {
		t.Errorf("counters for dates %v, want the %d dates from 7 days before %s to the day after", keys(s.Counters),
			SnapshotDays+2, dayDate)
	}
	for date, ts := range s.Counters {
		if date != dayDate && date != "2025-02-28" && len(ts) != 0 {
			t.Errorf("counters of %s %+v, want none", date, ts)
		}
	}
	totals, err := l.Totals(ctx, dayDate)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Counters[dayDate], totals) {
		t.Errorf("snapshot counters %+v != totals %+v", s.Counters[dayDate], totals)
	}
	want := client.Counters{Sales: 1, Amount: 200, ByMethod: map[string]money.Fen{"card": 200}}
	if c := s.Counters["2025-02-28"]["T1"]; !c.Equal(want) {
		t.Errorf("counters of 2025-02-28 %+v, want %+v", c, want)
	}
	if c := s.Counters[dayDate]["T2"]; c.Refunds != 1 || c.RefundAmount != 300 || c.Sales != 0 {
		t.Errorf("T2 counters %+v, want its refund only", c)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestDayCloses(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	close1 := &wire.DayClosePayload{BusinessDate: dayDate, SaleCount: 1, SaleAmount: 100, Methods: []wire.MethodTotal{
		{Method: "cash", SaleCount: 1, SaleAmount: 100}}}
	close2 := &wire.DayClosePayload{BusinessDate: dayDate, SaleCount: 2, SaleAmount: 300, Methods: []wire.MethodTotal{
		{Method: "card", SaleCount: 2, SaleAmount: 300}}}
	other := &wire.DayClosePayload{BusinessDate: dayDate, RefundCount: 1, RefundAmount: 50, Methods: []wire.MethodTotal{
		{Method: "qr", RefundCount: 1, RefundAmount: 50}}}
	next := day.AddDate(0, 0, 1) // closed the next morning: still the day the payload names
	MustCommit(t, l, accepted("T1", 5, next, close1), accepted("T2", 3, next, other))
	MustCommit(t, l, accepted("T1", 9, next, close2), accepted("T1", 7, next, close1)) // the later seq wins
	got, err := l.DayCloses(ctx, dayDate)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]wire.DayClosePayload{"T1": *close2, "T2": *other}; !reflect.DeepEqual(got, want) {
		t.Errorf("day closes\n got %+v\nwant %+v", got, want)
	}
	if got, _ := l.DayCloses(ctx, "2025-03-02"); len(got) != 0 {
		t.Errorf("day closes of the day they were sent: %+v", got)
	}
	if n := counts(t, l)["hq_outbox"]; n != 4 {
		t.Errorf("hq_outbox has %d rows, want one per day close event (4)", n)
	}
}

func TestParked(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	sale := salePayload("s1", []item{{"A", 1, 100}})
	r1 := refused(accepted("T1", 1, day, sale), wire.AckRejected, true, "payload_invalid")
	r3 := refused(accepted("T1", 3, day, sale), wire.AckConflict, true, "idempotency_conflict")
	MustCommit(t, l,
		r1,
		refused(accepted("T1", 2, day, sale), wire.AckRejected, false, "out_of_stock"), // live: not parked
		r3,
		Record{Terminal: "T2", Seq: 4, Status: wire.AckRejected, Final: true, Code: "wire_syntax", Message: "bad JSON",
			Payload: []byte("{nope")}, // undecodable: no kind, no time
	)
	got, err := l.Parked(ctx, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.Parked{
		{ID: 2, Terminal: "T1", Seq: 3, Hash: r3.Hash, Kind: wire.KindSale, Code: "idempotency_conflict",
			Message: "refused: idempotency_conflict", At: day, BusinessDate: dayDate},
		{ID: 1, Terminal: "T1", Seq: 1, Hash: r1.Hash, Kind: wire.KindSale, Code: "payload_invalid",
			Message: "refused: payload_invalid", At: day, BusinessDate: dayDate},
		// No time: filed under the store's business date when it was parked (the ledger's
		// clock).
		{ID: 3, Terminal: "T2", Seq: 4, Code: "wire_syntax", Message: "bad JSON", BusinessDate: dayDate},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parked\n got %+v\nwant %+v", got, want)
	}
	if got, _ := l.Parked(ctx, 1, false); len(got) != 1 {
		t.Errorf("Parked(1) returned %d", len(got))
	}

	// The manager resolves one: it leaves the open list and the terminal's count, not all.
	p, applied, err := l.ResolveParked(ctx, "T1", 1, "", "  sale voided with the customer ")
	if err != nil || !applied || !p.Resolved || p.Resolution != "sale voided with the customer" || p.ResolvedAt.IsZero() {
		t.Fatalf("resolve: %+v, applied %v, %v", p, applied, err)
	}
	if p2, applied, err := l.ResolveParked(ctx, "T1", 1, "", "again"); err != nil || applied || p2 != p {
		t.Errorf("resolving again: %+v, applied %v, %v; want the first resolution", p2, applied, err)
	}
	for _, c := range []struct {
		seq  int64
		note string
		code string
	}{{2, "x", CodeParkedNotFound}, {9, "x", CodeParkedNotFound}, {3, " ", CodeParkedResolutionRequired}} {
		if _, _, err := l.ResolveParked(ctx, "T1", c.seq, "", c.note); perr.As(err).Code != c.code {
			t.Errorf("resolve T1:%d %q: %v, want %s", c.seq, c.note, err, c.code)
		}
	}
	if got, _ := l.Parked(ctx, 0, false); len(got) != 2 || got[1].Seq != 4 {
		t.Errorf("open parked events after the resolution: %+v", got)
	}
	if got, _ := l.Parked(ctx, 0, true); len(got) != 3 || !got[1].Resolved {
		t.Errorf("all parked events: %+v", got)
	}
	ts, err := l.Terminals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, ts := range ts {
		counts[ts.Terminal] = ts.Parked
	}
	if want := map[string]int64{"T1": 1, "T2": 1}; !maps.Equal(counts, want) {
		t.Errorf("open parked counts: %v, want %v", counts, want)
	}
}

func TestInvalidRecordsDoNotBlockTheBatch(t *testing.T) {
	good := accepted("T1", 2, day, salePayload("s1", []item{{"A", 1, 100}}))
	garbled := accepted("T1", 3, day, salePayload("s2", []item{{"A", 1, 100}}))
	garbled.Sale, garbled.Payload = nil, []byte(`{"sale_id": 5}`)
	unbalanced := accepted("T1", 4, day, salePayload("s3", []item{{"A", 1, 100}}))
	unbalanced.Sale.Total = 99
	dup := good
	dup.Seq, dup.Status = 5, wire.AckDuplicate
	l := MustOpen(t, day)
	out := MustCommit(t, l, Record{Terminal: "T1", Seq: 0, Status: wire.AckRejected}, good, garbled, unbalanced, dup)
	for i, wantErr := range []bool{true, false, true, true, true} {
		if (out[i].Err != nil) != wantErr {
			t.Errorf("record %d: %+v, want error %v", i, out[i], wantErr)
		} else if wantErr && perr.CodeOf(out[i].Err) != CodeRecordInvalid {
			t.Errorf("record %d: code %s, want %s", i, perr.CodeOf(out[i].Err), CodeRecordInvalid)
		}
	}
	if got := counts(t, l); got["events"] != 1 || got["sales"] != 1 {
		t.Errorf("rows %v, want the good sale only", got)
	}
	// A decoded payload is not required: the ledger decodes the raw one.
	raw := accepted("T1", 6, day, salePayload("s6", []item{{"A", 2, 100}}))
	raw.Sale = nil
	if o := MustCommit(t, l, raw)[0]; o.Err != nil || o.Status != wire.AckAccepted {
		t.Errorf("raw payload only: %+v", o)
	}
	if got := mustStock(t, l); got["A"] != -3 {
		t.Errorf("stock %v, want A -3", got)
	}
}

func TestAdjust(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	tests := []struct {
		name        string
		id, sku     string
		delta       int64
		reason      string
		wantQty     int64
		wantApplied bool
		wantCode    string
	}{
		{"opening", "o1", "A", 10, ReasonOpening, 10, true, ""},
		{"adjust down", "a1", "A", -3, ReasonAdjust, 7, true, ""},
		{"repeat is idempotent", "a1", "A", -3, ReasonAdjust, 7, false, ""},
		{"same id other delta", "a1", "A", -4, ReasonAdjust, 0, false, CodeAdjustmentConflict},
		{"same id other sku", "a1", "B", -3, ReasonAdjust, 0, false, CodeAdjustmentConflict},
		{"unknown reason", "x1", "A", 1, ReasonSale, 0, false, CodeAdjustmentInvalid},
		{"no id", "", "A", 1, ReasonAdjust, 0, false, CodeAdjustmentInvalid},
		{"huge", "h1", "A", MaxAdjust + 1, ReasonAdjust, 0, false, CodeAdjustmentInvalid},
		{"new sku below zero", "b1", "B", -2, ReasonAdjust, -2, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qty, applied, err := l.Adjust(ctx, tt.id, tt.sku, tt.delta, tt.reason)
			if perr.CodeOf(err) != tt.wantCode {
				t.Fatalf("err %v, want code %q", err, tt.wantCode)
			}
			if qty != tt.wantQty || applied != tt.wantApplied {
				t.Errorf("got qty %d applied %v, want %d %v", qty, applied, tt.wantQty, tt.wantApplied)
			}
		})
	}
	if got := mustStock(t, l); !reflect.DeepEqual(got, map[string]int64{"A": 7, "B": -2}) {
		t.Errorf("stock %v", got)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := mustOpenAt(t, path, day)
	MustCommit(t, l, accepted("T1", 41, day, &wire.HeartbeatPayload{}))
	l.Close()
	l = mustOpenAt(t, path, day)
	if next, err := l.Next(ctx); err != nil || next["T1"] != 42 {
		t.Errorf("next after reopen %v %v, want T1 42", next, err)
	}
	l.Close()
	if _, err := Open(ctx, path, "S2", shanghai); err == nil {
		t.Error("opened store S1's ledger as store S2")
	}
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"), testStore, nil); err == nil {
		t.Error("opened a ledger without a time zone")
	}
}

// saleBatch returns n accepted sales of terminal T1 from seq from on, two lines and a cash
// payment with change each, flow numbers given by the gate.
func saleBatch(from int64, n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		seq := from + int64(i)
		p := salePayload(fmt.Sprintf("s%d", seq), []item{{fmt.Sprintf("SKU%d", seq%50), 2, 350}, {"BAG", 1, 20}}, cash(1000))
		recs[i] = withFlow(accepted("T1", seq, day, p), seq)
	}
	return recs
}

func TestCommit5000SalesIsFast(t *testing.T) {
	l := MustOpen(t, day)
	recs := saleBatch(1, 5000)
	start := time.Now()
	out := MustCommit(t, l, recs...)
	elapsed := time.Since(start)
	for _, o := range out {
		if o.Err != nil || o.Status != wire.AckAccepted {
			t.Fatalf("outcome %+v", o)
		}
	}
	limit := 3 * time.Second
	if raceEnabled {
		limit *= 5
	}
	t.Logf("5000 sales in one commit: %v (%.0f records/s)", elapsed, 5000/elapsed.Seconds())
	if elapsed > limit {
		t.Errorf("5000 sales took %v, over %v", elapsed, limit)
	}
	if got := counts(t, l); got["sales"] != 5000 || got["sale_lines"] != 10000 || got["stock_flow"] != 10000 {
		t.Errorf("rows %v", got)
	}
}

// BenchmarkCommit measures group commits of sale records (2 lines, 1 payment, flow numbers
// from the gate) at several batch sizes; records/s is the figure that matters.
func BenchmarkCommit(b *testing.B) {
	for _, size := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			l := MustOpen(b, day)
			seq := int64(1)
			var committed int
			var busy time.Duration
			for b.Loop() {
				b.StopTimer()
				recs := saleBatch(seq, size)
				seq += int64(size)
				b.StartTimer()
				start := time.Now()
				if _, err := l.Commit(context.Background(), recs); err != nil {
					b.Fatal(err)
				}
				busy += time.Since(start)
				committed += size
			}
			b.ReportMetric(float64(committed)/busy.Seconds(), "records/s")
		})
	}
}
