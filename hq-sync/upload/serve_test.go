package upload

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hq"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/serve"
)

// flaky wraps HQ's handler with faults: a 503 before HQ sees the request, or HQ stores the
// batch and the connection drops before the answer.
type flaky struct {
	h    http.Handler
	mu   sync.Mutex
	rng  *rand.Rand
	on   bool
	seen int
	lost int
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	x := f.rng.IntN(100)
	on := f.on
	f.seen++
	f.mu.Unlock()
	switch {
	case on && x < 15:
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case on && x < 35:
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, r)
		f.mu.Lock()
		f.lost++
		f.mu.Unlock()
		drop(w)
	default:
		f.h.ServeHTTP(w, r)
	}
}

// TestUploadToServe uploads a store's ledger to hq-sync serve on the SQLite engine through
// a flaky network, with the uploader cancelled at random points and restarted, and checks
// what HQ's database holds: every ledger row once, with its hash and amounts, and the
// day's declaration listing the ledger's manifest.
func TestUploadToServe(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	st := mustOpenHQ(t, dir)
	clk := newClock(day0.Add(time.Hour))
	f := &flaky{h: serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: clk.Now}),
		rng: rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano()))), on: true}
	srv := httptest.NewServer(f)
	defer srv.Close()
	cfg := config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
	cfg.BatchRows = 60

	s.Sales(400, day0)
	s.Refund("T1", day0.Add(2*time.Hour))
	for i := 0; i < 15; i++ {
		u, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(40))*time.Millisecond)
		u.Run(c)
		cancel()
		u.Close()
		s.Sales(10, day0.Add(3*time.Hour))
	}
	s.DayClose(date0, day1.Add(-8*time.Hour), "T1", "T2", "T3")
	clk.Set(day1.Add(time.Hour)) // the day is over
	f.mu.Lock()
	f.on = false
	f.mu.Unlock()
	u := MustNew(t, cfg)
	MustOnce(t, u)

	rows, err := st.Rows(ctx, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	want := s.Outbox()
	if len(rows) != len(want) {
		t.Fatalf("HQ holds %d rows, the ledger %d", len(rows), len(want))
	}
	got := map[string]hq.StoredRow{}
	for _, r := range rows {
		got[r.Terminal+"/"+itoa(r.Seq)] = r
	}
	for _, o := range want {
		r, ok := got[o.Row.Terminal+"/"+itoa(o.Row.Seq)]
		if !ok || r.Kind != o.Row.Kind || r.Amount != o.Row.Amount || !sameMap(r.ByMethod, o.Row.ByMethod) ||
			r.FlowNo != o.Row.FlowNo {
			t.Errorf("row %s: HQ %+v, ledger %+v", o.Row.Key(testStore), r, o.Row)
		}
	}
	day, manifest := checkHQDay(t, st, s, 1)
	for i, tx := range day.Txns {
		m := manifest[i]
		if tx.Terminal != m.Terminal || tx.Seq != m.Seq || tx.Amount != m.Amount || !sameMap(tx.ByMethod, m.ByMethod) {
			t.Errorf("declared txn %d %+v, ledger %+v", i, tx, m)
		}
	}
	n, err := st.BatchCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sent, pending := stateBatches(t, u)
	if pending != "" || int64(len(sent)) != n {
		t.Errorf("HQ stored %d batches, the uploader recorded %d (pending %q)", n, len(sent), pending)
	}
	t.Logf("%d rows in %d batches; %d requests, %d answers lost after HQ stored the batch", len(rows), n, f.seen, f.lost)
}

// TestLostStateStartsAgain loses the uploader's state after HQ holds the store's rows and
// two declarations of a day, and starts a new state on the same ledger, against hq-sync
// serve on the SQLite engine: its batch ids never collide with the old ones (HQ would
// refuse them as batch_id_reused), the rows are resent and HQ keeps one of each, and the
// day, which HQ holds at revision 2, is declared again above it with the ledger's manifest,
// as is a late sale of the day after that.
func TestLostStateStartsAgain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	st := mustOpenHQ(t, dir)
	clk := newClock(day1.Add(time.Hour)) // date0 is over
	srv := httptest.NewServer(serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: clk.Now}))
	defer srv.Close()
	cfg := config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
	cfg.BatchRows = 50

	// The first state: 120 sales and the day close declared (revision 1), then a late
	// offline sale of the day declared again (revision 2).
	s.Sales(120, day0)
	s.DayClose(date0, day1.Add(-8*time.Hour), "T1", "T2", "T3")
	u := MustNew(t, cfg)
	MustOnce(t, u)
	s.Sales(1, day0.Add(5*time.Hour))
	MustOnce(t, u)
	oldIDs, _ := stateBatches(t, u)
	u.Close()
	checkHQDay(t, st, s, 2)

	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(cfg.StatePath + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	n0, err := st.BatchCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u = MustNew(t, cfg)
	MustOnce(t, u)
	newIDs, pending := stateBatches(t, u)
	if pending != "" {
		t.Fatalf("batch %s still pending", pending)
	}
	for id := range newIDs {
		if _, ok := oldIDs[id]; ok {
			t.Errorf("the new state used batch id %s again", id)
		}
	}
	if n, err := st.BatchCount(ctx); err != nil || n != n0+int64(len(newIDs)) {
		t.Errorf("HQ holds %d batches, %d before and %d new (%v)", n, n0, len(newIDs), err)
	}
	checkHQDay(t, st, s, 3)

	// The new state goes on: a late sale of the day leads to revision 4.
	s.Sales(1, day0.Add(6*time.Hour))
	MustOnce(t, u)
	checkHQDay(t, st, s, 4)
}

// mustOpenHQ opens HQ's SQLite database in dir, closed when the test ends.
func mustOpenHQ(tb testing.TB, dir string) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "hq.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// checkHQDay fails unless HQ holds every ledger row of date0 once and the day declared at
// revision rev with as many transactions as the ledger's manifest; it returns both.
func checkHQDay(tb testing.TB, st *sqlite.Store, s *store, rev int64) (hq.StoreDay, []hq.Txn) {
	tb.Helper()
	ctx := context.Background()
	rows, err := st.Rows(ctx, date0, testStore)
	if err != nil {
		tb.Fatal(err)
	}
	if want := len(s.Outbox()); len(rows) != want {
		tb.Errorf("HQ holds %d rows of %s, the ledger %d", len(rows), date0, want)
	}
	days, err := st.Days(ctx, date0, testStore)
	if err != nil || len(days) != 1 {
		tb.Fatalf("days %+v %v", days, err)
	}
	manifest, err := s.l.DayManifest(ctx, date0)
	if err != nil {
		tb.Fatal(err)
	}
	d := days[0].Day
	if d.Revision != rev || len(d.Txns) != len(manifest) {
		tb.Errorf("%s declared at revision %d with %d txns; want revision %d with the ledger's %d",
			date0, d.Revision, len(d.Txns), rev, len(manifest))
	}
	return d, manifest
}

// TestDayTooLargeToDeclare: a day whose declaration is larger than an HQ batch may carry is
// left undeclared (and reported) while its rows and the other days still go, instead of
// being sent to an HQ that must refuse it and holding back every batch after it. A late
// row of the day tries again; with room, the day is declared.
func TestDayTooLargeToDeclare(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	st := mustOpenHQ(t, dir)
	clk := newClock(day1.AddDate(0, 0, 1).Add(time.Hour)) // date0 and date1 are over
	srv := httptest.NewServer(serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: clk.Now}))
	defer srv.Close()
	cfg := config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
	s.Sales(60, day0)
	s.Sales(5, day1)
	u := MustNew(t, cfg)
	u.dayLimit = 3000 // date0's 60 transactions take more, date1's 5 less

	declared := func(date string) int64 {
		t.Helper()
		days, err := st.Days(ctx, date, testStore)
		if err != nil || len(days) > 1 {
			t.Fatalf("days of %s: %+v %v", date, days, err)
		}
		if len(days) == 0 {
			return 0
		}
		return days[0].Day.Revision
	}
	atHQ := func(date string) int {
		t.Helper()
		rows, err := st.Rows(ctx, date, testStore)
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	status := func(want ...string) {
		t.Helper()
		got, err := u.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.TooLarge, want) || got.Pending != "" || got.Backlog != 0 {
			t.Fatalf("status %+v: want nothing pending or left and %v too large to declare", got, want)
		}
	}

	MustOnce(t, u)
	if atHQ(date0) != 60 || atHQ(date1) != 5 || declared(date0) != 0 || declared(date1) != 1 {
		t.Fatalf("HQ: %d and %d rows, %s declared at %d, %s at %d; want 60 and 5, %s undeclared, %s at 1",
			atHQ(date0), atHQ(date1), date0, declared(date0), date1, declared(date1), date0, date1)
	}
	status(date0)
	n0, err := st.BatchCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	MustOnce(t, u) // nothing new: no batch
	if n, err := st.BatchCount(ctx); err != nil || n != n0 {
		t.Fatalf("HQ holds %d batches after an idle pass, %d before (%v)", n, n0, err)
	}

	// A late sale of date0: its row goes, the day is tried again and is still too large.
	s.Sales(1, day0.Add(5*time.Hour))
	MustOnce(t, u)
	if atHQ(date0) != 61 || declared(date0) != 0 {
		t.Fatalf("after a late sale: %d rows of %s at HQ, declared at %d; want 61, undeclared", atHQ(date0), date0, declared(date0))
	}
	status(date0)

	// With room for it, the next late sale gets the day declared.
	u.dayLimit = batchBudget
	s.Sales(1, day0.Add(6*time.Hour))
	MustOnce(t, u)
	if atHQ(date0) != 62 || declared(date0) != 1 {
		t.Fatalf("with room: %d rows of %s at HQ, declared at %d; want 62, revision 1", atHQ(date0), date0, declared(date0))
	}
	status()
}
