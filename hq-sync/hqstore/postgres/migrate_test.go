package postgres_test

import (
	"context"
	"fmt"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/schema"
)

// TestMigrateV010 makes a schema with v0.1.0's migration alone, as v0.1.0's serve records
// it, holding a sale as v0.1.0 stored it (no payload), and opens it with this release: the
// row reads back as it was, its export says it has no payload, and stock moves and flow
// exceptions are kept.
func TestMigrateV010(t *testing.T) {
	ctx := context.Background()
	name := fmt.Sprintf("hq_test_%d", schemas.Add(1))
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	body, err := fs.ReadFile(schema.HQPostgres(), "001_hq.sql")
	if err != nil {
		t.Fatal(err)
	}
	sale := storetest.Sale("S1", "T1", 1, storetest.D1, storetest.T0, 1234, "card")
	for _, q := range []string{
		"CREATE SCHEMA " + name,
		"SET search_path = " + name,
		string(body),
		`CREATE TABLE migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO migrations (name) VALUES ('001_hq.sql')`,
		`CREATE TABLE rows_p20250301 PARTITION OF rows FOR VALUES FROM ('2025-03-01') TO ('2025-03-02')`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	if _, err := c.Exec(ctx, `INSERT INTO rows (store, terminal, seq, kind, business_date, flow_no, at, hash, amount,
		cash, card, qr, methods, batch_id, received_ms, payload) VALUES ('S1', 'T1', 1, 'sale', $1, $2, $3, $4, 1234, 0, 1234, 0, 2,
		'b-1', 1, NULL)`, storetest.D1, sale.FlowNo, sale.At.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"), sale.Hash); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(ctx, pgURL+"&search_path="+name)
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
