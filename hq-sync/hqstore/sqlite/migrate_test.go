package sqlite_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// v010 returns the migrations v0.1.0 shipped of a database: its 001 alone.
func v010(t *testing.T, all fs.FS) fs.FS {
	t.Helper()
	names, err := fs.Glob(all, "001_*.sql")
	if err != nil || len(names) != 1 {
		t.Fatalf("001 migration: %v %v", names, err)
	}
	body, err := fs.ReadFile(all, names[0])
	if err != nil {
		t.Fatal(err)
	}
	return fstest.MapFS{names[0]: &fstest.MapFile{Data: body}}
}

// TestMigrateV010 opens a database made by v0.1.0's migration alone, holding a sale as
// v0.1.0 stored it (no payload), with this release: the row reads back as it was, its
// export says it has no payload, and stock moves and flow exceptions are kept.
func TestMigrateV010(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hq.db")
	old, err := sqlitedb.Open(ctx, path, v010(t, schema.HQ()))
	if err != nil {
		t.Fatal(err)
	}
	sale := storetest.Sale("S1", "T1", 1, storetest.D1, storetest.T0, 1234, "card")
	if _, err := old.W.ExecContext(ctx, `INSERT INTO rows (business_date, store, terminal, seq, kind, flow_no, at, hash,
		amount, cash, card, qr, methods, batch_id, received_ms, payload) VALUES (?, 'S1', 'T1', 1, 'sale', ?, ?, ?, 1234, 0, 1234, 0, 2,
		'b-1', 1, NULL)`, storetest.D1, sale.FlowNo, sale.At.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"), sale.Hash); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := s.Rows(ctx, storetest.D1, "S1")
	if err != nil || len(rows) != 1 || rows[0].Amount != 1234 || rows[0].ByMethod["card"] != 1234 {
		t.Fatalf("v0.1.0 row after the migration: %+v, %v", rows, err)
	}
	exp, err := s.ExportRows(ctx, "S1", "", 0, 10)
	if err != nil || len(exp) != 1 || exp[0].Hash != sale.Hash || exp[0].Payload != nil {
		t.Fatalf("export of a v0.1.0 row: %+v, %v", exp, err)
	}
	if n, _, err := s.PutMoves(ctx, "S1", "m-1", []hqwire.StockMove{{N: 1, ID: "o", SKU: "A", Delta: 5,
		Reason: hqwire.MoveOpening, At: storetest.T0}}, storetest.T0); err != nil || n != 1 {
		t.Fatalf("moves after the migration: %d, %v", n, err)
	}
	flow := storetest.FlowException("T1", 2, storetest.D1, storetest.T0, 1, 2, "T1:1", 1)
	storetest.MustPutFlows(t, s, "S1", "f-1-1", storetest.T0, 1, flow)
	storetest.CheckFlows(t, s, storetest.D1, "S1", false, storetest.StoredFlow("S1", flow, storetest.T0))
}
