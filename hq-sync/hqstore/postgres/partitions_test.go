package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
)

// partitionsOf lists the partitions of table in the schema of url's search_path.
func partitionsOf(t *testing.T, schema, table string) []string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace
		WHERE p.relname = $1 AND n.nspname = $2 ORDER BY 1`, table, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// newSchema makes an empty schema and returns its name and the URL of the database with
// that schema as its search path.
func newSchema(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("hq_test_%d", schemas.Add(1))
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	return name, pgURL + "&search_path=" + name
}

func openURL(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPartitionsByDay: a batch makes the partitions of the days it stores, PrepareDays
// those of the days to come, and each day's rows are in its own partition.
func TestPartitionsByDay(t *testing.T) {
	ctx := context.Background()
	schema, url := newSchema(t)
	s := openURL(t, url)
	rows := append(storetest.Sales("S1", "T1", 1, 3, storetest.D1, storetest.T0),
		storetest.Sales("S1", "T1", 10, 2, storetest.D2, storetest.T0)...)
	b, h := storetest.NewBatch("S1", "b", rows, storetest.Day(storetest.D1, 1, storetest.T0, rows))
	if rc := storetest.MustPut(t, s, b, h, storetest.T0); rc.New != 5 || rc.Days != 1 {
		t.Fatalf("receipt %+v", rc)
	}
	if err := s.PrepareDays(ctx, "2025-03-02", "2025-03-04"); err != nil {
		t.Fatal(err)
	}
	want := []string{"rows_p20250301", "rows_p20250302", "rows_p20250303", "rows_p20250304"}
	if got := partitionsOf(t, schema, "rows"); !slices.Equal(got, want) {
		t.Fatalf("partitions of rows: %v, want %v", got, want)
	}
	if got := partitionsOf(t, schema, "day_txns"); len(got) != 4 {
		t.Fatalf("partitions of day_txns: %v", got)
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n1, n2 int
	if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM rows_p20250301), (SELECT count(*) FROM rows_p20250302)`).
		Scan(&n1, &n2); err != nil {
		t.Fatal(err)
	}
	if n1 != 3 || n2 != 2 {
		t.Fatalf("rows by partition %d and %d, want 3 and 2", n1, n2)
	}
	// Each day of rows is split by store into storeParts tables; a store's rows are in one.
	parts := partitionsOf(t, schema, "rows_p20250301")
	if len(parts) != 8 || parts[0] != "rows_p20250301_h0" || parts[7] != "rows_p20250301_h7" {
		t.Fatalf("partitions of rows_p20250301: %v, want rows_p20250301_h0 to _h7", parts)
	}
	var where []string
	for _, p := range parts {
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM `+p).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			where = append(where, fmt.Sprintf("%s: %d", p, n))
		}
	}
	if len(where) != 1 || !strings.HasSuffix(where[0], ": 3") {
		t.Fatalf("S1's 3 rows of the day are in %v, want all in one part", where)
	}
}

// TestRetain: Retain drops the days before its limit that a reconciliation of every store
// covered, and keeps the others; rows and declarations of a dropped day sent again are
// acknowledged as held and not stored, and another process that still knew the day's
// partition learns it is gone. A dropped day's flow exceptions go with it and are not
// stored again when sent again.
func TestRetain(t *testing.T) {
	ctx := context.Background()
	schema, url := newSchema(t)
	s, other := openURL(t, url), openURL(t, url)
	d3 := "2025-03-03"
	var all []hqwire.Row
	for i, d := range []string{storetest.D1, storetest.D2, d3} {
		rows := storetest.Sales("S1", "T1", int64(1+10*i), 3, d, storetest.T0)
		all = append(all, rows...)
		b, h := storetest.NewBatch("S1", "b-"+d, rows, storetest.Day(d, 1, storetest.T0, rows))
		storetest.MustPut(t, s, b, h, storetest.T0)
	}
	flowD1 := storetest.FlowException("T1", 2, storetest.D1, storetest.T0, 2, 4, "T1:1", 10)
	flowD2 := storetest.FlowException("T1", 12, storetest.D2, storetest.T0, 12, 14, "T1:11", 11)
	storetest.MustPutFlows(t, s, "S1", "f-10-11", storetest.T0, 2, flowD1, flowD2)
	// The other process sees D1's partition before it is dropped.
	b, h := storetest.NewBatch("S2", "b", storetest.Sales("S2", "T1", 1, 1, storetest.D1, storetest.T0))
	storetest.MustPut(t, other, b, h, storetest.T0)
	for _, run := range []hqstore.ReconcileRun{
		{Date: storetest.D1, Finished: time.Now(), OK: true},
		{Date: storetest.D2, Store: "S1", Finished: time.Now(), OK: true}, // one store only: not covered
		{Date: d3, Finished: time.Now(), OK: false},                       // covered, though it did not reconcile
	} {
		if err := s.RecordReconcile(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Retain(ctx, d3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Dropped, []string{storetest.D1}) || !slices.Equal(got.Unreconciled, []string{storetest.D2}) {
		t.Fatalf("retained %+v, want D1 dropped and D2 kept unreconciled", got)
	}
	if parts := partitionsOf(t, schema, "rows"); !slices.Equal(parts, []string{"rows_p20250302", "rows_p20250303"}) {
		t.Fatalf("partitions after Retain: %v", parts)
	}
	for _, st := range []hqstore.Storage{s, other} {
		if rows, err := st.Rows(ctx, storetest.D1, ""); err != nil || len(rows) != 0 {
			t.Fatalf("rows of the dropped day: %d (%v)", len(rows), err)
		}
	}
	// Everything sent again, through both processes: the dropped day's rows and declaration
	// are held, the others duplicates of what HQ keeps.
	for i, st := range []hqstore.Storage{other, s} {
		b, h := storetest.NewBatch("S1", fmt.Sprintf("again-%d", i), all, storetest.Day(storetest.D1, 2, storetest.T0, all[:3]))
		rc := storetest.MustPut(t, st, b, h, storetest.T0.Add(time.Hour))
		if rc.New != 0 || rc.Days != 0 {
			t.Fatalf("resent through process %d: %+v, want nothing new", i, rc)
		}
	}
	if days, err := s.Days(ctx, storetest.D1, ""); err != nil || len(days) != 0 {
		t.Fatalf("declarations of the dropped day: %v (%v)", days, err)
	}
	storetest.MustPutFlows(t, s, "S1", "f-10-11", storetest.T0.Add(time.Hour), 0, flowD1, flowD2)
	storetest.CheckFlows(t, s, storetest.D1, "", false)
	storetest.CheckFlows(t, s, "", "", false, storetest.StoredFlow("S1", flowD2, storetest.T0))
	if rows, err := s.Rows(ctx, storetest.D2, ""); err != nil || len(rows) != 3 {
		t.Fatalf("rows of the kept day: %d (%v)", len(rows), err)
	}
	if parts := partitionsOf(t, schema, "rows"); len(parts) != 2 {
		t.Fatalf("partitions after the resend: %v (a dropped day's made again?)", parts)
	}
}

// TestRetainFinishesADetach: a Retain cut short while a partition waits to be detached
// (a reader of rows holds it) leaves the partition pending detach; the next Retain, once
// the reader is gone, completes the detach and drops the day.
func TestRetainFinishesADetach(t *testing.T) {
	ctx := context.Background()
	schema, url := newSchema(t)
	s := openURL(t, url)
	rows := storetest.Sales("S1", "T1", 1, 3, storetest.D1, storetest.T0)
	b, h := storetest.NewBatch("S1", "b", rows, storetest.Day(storetest.D1, 1, storetest.T0, rows))
	storetest.MustPut(t, s, b, h, storetest.T0)
	if err := s.RecordReconcile(ctx, hqstore.ReconcileRun{Date: storetest.D1, Finished: time.Now(), OK: true}); err != nil {
		t.Fatal(err)
	}
	reader, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM rows`).Scan(&n); err != nil || n != 3 {
		t.Fatal(n, err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = s.Retain(short, "2025-03-03")
	cancel()
	if err == nil {
		t.Fatal("Retain dropped a day a reader still held")
	}
	var pending bool
	if err := reader.QueryRow(ctx, `SELECT bool_or(inhdetachpending) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'rows_p20250301'`,
		schema).Scan(&pending); err != nil || !pending {
		t.Fatalf("the cut-short detach left pending=%v (%v); the test needs it pending", pending, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The server goes on with the cut-short detach until the reader is gone (it sees the
	// closed connection only then), holding the lock of one Retain at a time: a few tries,
	// until no table of the day is left, attached or not.
	for tries := 0; ; tries++ {
		if _, err := s.Retain(ctx, "2025-03-03"); err != nil {
			t.Fatalf("Retain after the cut-short one: %v", err)
		}
		var left int
		if err := reader.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname LIKE '%p20250301%'`, schema).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if tries == 100 {
			t.Fatalf("%d tables of the dropped day left after %d passes", left, tries+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if parts := partitionsOf(t, schema, "rows"); len(parts) != 0 {
		t.Fatalf("partitions after Retain: %v", parts)
	}
}

// TestTwoProcessesSameBatch: two stores on one database (as two serve processes) given the
// same batches at once, over and over: each batch is stored once, answered once as new and
// otherwise as a duplicate, and every row is held once.
func TestTwoProcessesSameBatch(t *testing.T) {
	ctx := context.Background()
	_, url := newSchema(t)
	procs := []*postgres.Store{openURL(t, url), openURL(t, url)}
	const batches, per = 30, 50
	for i := range batches {
		rows := storetest.Sales("S1", "T1", int64(1+i*per), per, storetest.D1, storetest.T0)
		b, h := storetest.NewBatch("S1", fmt.Sprintf("b-%d", i), rows)
		var wg sync.WaitGroup
		rcs := make([]hqwire.Receipt, 4)
		errs := make([]error, 4)
		for k := range 4 {
			wg.Go(func() { rcs[k], errs[k] = procs[k%2].PutBatch(ctx, b, h, storetest.T0) })
		}
		wg.Wait()
		fresh := 0
		for k := range 4 {
			if errs[k] != nil {
				t.Fatal(errs[k])
			}
			if !rcs[k].Duplicate {
				fresh++
			}
			if rcs[k].New != per {
				t.Fatalf("batch %d answer %d: %+v", i, k, rcs[k])
			}
		}
		if fresh != 1 {
			t.Fatalf("batch %d answered new %d times, want once", i, fresh)
		}
	}
	rows, err := procs[0].Rows(ctx, storetest.D1, "S1")
	if err != nil || len(rows) != batches*per {
		t.Fatalf("%d rows (%v), want %d", len(rows), err, batches*per)
	}
}

// TestDayOfOneTable: a day whose rows partition is one table, as serve made every day
// before days were split by store, takes its rows, is read, and is dropped by Retain, in a
// database whose other days are split.
func TestDayOfOneTable(t *testing.T) {
	ctx := context.Background()
	schema, url := newSchema(t)
	s := openURL(t, url)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range []string{ // the day's partitions as the serve of v0.1.0 made them
		`CREATE TABLE rows_p20250301 (LIKE rows INCLUDING ALL)`,
		`ALTER TABLE rows ATTACH PARTITION rows_p20250301 FOR VALUES FROM ('2025-03-01') TO ('2025-03-02')`,
		`CREATE TABLE day_txns_p20250301 (LIKE day_txns INCLUDING ALL)`,
		`ALTER TABLE day_txns ATTACH PARTITION day_txns_p20250301 FOR VALUES FROM ('2025-03-01') TO ('2025-03-02')`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	d1 := storetest.Sales("S1", "T1", 1, 3, storetest.D1, storetest.T0)
	d2 := storetest.Sales("S1", "T1", 10, 2, storetest.D2, storetest.T0)
	b, h := storetest.NewBatch("S1", "b", append(d1, d2...), storetest.Day(storetest.D1, 1, storetest.T0, d1))
	if rc := storetest.MustPut(t, s, b, h, storetest.T0); rc.New != 5 || rc.Days != 1 {
		t.Fatalf("receipt %+v", rc)
	}
	if parts := partitionsOf(t, schema, "rows_p20250301"); len(parts) != 0 {
		t.Fatalf("the day of one table got partitions %v", parts)
	}
	if parts := partitionsOf(t, schema, "rows_p20250302"); len(parts) != 8 {
		t.Fatalf("a new day has partitions %v, want 8", parts)
	}
	for d, n := range map[string]int{storetest.D1: 3, storetest.D2: 2} {
		if rows, err := s.Rows(ctx, d, ""); err != nil || len(rows) != n {
			t.Fatalf("rows of %s: %d (%v), want %d", d, len(rows), err, n)
		}
	}
	// The same rows again: held, found in either kind of day.
	b, h = storetest.NewBatch("S1", "again", append(d1, d2...))
	if rc := storetest.MustPut(t, s, b, h, storetest.T0); rc.New != 0 {
		t.Fatalf("resent: %+v, want nothing new", rc)
	}
	for _, d := range []string{storetest.D1, storetest.D2} {
		if err := s.RecordReconcile(ctx, hqstore.ReconcileRun{Date: d, Finished: time.Now(), OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	if n := rowTables(t, c, schema); n != 10 {
		t.Fatalf("%d tables of days of rows, want 10: the day of one table, the new day and its 8 parts", n)
	}
	got, err := s.Retain(ctx, "2025-03-03")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Dropped, []string{storetest.D1, storetest.D2}) {
		t.Fatalf("retained %+v, want both days dropped", got)
	}
	if parts := partitionsOf(t, schema, "rows"); len(parts) != 0 {
		t.Fatalf("partitions after Retain: %v", parts)
	}
	if n := rowTables(t, c, schema); n != 0 {
		t.Fatalf("%d tables of the dropped days left", n)
	}
}

// rowTables counts the tables of days of rows in schema (partitions and their parts).
func rowTables(t *testing.T, c *pgx.Conn, schema string) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname LIKE 'rows\_p%' AND c.relkind IN ('r', 'p')`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
