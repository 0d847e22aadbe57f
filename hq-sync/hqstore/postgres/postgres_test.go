package postgres_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/stack"
)

// pgURL is the database of the PostgreSQL server TestMain starts for the package.
var pgURL string

// TestMain starts one real PostgreSQL server for every test and benchmark of the package
// (each gets its own schema). A missing postgres fails the package; it never skips.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("-short: every test here needs the PostgreSQL server; none runs")
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	st, err := stack.Start(ctx, stack.Options{Postgres: true})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgURL = st.PostgresURL()
	code := m.Run()
	if err := st.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

var schemas atomic.Int64

// open opens a store on a fresh schema of the package's server, closed when tb ends.
func open(tb testing.TB) *postgres.Store {
	tb.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("hq_test_%d", schemas.Add(1))
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = c.Exec(ctx, "CREATE SCHEMA "+name)
	c.Close(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := postgres.Open(ctx, pgURL+"&search_path="+name)
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

// TestReopen checks that the migrations apply once, also when two stores open the same
// database at once, and that the data survives a reopen.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	name := fmt.Sprintf("hq_test_%d", schemas.Add(1))
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	url := pgURL + "&search_path=" + name
	errs := make(chan error, 2)
	stores := make(chan *postgres.Store, 2)
	for range 2 {
		go func() {
			s, err := postgres.Open(ctx, url)
			errs <- err
			stores <- s
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s1, s2 := <-stores, <-stores
	b, h := storetest.NewBatch("S1", "b-1", storetest.Sales("S1", "T1", 1, 3, storetest.D1, storetest.T0))
	first := storetest.MustPut(t, s1, b, h, storetest.T0)
	s1.Close()
	if rc := storetest.MustPut(t, s2, b, h, storetest.T0); !rc.Duplicate || rc.New != first.New {
		t.Fatalf("replay through another store: %+v", rc)
	}
	s2.Close()
	s3, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if rc := storetest.MustPut(t, s3, b, h, storetest.T0); !rc.Duplicate {
		t.Fatalf("replay after reopen: %+v", rc)
	}
}

// BenchmarkPutBatch stores batches of 5,000 rows: go test -run '^$' -bench PutBatch ./hq-sync/hqstore/postgres/
func BenchmarkPutBatch(b *testing.B) {
	storetest.BenchPutBatch(b, open(b))
}

// BenchmarkRows reads one business day of 1,000,000 rows across 500 stores, and its 500
// declarations of 2,000 transactions each: go test -run '^$' -bench Rows -benchtime 3x ./hq-sync/hqstore/postgres/
func BenchmarkRows(b *testing.B) {
	s := open(b)
	n := storetest.LoadDay(b, s)
	b.Run("Rows", func(b *testing.B) { storetest.BenchRows(b, s, n) })
	b.Run("Days", func(b *testing.B) { storetest.BenchDays(b, s, n) })
}

// TestConcurrentDeclarations: batches declaring one store-day at once, whole or in parts,
// at random revisions, from several connections. Readers always see one revision's whole
// list; at the end the day holds the list of the revision it names, and no draft is left:
// every declaration in parts was sent whole, so each draft was either promoted, replaced
// by another part 1, or deleted by a whole declaration at or above its revision. A part 1
// that read the day's revision before a concurrent whole declaration committed would leave
// a draft at or below the day's revision, which nothing deletes.
func TestConcurrentDeclarations(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	rows := storetest.Sales("S1", "T1", 1, 40, storetest.D1, storetest.T0)
	b0, h0 := storetest.NewBatch("S1", "rows", rows)
	storetest.MustPut(t, s, b0, h0, storetest.T0)
	txnsOf := func(rev int64) int { return 5 + int(rev)*5 } // revision r lists 5+5r rows
	var ids atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range 60 {
				rev := int64(1 + rng.IntN(6))
				d := storetest.Day(storetest.D1, rev, storetest.T0, rows[:txnsOf(rev)])
				days := []hqwire.StoreDay{d}
				if rng.IntN(3) > 0 {
					days = storetest.Parts(d, 3)
				}
				for _, d := range days {
					b, h := storetest.NewBatch("S1", fmt.Sprintf("b-%d", ids.Add(1)), nil, d)
					if _, err := s.PutBatch(ctx, b, h, storetest.T0); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	read := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() {
		for {
			select {
			case <-read:
				return
			default:
			}
			days, err := s.Days(ctx, storetest.D1, "S1")
			if err != nil {
				t.Error(err)
				return
			}
			for _, d := range days {
				if len(d.Day.Txns) != txnsOf(d.Day.Revision) {
					t.Errorf("read revision %d with %d txns, want %d", d.Day.Revision, len(d.Day.Txns), txnsOf(d.Day.Revision))
				}
			}
		}
	})
	wg.Wait()
	close(read)
	reader.Wait()
	days, err := s.Days(ctx, storetest.D1, "S1")
	if err != nil || len(days) != 1 {
		t.Fatal(days, err)
	}
	if rev := days[0].Day.Revision; len(days[0].Day.Txns) != txnsOf(rev) {
		t.Fatalf("revision %d with %d txns, want %d", rev, len(days[0].Day.Txns), txnsOf(rev))
	}
	if drafts, txns, err := s.PartsKept(ctx); err != nil || drafts != 0 {
		t.Fatalf("%d drafts with %d txns kept (%v) beside revision %d; want none", drafts, txns, err, days[0].Day.Revision)
	}
}

// TestDropDraftsConcurrentWithParts: parts of a day's declarations arrive from many
// batches while DropDrafts deletes every draft kept aside, again and again. A day stands
// only whole (every transaction of its revision), neither side fails, and nothing is left
// behind.
func TestDropDraftsConcurrentWithParts(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	rows := storetest.Sales("S1", "T1", 1, 40, storetest.D1, storetest.T0)
	b0, h0 := storetest.NewBatch("S1", "rows", rows)
	storetest.MustPut(t, s, b0, h0, storetest.T0)
	txnsOf := func(rev int64) int { return 5 + int(rev)*5 }
	var ids atomic.Int64
	var dropped atomic.Int64
	stop := make(chan struct{})
	var dropper sync.WaitGroup
	dropper.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := s.DropDrafts(ctx, storetest.T0.Add(time.Hour))
			if err != nil {
				t.Error(err)
				return
			}
			dropped.Add(n)
		}
	})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 40 {
				rev := int64(1 + rng.IntN(6))
				d := storetest.Day(storetest.D1, rev, storetest.T0, rows[:txnsOf(rev)])
				for _, p := range storetest.Parts(d, 3) {
					b, h := storetest.NewBatch("S1", fmt.Sprintf("b-%d", ids.Add(1)), nil, p)
					if _, err := s.PutBatch(ctx, b, h, storetest.T0); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	dropper.Wait()
	if _, err := s.DropDrafts(ctx, storetest.T0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	days, err := s.Days(ctx, storetest.D1, "S1")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range days {
		if len(d.Day.Txns) != txnsOf(d.Day.Revision) {
			t.Errorf("revision %d stands with %d txns, want %d", d.Day.Revision, len(d.Day.Txns), txnsOf(d.Day.Revision))
		}
	}
	if drafts, txns, err := s.PartsKept(ctx); err != nil || drafts != 0 || txns != 0 {
		t.Errorf("%d drafts with %d txns kept (%v); want none", drafts, txns, err)
	}
	t.Logf("%d drafts dropped, %d days standing", dropped.Load(), len(days))
}

func TestRefill(t *testing.T) {
	storetest.RunRefill(t, func(t *testing.T) storetest.RefillStorage { return open(t) })
}

// TestApplicationName: posgate's connections show in pg_stat_activity as AppName, or by
// the name the URL gives.
func TestApplicationName(t *testing.T) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	named := func(name string) int {
		t.Helper()
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := named(postgres.AppName)
	_, url := newSchema(t)
	openURL(t, url)
	if got := named(postgres.AppName); got <= before {
		t.Fatalf("%d connections named %s after Open, %d before", got, postgres.AppName, before)
	}
	before = named(postgres.AppName)
	openURL(t, url+"&application_name=hq-night-shift")
	if got, own := named(postgres.AppName), named("hq-night-shift"); got != before || own == 0 {
		t.Fatalf("a URL's own name: %d connections named %s (%d before), %d by the URL's", got, postgres.AppName, before, own)
	}
}
