package ledger

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// TestRefillOnV010Ledger opens a ledger made by v0.1.0's migration alone, holding opening
// stock as v0.1.0 booked it, with this release (003 applied): the stock stands, a refill's
// unknown marks and terminals work, and a count makes a SKU known.
func TestRefillOnV010Ledger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	body, err := fs.ReadFile(schema.Store(), "001_ledger.sql")
	if err != nil {
		t.Fatal(err)
	}
	old, err := sqlitedb.Open(ctx, path, fstest.MapFS{"001_ledger.sql": &fstest.MapFile{Data: body}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.W.ExecContext(ctx, `INSERT INTO adjustments (id, sku, delta, reason, at) VALUES ('o', 'A', 7, 'opening', '2025-03-01T00:00:00Z');
		INSERT INTO stock_moves (sku, delta, reason, ref, at) VALUES ('A', 7, 'opening', 'o', '2025-03-01T00:00:00Z');
		INSERT INTO stock (sku, qty) VALUES ('A', 7)`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	l, err := Open(ctx, path, "S1", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if st, err := l.Stock(ctx); err != nil || st["A"] != 7 {
		t.Fatalf("stock after the migration: %v %v", st, err)
	}
	if empty, err := l.Empty(ctx); err != nil || empty {
		t.Fatalf("a ledger with opening stock is empty: %v %v", empty, err)
	}
	moves, err := l.Adjustments(ctx, 0, 10)
	if err != nil || len(moves) != 1 || moves[0].N != 1 || moves[0].Reason != hqwire.MoveOpening {
		t.Fatalf("adjustments: %+v %v", moves, err)
	}
	if err := l.MarkUnknown(ctx, []string{"A"}, UnknownIncomplete); err != nil {
		t.Fatal(err)
	}
	if u, _ := l.UnknownStock(ctx); u["A"] != UnknownIncomplete {
		t.Fatalf("unknown: %v", u)
	}
	if _, _, _, err := l.Count(ctx, "c", "A", 6); err != nil {
		t.Fatal(err)
	}
	if u, _ := l.UnknownStock(ctx); len(u) != 0 {
		t.Fatalf("unknown after a count: %v", u)
	}
}

// TestRefilledNext: a refilled terminal's next seq is the first its ledger lacks, until
// it holds them all.
func TestRefilledNext(t *testing.T) {
	ctx := context.Background()
	l, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), "S1", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	at := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, seq := range []int64{1, 2, 5, 9} {
		if _, err := l.db.W.ExecContext(ctx, `INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final,
			received_ms, payload) VALUES ('T1', ?, 'heartbeat', 'h', ?, '2025-03-01', 'accepted', 1, 0, '{}')`, seq,
			at.Format(time.RFC3339Nano)); err != nil {
			t.Fatal(err)
		}
	}
	if next, _ := l.Next(ctx); next["T1"] != 10 {
		t.Fatalf("next before the mark: %v", next)
	}
	if err := l.MarkRefilled(ctx, []string{"T1"}); err != nil {
		t.Fatal(err)
	}
	if next, _ := l.Next(ctx); next["T1"] != 3 {
		t.Fatalf("next of a refilled terminal: %v, want 3", next)
	}
	for _, seq := range []int64{3, 4, 6, 7, 8} {
		l.db.W.ExecContext(ctx, `INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final,
			received_ms, payload) VALUES ('T1', ?, 'heartbeat', 'h', '', '', 'accepted', 1, 0, '{}')`, seq)
	}
	if next, _ := l.Next(ctx); next["T1"] != 10 {
		t.Fatalf("next once whole: %v, want 10", next)
	}
	var n int
	l.db.R.QueryRowContext(ctx, `SELECT count(*) FROM refilled_terminals`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d terminals still marked refilled", n)
	}
}
