package ledger

import (
	"context"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// TestMigrationsKeepRows opens a ledger written before migrations 003 (which re-creates
// sale_lines and hq_outbox without their (terminal, seq) keys) and 004 (sales and payments
// keyed by flow number), 005 (the outbox reads time, hash and payload from the event), 006
// (flow numbers unique through events) and 007 (a sale's lines are its stock movement; the
// outbox without the columns only the uploader's own state uses): every row is kept (a
// sale's stock_moves rows give way to its lines, with the same proof of stock), the
// outbox's ids go on from where they were, payments still belong to their sales, and new
// sales commit and reach the outbox whole.
func TestMigrationsKeepRows(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	old := fstest.MapFS{}
	for _, name := range []string{"001_ledger.sql", "002_hq_outbox_date.sql"} {
		b, err := fs.ReadFile(schema.Store(), name)
		if err != nil {
			t.Fatal(err)
		}
		old[name] = &fstest.MapFile{Data: b}
	}
	db, err := sqlitedb.Open(ctx, path, old)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO sale_lines VALUES ('T1', 1, 1, 1, 'A', 'Apple', 2, 150, 300), ('T1', 1, 2, 2, 'B', '', 1, 20, 20)`,
		`INSERT INTO hq_outbox (kind, terminal, seq, business_date, flow_no, at, hash, payload, batch_id, sent_ms)
			VALUES ('sale', 'T1', 1, '2026-11-29', 1, 'x', 'h1', '{}', 'b1', 5), ('sale', 'T1', 2, '2026-11-29', 2, 'x', 'h2', '{}', NULL, NULL)`,
		`DELETE FROM hq_outbox WHERE seq = 2`, // the AUTOINCREMENT counter stays at 2
		`INSERT INTO sales VALUES ('T1', 1, 's1', 'x', '2026-11-29', 1, 320, 0, 0, 0), ('T3', 7, 's7', 'x', '2026-11-28', 4, 100, 0, 1, 0)`,
		`INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final, flow_no, received_ms, payload)
			VALUES ('T1', 1, 'sale', 'h1', 'x', '2026-11-29', 'accepted', 1, 1, 0, '{}'), ('T3', 7, 'sale', 'h7', 'x', '2026-11-28', 'accepted', 1, 4, 0, '{}')`,
		`INSERT INTO flow_numbers VALUES ('2026-11-29', 1, 'T1', 1, 'sale'), ('2026-11-28', 4, 'T3', 7, 'sale')`,
		`INSERT INTO payments VALUES ('T1', 1, 1, 'cash', 300, ''), ('T1', 1, 2, 'card', 20, 'ref'), ('T3', 7, 1, 'qr', 100, 'q')`,
		`INSERT INTO stock VALUES ('A', 8), ('B', 4)`,
		`INSERT INTO stock_moves (sku, delta, reason, ref, at) VALUES ('A', 10, 'opening', 'o-A', 'x'),
			('B', 5, 'opening', 'o-B', 'x'), ('A', -2, 'sale', 'T1:1', 'x'), ('B', -1, 'sale', 'T1:1', 'x')`,
	} {
		if _, err := db.W.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	l := mustOpenAt(t, path, day)
	var lines, outbox, seqv int
	if err := l.db.R.QueryRow(`SELECT count(*) FROM sale_lines WHERE terminal = 'T1' AND seq = 1`).Scan(&lines); err != nil || lines != 2 {
		t.Fatalf("sale_lines after the migration: %d, %v", lines, err)
	}
	if err := l.db.R.QueryRow(`SELECT count(*) FROM hq_outbox WHERE id = 1 AND terminal = 'T1' AND seq = 1`).Scan(&outbox); err != nil || outbox != 1 {
		t.Fatalf("hq_outbox after the migration: %d, %v", outbox, err)
	}
	if proven, err := l.ProvenStock(ctx); err != nil || !reflect.DeepEqual(proven, map[string]int64{"A": 8, "B": 4}) {
		t.Errorf("proven stock after the migration: %v, %v; want A 8, B 4 as before", proven, err)
	}
	var saleMoves int
	if err := l.db.R.QueryRow(`SELECT count(*) FROM stock_moves WHERE reason = 'sale'`).Scan(&saleMoves); err != nil || saleMoves != 0 {
		t.Errorf("%d stock_moves rows of sales after the migration (%v)", saleMoves, err)
	}
	if err := l.db.R.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'hq_outbox'`).Scan(&seqv); err != nil || seqv != 2 {
		t.Fatalf("hq_outbox's id counter after the migration: %d, %v", seqv, err)
	}
	var paid, n int
	if err := l.db.R.QueryRow(`SELECT sum(p.amount), count(*) FROM sales s JOIN payments p
		ON p.business_date = s.business_date AND p.flow_no = s.flow_no AND p.terminal = s.terminal AND p.seq = s.seq`).Scan(&paid, &n); err != nil || paid != 420 || n != 3 {
		t.Errorf("payments joined to their sales after the migration: %d fen in %d rows (%v), want 420 in 3", paid, n, err)
	}
	MustCommit(t, l, withFlow(accepted("T2", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 1))
	var id int
	if err := l.db.R.QueryRow(`SELECT id FROM hq_outbox WHERE terminal = 'T2'`).Scan(&id); err != nil || id != 3 {
		t.Errorf("the first outbox row after the migration has id %d (%v), want 3", id, err)
	}
	if snap, err := l.Snapshot(ctx); err != nil || snap.MaxFlow["2026-11-28"] != 4 {
		t.Errorf("snapshot's flow numbers after the migrations: %v, %v", snap.MaxFlow, err)
	}
	rows, err := l.OutboxAfter(ctx, 2, 10) // the sale committed after the migrations
	if err != nil || len(rows) != 1 || rows[0].Row.Terminal != "T2" || len(rows[0].Row.Payload) == 0 || rows[0].Row.Hash == "" {
		t.Errorf("outbox after the migrations: %+v, %v", rows, err)
	}
	var payloadCols int
	if err := l.db.R.QueryRow(`SELECT count(*) FROM pragma_table_info('hq_outbox') WHERE name IN ('at', 'hash', 'payload', 'batch_id', 'sent_ms')`).Scan(&payloadCols); err != nil || payloadCols != 0 {
		t.Errorf("hq_outbox still has %d of at, hash, payload, batch_id, sent_ms (%v)", payloadCols, err)
	}
	if proven, err := l.ProvenStock(ctx); err != nil || !reflect.DeepEqual(proven, map[string]int64{"A": 7, "B": 4}) {
		t.Errorf("proven stock after a sale of one A: %v, %v; want A 7, B 4", proven, err)
	}
	for _, idx := range []string{"sales_sale_id", "hq_outbox_unsent", "sqlite_autoindex_hq_outbox_1", "sqlite_autoindex_sale_lines_1"} {
		var n int
		if err := l.db.R.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = ?`, idx).Scan(&n); err != nil || n != 0 {
			t.Errorf("index %s still there (%d, %v)", idx, n, err)
		}
	}
}

// openBefore opens a ledger at path with the store's migrations before the one numbered
// first (its name prefix), as a ledger of an earlier release holds it.
func openBefore(t *testing.T, path, first string) *sqlitedb.DB {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), path, migrationsBefore(t, first))
	if err != nil {
		t.Fatal(err)
	}
	return db
}
