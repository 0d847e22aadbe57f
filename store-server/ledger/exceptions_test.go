package ledger

import (
	"context"
	"database/sql"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	"github.com/posgate/posgate/hq-sync/hq"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/schema"
)

// exceptionsAfter reads the exception changes after afterID through the uploader's reader,
// for an HQ that takes parked events.
func exceptionsAfter(t *testing.T, l *Ledger, afterID int64, limit int) ([]hq.Exception, int64) {
	t.Helper()
	xs, last, _ := exceptionsFor(t, l, afterID, limit, true)
	return xs, last
}

// exceptionsFor reads the exception changes after afterID through the uploader's reader, for
// an HQ that takes parked events or not.
func exceptionsFor(t *testing.T, l *Ledger, afterID int64, limit int, parked bool) (xs []hq.Exception, last int64, full bool) {
	t.Helper()
	err := l.ViewHQ(context.Background(), func(r *HQReader) error {
		var err error
		xs, last, full, err = r.ExceptionsAfter(context.Background(), afterID, limit, parked, parked, parked)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return xs, last, full
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
// till took; redelivered, it is not a change; resolved, it is. For an HQ that does not take parked events, the changes
// wait at the first parked event's.
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

	// An HQ that does not take parked events gets the oversell, and then nothing more.
	if xs, l2, full := exceptionsFor(t, l, 0, 2, false); !slices.Equal(briefs(xs), want[:1]) || l2 != xs[0].Change || full {
		t.Errorf("changes for an HQ without parked events: %q, last %d, full %v; want %q, its change, not full",
			briefs(xs), l2, full, want[:1])
	}
	if xs, l2, _ := exceptionsFor(t, l, want0(t, l), 100, false); len(xs) != 0 || l2 != want0(t, l) {
		t.Errorf("changes after the oversell for an HQ without parked events: %q, last %d", briefs(xs), l2)
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

// want0 is the change number of the ledger's first exception change.
func want0(t *testing.T, l *Ledger) int64 {
	t.Helper()
	xs, _ := exceptionsAfter(t, l, 0, 1)
	return xs[0].Change
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

// TestChangeNumbersFromTheClock: exception changes are numbered from the time of the change
// (µs since 1970), each above the one before.
func TestChangeNumbersFromTheClock(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
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
	if len(ids) != 2 || ids[0] < before-1000 || ids[1] <= ids[0] {
		t.Fatalf("change numbers %v: want them from the clock (µs, from %d), growing", ids, before)
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

// TestReaderOfALedgerBefore016: the uploader may be upgraded before its store-server, and
// reads the ledger as the earlier release left it: refund exceptions without column
// earlier are read all the same.
func TestReaderOfALedgerBefore016(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := openBefore(t, path, "016")
	for _, q := range []string{
		`INSERT INTO meta (k, v) VALUES ('store_id', '` + testStore + `')`,
		`INSERT INTO refund_exceptions (terminal, seq, code, detail, at, business_date)
			VALUES ('T2', 9, 'refund_exceeds_sale', 'line 1: 2 returned of 1 sold', '2025-03-01T11:00:00+08:00', '2025-03-01')`,
	} {
		if _, err := db.W.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	l, err := OpenReader(ctx, path, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	xs, _ := exceptionsAfter(t, l, 0, 100)
	if len(xs) != 1 || xs[0].Detail != "line 1: 2 returned of 1 sold" || xs[0].Code != CodeRefundExceedsSale {
		t.Fatalf("exceptions of a ledger before 016: %+v", xs)
	}
}

// TestReaderOfALedgerBefore020: the uploader may be upgraded before its store-server, and
// reads a ledger migrated through 019 only: its parked events (one per key, no column sku)
// are read as they stand, and a ledger with one parked did not stop every batch at "no such
// column".
func TestReaderOfALedgerBefore020(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := openBefore(t, path, "020")
	for _, q := range []string{
		`INSERT INTO meta (k, v) VALUES ('store_id', '` + testStore + `')`,
		`INSERT INTO parked (terminal, seq, kind, code, message, payload, at, parked_ms, business_date)
			VALUES ('T1', 5, 'sale', 'payload_invalid', 'bad', x'', '2025-03-02T02:00:00Z', 1, '2025-03-02')`,
		`UPDATE parked SET resolved = 1, resolved_at = '2025-03-02T03:00:00Z', resolution = 'entered again'`,
	} {
		if _, err := db.W.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	l, err := OpenReader(ctx, path, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	xs, _ := exceptionsAfter(t, l, 0, 100)
	if got, want := briefs(xs), []string{"parked T1:5  2025-03-02 payload_invalid resolved: entered again"}; !slices.Equal(got, want) ||
		!xs[0].Resolved || xs[0].Resolution != "entered again" {
		t.Fatalf("exceptions of a ledger before 020: %q %+v; want %q, resolved", got, xs, want)
	}
}
