package ledger

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
)

// exceptionsAfter reads the exception changes after afterID through the uploader's reader.
func exceptionsAfter(t *testing.T, l *Ledger, afterID int64, limit int) (xs []hqwire.Exception, last int64) {
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
func brief(x hqwire.Exception) string {
	s := x.Kind + " " + wire.Key(x.Terminal, x.Seq) + " " + x.SKU + " " + x.BusinessDate + " " + x.Code
	switch {
	case x.Withdrawn:
		s += " withdrawn"
	case x.Resolved:
		s += " resolved: " + x.Resolution
	}
	return s
}

func briefs(xs []hqwire.Exception) []string {
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
	if xs, last := exceptionsAfter(t, l, 0, 1); len(xs) != 1 || last != first || xs[0].Kind != hqwire.ExceptionRefund {
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
