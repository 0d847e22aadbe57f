package ledger

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// TestMigrate003KeepsRows opens a ledger written before migration 003 (which re-creates
// sale_lines and hq_outbox without their (terminal, seq) keys): every row is kept, the
// outbox's ids go on from where they were, and new sales commit.
func TestMigrate003KeepsRows(t *testing.T) {
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
	} {
		if _, err := db.W.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	l := mustOpenAt(t, path, day)
	var lines, outbox, seqv int
	var batch string
	if err := l.db.R.QueryRow(`SELECT count(*) FROM sale_lines WHERE terminal = 'T1' AND seq = 1`).Scan(&lines); err != nil || lines != 2 {
		t.Fatalf("sale_lines after the migration: %d, %v", lines, err)
	}
	if err := l.db.R.QueryRow(`SELECT count(*), max(batch_id) FROM hq_outbox WHERE id = 1 AND sent_ms = 5`).Scan(&outbox, &batch); err != nil || outbox != 1 || batch != "b1" {
		t.Fatalf("hq_outbox after the migration: %d %q, %v", outbox, batch, err)
	}
	if err := l.db.R.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'hq_outbox'`).Scan(&seqv); err != nil || seqv != 2 {
		t.Fatalf("hq_outbox's id counter after the migration: %d, %v", seqv, err)
	}
	MustCommit(t, l, withFlow(accepted("T2", 1, day, salePayload("s1", []item{{"A", 1, 100}})), 1))
	var id int
	if err := l.db.R.QueryRow(`SELECT id FROM hq_outbox WHERE terminal = 'T2'`).Scan(&id); err != nil || id != 3 {
		t.Errorf("the first outbox row after the migration has id %d (%v), want 3", id, err)
	}
	for _, idx := range []string{"sales_sale_id", "sqlite_autoindex_hq_outbox_1", "sqlite_autoindex_sale_lines_1"} {
		var n int
		if err := l.db.R.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = ?`, idx).Scan(&n); err != nil || n != 0 {
			t.Errorf("index %s still there (%d, %v)", idx, n, err)
		}
	}
}
