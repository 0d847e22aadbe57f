package ledger

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// v010Ledger makes a ledger at path with the migrations v0.1.0 shipped alone (001), holding
// two sales of 2025-01-10 written as v0.1.0 wrote them.
func v010Ledger(t *testing.T, path string) {
	t.Helper()
	body, err := fs.ReadFile(schema.Store(), "001_ledger.sql")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlitedb.Open(context.Background(), path, fstest.MapFS{"001_ledger.sql": {Data: body}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`INSERT INTO meta (k, v) VALUES ('store_id', 'S1')`,
		`INSERT INTO events (terminal, seq, kind, hash, at, business_date, status, final, flow_no, received_ms, payload) VALUES
			('T1', 1, 'sale', 'h1', '2025-01-10T03:00:00Z', '2025-01-10', 'accepted', 1, 1, 0, '{}'),
			('T2', 1, 'sale', 'h2', '2025-01-10T03:01:00Z', '2025-01-10', 'accepted', 1, 2, 0, '{}')`,
		`INSERT INTO sales VALUES ('T1', 1, 's1', '2025-01-10T03:00:00Z', '2025-01-10', 1, 300, 0, 0, 0),
			('T2', 1, 's2', '2025-01-10T03:01:00Z', '2025-01-10', 2, 100, 0, 0, 0)`,
		`INSERT INTO sale_lines VALUES ('T1', 1, 1, 1, 'A', '', 2, 100, 200), ('T1', 1, 2, 2, 'B', '', 1, 100, 100),
			('T2', 1, 1, 1, 'A', '', 1, 100, 100)`,
		`INSERT INTO stock VALUES ('A', -3), ('B', -1)`,
		`INSERT INTO payments VALUES ('2025-01-10', 1, 1, 'T1', 1, 'cash', 300, ''), ('2025-01-10', 2, 1, 'T2', 1, 'card', 100, '')`,
	} {
		if _, err := db.W.Exec(q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
}

// TestMigrateV010Ledger: a ledger made by v0.1.0 opens, takes migration 002 (the indexes
// the archive reads a day by) and keeps what it held; the archive's reads of a day go by
// those indexes.
func TestMigrateV010Ledger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	v010Ledger(t, path)
	l := mustOpenAt(t, path, day)
	defer l.Close()
	var applied []string
	rows, err := l.db.R.Query(`SELECT name FROM migrations ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		applied = append(applied, n)
	}
	rows.Close()
	var want []string // every migration the ledger has now, 002 among them
	entries, err := fs.ReadDir(schema.Store(), ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		want = append(want, e.Name())
	}
	if !slices.Equal(applied, want) || !slices.Contains(applied, "002_archive_indexes.sql") {
		t.Fatalf("migrations after the open: %v, want %v", applied, want)
	}
	tot, err := l.Totals(ctx, "2025-01-10")
	if err != nil {
		t.Fatal(err)
	}
	if tot["T1"].Sales != 1 || tot["T1"].Amount != 300 || tot["T2"].Amount != 100 {
		t.Errorf("the v0.1.0 ledger's day after the migration: %+v", tot)
	}
	for q, index := range map[string]string{
		`SELECT count(*) FROM events WHERE business_date IN ('2025-01-10')`:                                                                "events_date",
		`SELECT count(*) FROM sale_lines WHERE (terminal, seq) IN (SELECT terminal, seq FROM sales WHERE business_date IN ('2025-01-10'))`: "sale_lines_event",
	} {
		var plan []string
		rows, err := l.db.R.Query(`EXPLAIN QUERY PLAN ` + q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, parent, unused int
			var detail string
			rows.Scan(&id, &parent, &unused, &detail)
			plan = append(plan, detail)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "; "), index) {
			t.Errorf("%s: plan %q does not use %s", q, plan, index)
		}
	}
}
