package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
)

// open opens a fresh HQ database in a temporary directory, closed when tb ends.
func open(tb testing.TB) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "hq.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

func TestStorage(t *testing.T) {
	storetest.Run(t, func(t *testing.T) hqstore.Storage { return open(t) })
}

// TestReopen checks that the migrations apply once and the data survives a reopen.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hq.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	b, h := storetest.NewBatch("S1", "b-1", storetest.Sales("S1", "T1", 1, 3, storetest.D1, storetest.T0))
	first := storetest.MustPut(t, s, b, h, storetest.T0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rc := storetest.MustPut(t, s, b, h, storetest.T0); !rc.Duplicate || rc.New != first.New {
		t.Fatalf("replay after reopen: %+v", rc)
	}
}

// BenchmarkPutBatch stores batches of 5,000 rows: go test -run '^$' -bench PutBatch ./hq-sync/hqstore/sqlite/
func BenchmarkPutBatch(b *testing.B) {
	storetest.BenchPutBatch(b, open(b))
}

// BenchmarkRows reads one business day of 1,000,000 rows across 500 stores, and its 500
// declarations of 2,000 transactions each: go test -run '^$' -bench Rows -benchtime 3x ./hq-sync/hqstore/sqlite/
func BenchmarkRows(b *testing.B) {
	s := open(b)
	n := storetest.LoadDay(b, s)
	b.Run("Rows", func(b *testing.B) { storetest.BenchRows(b, s, n) })
	b.Run("Days", func(b *testing.B) { storetest.BenchDays(b, s, n) })
}

// TestLastBatchesUsesTheIndex: a store's last batch is one search of batches_by_time, not
// a scan of the store's batches (a year of a store's uploads is some 100,000 of them, and
// metrics ask for every store at each scrape).
func TestLastBatchesUsesTheIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hq.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var id, parent, unused int
	var plan string
	if err := db.QueryRow(`EXPLAIN QUERY PLAN `+sqlite.LastBatchQuery, "S1").
		Scan(&id, &parent, &unused, &plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "batches_by_time") || !strings.HasPrefix(plan, "SEARCH") {
		t.Fatalf("plan %q: want a search of batches_by_time", plan)
	}
}

func TestRefill(t *testing.T) {
	storetest.RunRefill(t, func(t *testing.T) storetest.RefillStorage { return open(t) })
}
