package ledger

import (
	"context"
	"database/sql"
	"testing"

	"github.com/posgate/posgate/internal/perr"
)

// TestCount: a shelf count books counted − the ledger's quantity at booking time, so a sale
// committed after the manager last read the stock is not counted twice; it is idempotent by
// id and refuses the id reused for another count, another SKU or an adjustment.
func TestCount(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 12)

	count := func(t *testing.T, id, sku string, counted, wantDelta, wantQty int64, wantApplied bool) {
		t.Helper()
		delta, qty, applied, err := l.Count(ctx, id, sku, counted)
		if err != nil || delta != wantDelta || qty != wantQty || applied != wantApplied {
			t.Fatalf("Count(%s, %s, %d) = delta %d qty %d applied %v err %v, want %d %d %v",
				id, sku, counted, delta, qty, applied, err, wantDelta, wantQty, wantApplied)
		}
	}
	refused := func(t *testing.T, id, sku string, counted int64, code string) {
		t.Helper()
		if _, _, _, err := l.Count(ctx, id, sku, counted); perr.CodeOf(err) != code {
			t.Fatalf("Count(%q, %q, %d): %v, want %s", id, sku, counted, err, code)
		}
	}
	stockOf := func(t *testing.T, sku string) int64 {
		t.Helper()
		return mustStock(t, l)[sku] // and it is the proven stock
	}
	counted := func(t *testing.T, id string) (delta int64, counted sql.NullInt64) {
		t.Helper()
		if err := l.db.R.QueryRow(`SELECT delta, counted FROM adjustments WHERE id = ?`, id).Scan(&delta, &counted); err != nil {
			t.Fatal(err)
		}
		return delta, counted
	}

	t.Run("books counted minus the ledger's quantity", func(t *testing.T) {
		count(t, "c1", "A", 9, -3, 9, true)
		if q := stockOf(t, "A"); q != 9 {
			t.Fatalf("stock of A %d, want 9", q)
		}
		if d, c := counted(t, "c1"); d != -3 || !c.Valid || c.Int64 != 9 {
			t.Fatalf("adjustment c1: delta %d counted %v", d, c)
		}
	})

	t.Run("a sale during the count is not counted twice", func(t *testing.T) {
		shown := stockOf(t, "A") // what the manager's screen says: 9
		// A customer buys 1 while the manager counts; the shelf then holds 7 (one more is
		// missing). A delta from the screen (7 − 9) would book −2 and leave the ledger at 6.
		MustCommit(t, l, accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 100}})))
		if q := stockOf(t, "A"); q != shown-1 {
			t.Fatalf("stock of A after the sale %d, want %d", q, shown-1)
		}
		count(t, "c2", "A", 7, -1, 7, true)
		if q := stockOf(t, "A"); q != 7 {
			t.Fatalf("stock of A after the count %d, want the 7 counted", q)
		}
	})

	t.Run("a retry answers the first booking", func(t *testing.T) {
		MustCommit(t, l, accepted("T1", 2, day, salePayload("s2", []item{{"A", 2, 100}})))
		count(t, "c2", "A", 7, -1, 5, false) // the first delta, the stock as it is now
		if q := stockOf(t, "A"); q != 5 {
			t.Fatalf("stock of A after the retry %d, want 5", q)
		}
	})

	t.Run("the id reused", func(t *testing.T) {
		before := counts(t, l)
		refused(t, "c2", "A", 6, CodeAdjustmentConflict)      // another count
		refused(t, "c2", "B", 7, CodeAdjustmentConflict)      // another SKU
		refused(t, "open-A", "A", 12, CodeAdjustmentConflict) // an adjustment's id
		if _, _, err := l.Adjust(ctx, "c2", "A", -1, ReasonAdjust); perr.CodeOf(err) != CodeAdjustmentConflict {
			t.Fatalf("Adjust with a count's id and its delta: %v, want %s", err, CodeAdjustmentConflict)
		}
		if after := counts(t, l); after["adjustments"] != before["adjustments"] || after["stock_moves"] != before["stock_moves"] {
			t.Fatalf("refused counts wrote rows: %v, then %v", before, after)
		}
	})

	t.Run("a count the ledger agrees with", func(t *testing.T) {
		before := counts(t, l)
		count(t, "c3", "A", 5, 0, 5, true)
		count(t, "c3", "A", 5, 0, 5, false)
		refused(t, "c3", "A", 4, CodeAdjustmentConflict)
		after := counts(t, l)
		if after["adjustments"] != before["adjustments"]+1 || after["stock_moves"] != before["stock_moves"] {
			t.Fatalf("rows before %v, after %v: want one adjustment and no stock move", before, after)
		}
		if d, c := counted(t, "c3"); d != 0 || !c.Valid || c.Int64 != 5 {
			t.Fatalf("adjustment c3: delta %d counted %v", d, c)
		}
	})

	t.Run("a SKU without stock", func(t *testing.T) {
		count(t, "c4", "N", 4, 4, 4, true)
		count(t, "c5", "E", 0, 0, 0, true)
		s := mustStock(t, l)
		if _, ok := s["E"]; ok || s["N"] != 4 {
			t.Fatalf("stock %v, want N 4 and no row for E", s)
		}
		count(t, "c6", "M", MaxAdjust, MaxAdjust, MaxAdjust, true)
	})

	t.Run("invalid", func(t *testing.T) {
		before := counts(t, l)
		refused(t, "x1", "A", -1, CodeAdjustmentInvalid)
		refused(t, "x2", "A", MaxAdjust+1, CodeAdjustmentInvalid)
		refused(t, "", "A", 1, CodeAdjustmentInvalid)
		refused(t, "x3", "", 1, CodeAdjustmentInvalid)
		MustAdjust(t, l, "down-M-1", "M", -MaxAdjust)
		MustAdjust(t, l, "down-M-2", "M", -MaxAdjust)
		refused(t, "x4", "M", 1, CodeAdjustmentInvalid) // −MaxAdjust held, 1 counted: beyond the bound
		if after := counts(t, l); after["adjustments"] != before["adjustments"]+2 {
			t.Fatalf("refused counts wrote rows: %v, then %v", before, after)
		}
	})
}
