package ledger

import (
	"context"
	"database/sql"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/posgate/posgate/hq-sync/hq"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/schema"
)

// exceptionsAfter reads the exception changes after afterID through the uploader's reader.
func exceptionsAfter(t *testing.T, l *Ledger, afterID int64, limit int) (xs []hq.Exception, last int64) {
	t.Helper()
	err := l.ViewHQ(context.Background(), func(r *HQReader) error {
		var err error
		xs, last, _, err = r.ExceptionsAfter(context.Background(), afterID, limit)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return xs, last
}

// brief is an exception in a line, for comparing.
func brief(x hq.Exception) string {
	s := x.Kind + " " + wire.Key(x.Terminal, x.Seq) + " " + x.SKU + " " + x.BusinessDate + " " + x.Code
	switch {
	case x.Withdrawn:
		s += " withdrawn"
	case x.Resolved:
		s += " resolved: " + x.Resolution
	}
	return s
}

func briefs(xs []hq.Exception) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = brief(x)
	}
	return out
}

// TestExceptionsAfter: every change of an exception (flagged, resolved, withdrawn) is a
// change the uploader reads after the last one HQ acknowledged, with the exception's state
// now; an exception changed twice goes once, under its last change.
func TestExceptionsAfter(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 1)
	sale := refundSale() // T1:1 sells A ×2 and B ×1
	MustCommit(t, l, refused(sale, wire.AckRejected, false, "out_of_stock"))
	MustCommit(t, l, refundOf("T1", 2, 2, []item{{"A", 1, 100}}, 1)) // its sale is not in the ledger yet
	MustCommit(t, l, offline(accepted("T2", 1, day, salePayload("s2", []item{{"A", 3, 100}}))))

	xs, last := exceptionsAfter(t, l, 0, 100)
	want := []string{"refund T1:2  " + dayDate + " " + CodeRefundSaleUnknown, "oversell T2:1 A " + dayDate + " oversold"}
	if got := briefs(xs); !slices.Equal(got, want) || last != xs[1].Change || xs[0].Change >= last {
		t.Fatalf("changes after 0: %q (changes %d, %d), last %d; want %q, the last change last", got,
			xs[0].Change, xs[1].Change, last, want)
	}
	if o := xs[1]; o.QtyShort != 2 || !o.At.Equal(day) {
		t.Errorf("the oversell: %+v, want 2 short at %v", o, day)
	}
	first := xs[0].Change
	if xs, last := exceptionsAfter(t, l, 0, 1); len(xs) != 1 || last != first || xs[0].Kind != hq.ExceptionRefund {
		t.Errorf("one change after 0: %q, last %d, want the refund exception's, %d", briefs(xs), last, first)
	}
	if xs, l2 := exceptionsAfter(t, l, last, 100); len(xs) != 0 || l2 != last {
		t.Errorf("nothing after %d: %q, last %d", last, briefs(xs), l2)
	}

	// The manager resolves the oversell; the sale the refund names arrives and covers it.
	if _, _, err := l.ResolveOversell(ctx, "T2", 1, "A", "a delivery not booked"); err != nil {
		t.Fatal(err)
	}
	MustAdjust(t, l, "delivery-A", "A", 10)
	MustAdjust(t, l, "delivery-B", "B", 10)
	MustCommit(t, l, offline(sale))
	xs, last2 := exceptionsAfter(t, l, last, 100)
	want = []string{"oversell T2:1 A " + dayDate + " oversold resolved: a delivery not booked",
		"refund T1:2  " + dayDate + "  withdrawn"}
	if got := briefs(xs); !slices.Equal(got, want) || last2 <= last {
		t.Fatalf("changes after %d: %q, last %d; want %q", last, got, last2, want)
	}
	if w := xs[1]; w.Code != "" || w.Detail != "" || !w.At.IsZero() || w.Change != last2 {
		t.Errorf("the withdrawn exception carries more than its key: %+v", w)
	}
	if xs[0].ResolvedAt.IsZero() || xs[0].Change >= xs[1].Change {
		t.Errorf("the resolved oversell: %+v", xs[0])
	}
}

// TestParkedEventsAreExceptions: a parked event is an exception HQ hears of, with what the
// till took; redelivered, it is not a change; resolved, it is.
func TestParkedEventsAreExceptions(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 1)
	MustCommit(t, l, offline(accepted("T2", 1, day, salePayload("s2", []item{{"A", 3, 100}})))) // an oversell
	bad := refused(accepted("T1", 1, day, salePayload("s1", []item{{"A", 2, 150}}, cash(500))), wire.AckRejected, true,
		"payload_invalid")
	garbled := Record{Terminal: "T3", Seq: 4, Status: wire.AckRejected, Final: true, Code: "wire_syntax",
		Message: "bad JSON", Payload: []byte("{nope")}
	MustCommit(t, l, bad, garbled, refused(accepted("T1", 2, day, salePayload("s3", []item{{"A", 1, 100}})),
		wire.AckRejected, false, "out_of_stock")) // a live refusal: not parked

	xs, last := exceptionsAfter(t, l, 0, 100)
	want := []string{"oversell T2:1 A " + dayDate + " oversold", "parked T1:1  " + dayDate + " payload_invalid",
		"parked T3:4  " + dayDate + " wire_syntax"}
	if got := briefs(xs); !slices.Equal(got, want) {
		t.Fatalf("changes: %q, want %q", got, want)
	}
	if d := xs[1].Detail; d != `sale "s1" of 3.00 (cash 5.00, change 2.00): refused: payload_invalid` || !xs[1].At.Equal(day) {
		t.Errorf("the parked sale: detail %q at %v", d, xs[1].At)
	}
	if d := xs[2].Detail; d != "event: bad JSON" || !xs[2].At.IsZero() {
		t.Errorf("the parked garble: detail %q at %v", d, xs[2].At)
	}

	MustCommit(t, l, bad, garbled) // redelivered, parked again as they were
	if xs, _ := exceptionsAfter(t, l, last, 100); len(xs) != 0 {
		t.Errorf("parked again as they were: changes %q", briefs(xs))
	}
	if _, _, err := l.ResolveParked(ctx, "T1", 1, "", "voided with the customer"); err != nil {
		t.Fatal(err)
	}
	xs, _ = exceptionsAfter(t, l, last, 100)
	if got, want := briefs(xs), []string{"parked T1:1  " + dayDate + " payload_invalid resolved: voided with the customer"}; !slices.Equal(got, want) {
		t.Errorf("after the resolution: %q, want %q", got, want)
	}
}

// TestParkedEventsOfEarlierLedgers: the events a ledger from before migration 019 parked
// are exceptions too, read once, filed under their event's business date or else the
// store's date when they were parked (23:00 UTC on 2025-03-03 is 07:00 on 2025-03-04 in
// Shanghai).
func TestParkedEventsOfEarlierLedgers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := openBefore(t, path, "019")
	parkedMs := time.Date(2025, 3, 3, 23, 0, 0, 0, time.UTC).UnixMilli()
	for _, q := range []string{
		`INSERT INTO oversells (terminal, seq, sku, qty_short, at, business_date)
			VALUES ('T1', 2, 'A', 3, '2025-03-01T10:00:00+08:00', '2025-03-01')`,
		`INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final, code, message, received_ms, payload)
			VALUES ('T1', 5, 'sale', 'h', '2025-03-02T02:00:00Z', '2025-03-02', 'rejected', 1, 'payload_invalid', 'bad', 1, x'')`,
		`INSERT INTO parked (terminal, seq, kind, code, message, payload, at, parked_ms)
			VALUES ('T1', 5, 'sale', 'payload_invalid', 'bad', x'', '2025-03-02T02:00:00Z', 1)`,
		`INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final, code, message, received_ms, payload)
			VALUES ('T2', 6, '', 'h', '', '', 'rejected', 1, 'wire_syntax', 'bad JSON', 1, x'')`,
		`INSERT INTO parked (terminal, seq, kind, code, message, payload, at, parked_ms)
			VALUES ('T2', 6, '', 'wire_syntax', 'bad JSON', x'', '', ` + strconv.FormatInt(parkedMs, 10) + `)`,
	} {
		if _, err := db.W.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	l := mustOpenAt(t, path, day)
	xs, last := exceptionsAfter(t, l, 0, 100)
	want := []string{"oversell T1:2 A 2025-03-01 oversold", "parked T1:5  2025-03-02 payload_invalid",
		"parked T2:6  2025-03-04 wire_syntax"}
	if got := briefs(xs); !slices.Equal(got, want) || last != xs[2].Change {
		t.Fatalf("changes of the earlier ledger: %q, last %d; want %q", got, last, want)
	}
	// The next change is numbered above them.
	if _, _, err := l.ResolveParked(ctx, "T2", 6, "", "a till reinstalled"); err != nil {
		t.Fatal(err)
	}
	if xs, _ := exceptionsAfter(t, l, last, 100); len(xs) != 1 || !xs[0].Resolved {
		t.Errorf("the resolution after the migration: %q", briefs(xs))
	}
}

// TestExceptionChangesOfEarlierLedgers: the exceptions of a ledger from before migration 014
// are changes too, read once.
func TestExceptionChangesOfEarlierLedgers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := openBefore(t, path, "014")
	for _, q := range []string{
		`INSERT INTO oversells (terminal, seq, sku, qty_short, at, business_date, resolved, resolved_at, resolution)
			VALUES ('T1', 4, 'A', 3, '2025-03-01T10:00:00+08:00', '2025-03-01', 1, '2025-03-02T09:00:00Z', 'counted')`,
		`INSERT INTO refund_exceptions (terminal, seq, code, detail, at, business_date)
			VALUES ('T2', 9, 'refund_exceeds_sale', 'line 1: 2 returned of 1 sold', '2025-03-01T11:00:00+08:00', '2025-03-01')`,
	} {
		if _, err := db.W.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	l := mustOpenAt(t, path, day)
	xs, last := exceptionsAfter(t, l, 0, 100)
	want := []string{"oversell T1:4 A 2025-03-01 oversold resolved: counted", "refund T2:9  2025-03-01 refund_exceeds_sale"}
	if got := briefs(xs); !slices.Equal(got, want) || last != 2 {
		t.Fatalf("changes of the earlier ledger: %q, last %d; want %q", got, last, want)
	}
	if xs[0].QtyShort != 3 || xs[1].Detail != "line 1: 2 returned of 1 sold" ||
		!xs[0].ResolvedAt.Equal(time.Date(2025, 3, 2, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("states: %+v", xs)
	}
}

// TestUnchangedExceptionsAreNotRenumbered: each refund of a sale holds every refund of the
// sale again; an exception that stays as it was is not written again, so it is numbered
// once (and goes to headquarters once), not once more per later refund.
func TestUnchangedExceptionsAreNotRenumbered(t *testing.T) {
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 100)
	MustAdjust(t, l, "open-B", "B", 100)
	MustCommit(t, l, refundSale()) // T1:1 sells A ×2 and B ×1
	const n = 20
	for seq := int64(2); seq < 2+n; seq++ {
		MustCommit(t, l, refundOf("T1", seq, seq, []item{{"A", 1, 100}}, 1))
	}
	var changes, flagged int
	if err := l.db.R.QueryRow(`SELECT (SELECT count(*) FROM exception_changes),
		(SELECT count(*) FROM refund_exceptions)`).Scan(&changes, &flagged); err != nil {
		t.Fatal(err)
	}
	if flagged != n-2 || changes != flagged {
		t.Fatalf("%d refunds of 2 units sold: %d exceptions, %d changes; want %d and as many changes", n, flagged, changes, n-2)
	}
}

// TestChangeNumbersFromTheClock: a ledger migrated through 014 (changes numbered from 1)
// numbers its next changes from the time once 015 has run, and never below the one before.
func TestChangeNumbersFromTheClock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := openBefore(t, path, "015")
	if _, err := db.W.Exec(`INSERT INTO oversells (terminal, seq, sku, qty_short, at, business_date)
		VALUES ('T1', 1, 'A', 1, '2025-03-01T10:00:00+08:00', '2025-03-01')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	l := mustOpenAt(t, path, day)
	before := time.Now().UnixMicro()
	MustCommit(t, l, refundOf("T1", 2, 2, []item{{"A", 1, 500}}, 1))
	MustCommit(t, l, refundOf("T1", 3, 3, []item{{"A", 1, 500}}, 1))
	var ids []int64
	err := sqlitedb.Each(ctx, l.db.R, `SELECT id FROM exception_changes ORDER BY id`, nil, func(rows *sql.Rows) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 || ids[0] != 1 || ids[1] < before-1000 || ids[2] <= ids[1] {
		t.Fatalf("change numbers %v: want 1 (014's), then from the clock (µs, from %d), growing", ids, before)
	}
}

// migrationsBefore returns the store's migrations whose names sort before name: a ledger
// as an earlier release left it.
func migrationsBefore(t *testing.T, name string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	entries, err := fs.ReadDir(schema.Store(), ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() >= name {
			break
		}
		b, err := fs.ReadFile(schema.Store(), e.Name())
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = &fstest.MapFile{Data: b}
	}
	return out
}

// TestEarlierResolutionMovesOutOfTheDetail: a ledger written before migration 016 holds a
// reopened exception's earlier resolution in its detail; 017 moves it to column earlier, so
// the next refund of the sale keeps it, and numbers no change of an exception that stays.
func TestEarlierResolutionMovesOutOfTheDetail(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := mustOpenAt(t, path, day)
	sale := refundSale()
	MustCommit(t, l, refused(sale, wire.AckRejected, false, "out_of_stock"))
	MustCommit(t, l, refundOf("T1", 2, 2, []item{{"A", 1, 500}}, 1))
	if _, _, err := l.ResolveRefundException(ctx, "T1", 2, "the sale was made offline"); err != nil {
		t.Fatal(err)
	}
	MustCommit(t, l, offline(sale))
	// As the builds before 016 left it: the earlier resolution in the detail.
	if _, err := l.db.W.Exec(`UPDATE refund_exceptions SET detail = detail || earlier, earlier = ''`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.db.W.Exec(string(must(fs.ReadFile(schema.Store(), "017_earlier_out_of_detail.sql")))); err != nil {
		t.Fatal(err)
	}
	var before int
	if err := l.db.R.QueryRow(`SELECT count(*) FROM exception_changes`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	MustCommit(t, l, refundOf("T1", 3, 3, []item{{"B", 1, 50}}, 2))
	xs, err := l.RefundExceptions(ctx, "", false)
	if err != nil || len(xs) != 2 || xs[0].Seq != 2 ||
		!strings.HasSuffix(xs[0].Detail, " (earlier refund_sale_unknown, resolved: the sale was made offline)") {
		t.Fatalf("after 017 and a later refund: %+v (%v), want T1:2 with the earlier resolution", xs, err)
	}
	var total int
	if err := l.db.R.QueryRow(`SELECT count(*) FROM exception_changes`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != before+1 { // T1:3's own exception, nothing of T1:2
		t.Fatalf("%d changes numbered by the later refund, want 1 (T1:3's)", total-before)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
