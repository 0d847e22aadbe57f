package ledger

import (
	"context"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"
	"testing/fstest"
	"time"

	"github.com/posgate/posgate/hq-sync/hq"
	"github.com/posgate/posgate/internal/wire"

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

// TestParkedOfAnEarlierLedgerDated: a ledger written before migration 019 holds two parked
// events: one whose time could not be read, parked at 07:00 store time on 2025-03-01 (a
// backlog drained as the store opened; 23:00 the day before in UTC), and one whose time
// the wire refused, 9999-12-31T23:00-10:00 (its events row dated 10000-01-01). Each is
// filed under the store's date when it was parked, 2025-03-01, as the store-server files
// such events since 019, and HQ hears of them under that date.
func TestParkedOfAnEarlierLedgerDated(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := openBefore(t, path, "019")
	parkedMs := time.Date(2025, 3, 1, 7, 0, 0, 0, shanghai).UnixMilli()
	for _, q := range []string{
		`INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final, code, message, received_ms, payload)
			VALUES ('T1', 1, '', '', '', '', 'rejected', 1, 'wire_syntax', 'malformed JSON', ?1, '{}'),
			('T2', 1, 'sale', 'h', '10000-01-01T09:00:00Z', '10000-01-01', 'rejected', 1, 'wire_time', 'far', ?1, '{}')`,
		`INSERT INTO parked (terminal, seq, kind, code, message, payload, at, parked_ms)
			VALUES ('T1', 1, '', 'wire_syntax', 'malformed JSON', '{}', '', ?1),
			('T2', 1, 'sale', 'wire_time', 'far', '{}', '10000-01-01T09:00:00Z', ?1)`,
	} {
		if _, err := db.W.Exec(q, parkedMs); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	l := mustOpenAt(t, path, day)
	parked, err := l.Parked(ctx, 0, true)
	if err != nil || len(parked) != 2 {
		t.Fatalf("parked %+v, %v", parked, err)
	}
	for _, p := range parked {
		if p.BusinessDate != "2025-03-01" {
			t.Errorf("parked %s is filed under %q, want 2025-03-01, the store's date when it was parked",
				wire.Key(p.Terminal, p.Seq), p.BusinessDate)
		}
	}
	var xs []hq.Exception
	if err := l.ViewHQ(ctx, func(r *HQReader) error {
		xs, _, _, err = r.ExceptionsAfter(ctx, 0, 100)
		return err
	}); err != nil || len(xs) != 2 {
		t.Fatalf("exceptions for HQ %+v, %v", xs, err)
	}
	for _, x := range xs {
		if x.BusinessDate != "2025-03-01" {
			t.Errorf("HQ hears of parked %s under %q, want 2025-03-01", wire.Key(x.Terminal, x.Seq), x.BusinessDate)
		}
	}
}

// TestParkedOfAnEarlierLedgerKeepsItsState: a ledger written before migration 020 (one
// parked row per key) holds a conflict parked behind an accepted sale, resolved by the
// manager, and an open parked rejection. After the upgrade both keep their state and their
// identity at HQ (sku ”), HQ hears of no change, each has its content's hash (the
// conflict's read from its content), so a redelivery of the old conflict changes nothing,
// and a further content of the key is parked beside it.
func TestParkedOfAnEarlierLedgerKeepsItsState(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := openBefore(t, path, "020")
	original := withFlow(accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 500}})), 1)
	other := accepted("T1", 1, day, salePayload("s1", []item{{"A", 1, 900}}))
	at := day.UTC().Format(time.RFC3339Nano)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final, flow_no, received_ms, payload)
			VALUES ('T1', 1, 'sale', ?, ?, ?, 'accepted', 1, 1, 0, ?)`, []any{original.Hash, at, dayDate, original.Payload}},
		{`INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final, code, message, received_ms, payload)
			VALUES ('T2', 1, 'sale', 'hr', ?, ?, 'rejected', 1, 'payload_invalid', 'bad', 0, '{}')`, []any{at, dayDate}},
		{`INSERT INTO parked (terminal, seq, kind, code, message, payload, at, parked_ms, business_date)
			VALUES ('T1', 1, 'sale', 'idempotency_conflict', 'used', ?, ?, 5, ?),
			('T2', 1, 'sale', 'payload_invalid', 'bad', '{}', ?, 6, ?)`, []any{other.Payload, at, dayDate, at, dayDate}},
		{`UPDATE parked SET resolved = 1, resolved_at = ?, resolution = 'entered again' WHERE terminal = 'T1'`, []any{at}},
	} {
		if _, err := db.W.Exec(q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	var changes int
	if err := db.W.QueryRow(`SELECT max(id) FROM exception_changes`).Scan(&changes); err != nil {
		t.Fatal(err)
	}
	db.Close()

	l := mustOpenAt(t, path, day)
	parked, err := l.Parked(ctx, 0, true)
	if err != nil || len(parked) != 2 {
		t.Fatalf("parked %+v, %v", parked, err)
	}
	byKey := map[string]Parked{}
	for _, p := range parked {
		byKey[wire.Key(p.Terminal, p.Seq)] = p
	}
	if p := byKey["T1:1"]; !p.Resolved || p.Resolution != "entered again" || p.Hash != other.Hash {
		t.Errorf("the parked conflict after the upgrade: %+v; want it resolved, of hash %s", p, other.Hash)
	}
	if p := byKey["T2:1"]; p.Resolved || p.Hash != "hr" {
		t.Errorf("the parked rejection after the upgrade: %+v; want it open, of its event's hash", p)
	}
	xs, last := exceptionsAfter(t, l, int64(changes), 100)
	if len(xs) != 0 {
		t.Errorf("the upgrade sent HQ changes %q", briefs(xs))
	}
	all, _ := exceptionsAfter(t, l, 0, 100)
	if len(all) != 2 || all[0].SKU != "" || all[1].SKU != "" || all[1].Terminal != "T1" || !all[1].Resolved ||
		all[1].Resolution != "entered again" {
		t.Errorf("the parked events as HQ holds them after the upgrade: %+v", all)
	}
	before := dump(t, l)
	MustCommit(t, l, other)
	if after := dump(t, l); !reflect.DeepEqual(after, before) {
		t.Errorf("a redelivery of the conflict parked before the upgrade changed the ledger")
	}
	third := accepted("T1", 1, day, salePayload("s1", []item{{"A", 3, 900}}))
	MustCommit(t, l, third)
	if xs, _ := exceptionsAfter(t, l, last, 100); len(xs) != 1 || xs[0].SKU != third.Hash || xs[0].Resolved {
		t.Errorf("exceptions for HQ after a third content: %q, want it open under its hash", briefs(xs))
	}
	if _, _, open, err := l.OpenExceptions(ctx); err != nil || open != 2 {
		t.Errorf("open parked %d (%v), want the rejection and the third content", open, err)
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
