package upload

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sclient "github.com/posgate/posgate/store-server/client"

	sqlite3 "github.com/mattn/go-sqlite3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// downable is hq-sync serve that answers 503 while down is set.
type downable struct {
	h    http.Handler
	down atomic.Bool
}

func (d *downable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	d.h.ServeHTTP(w, r)
}

// restoreFixture: a store ledger, hq-sync serve on a real SQLite file behind a real HTTP
// server (that can be taken down), one clock shared by the uploader and HQ.
func restoreFixture(t *testing.T) (*store, *sqlite.Store, *downable, *clock, Config) {
	t.Helper()
	dir := t.TempDir()
	s, st := MustOpenStore(t, dir), mustOpenHQ(t, dir)
	clk := newClock(day0.Add(time.Hour))
	d := &downable{h: serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: clk.Now})}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return s, st, d, clk, config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
}

func backupLedger(t *testing.T, s *store) string {
	t.Helper()
	backup := filepath.Join(t.TempDir(), "ledger.bak")
	raw, err := sql.Open("sqlite3", s.path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`VACUUM INTO ?`, backup); err != nil {
		t.Fatal(err)
	}
	return backup
}

func restoreLedger(t *testing.T, s *store, backup string) {
	t.Helper()
	s.l.Close()
	for _, suffix := range []string{"-wal", "-shm"} {
		os.Remove(s.path + suffix)
	}
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s.reopen(t)
}

// everyRowAtHQ fails the test for each row of the store's ledger (of date0) HQ does not hold.
func everyRowAtHQ(t *testing.T, s *store, st *sqlite.Store) {
	t.Helper()
	rows, err := st.Rows(context.Background(), date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	atHQ := map[string]bool{}
	for _, r := range rows {
		atHQ[r.Terminal+"/"+itoa(r.Seq)] = true
	}
	for _, o := range s.Outbox() {
		if !atHQ[o.Row.Terminal+"/"+itoa(o.Row.Seq)] {
			t.Errorf("ledger row id %d (%s %s seq %d) never reached HQ", o.ID, o.Row.Kind, o.Row.Terminal, o.Row.Seq)
		}
	}
}

// TestRestoredLedgerUnderPendingBatch: HQ is down and a batch of the store's rows 6..8 waits;
// the store's ledger is restored from a backup holding rows 1..5, and the store sells on,
// its new sales taking ids 6..8 again. When HQ comes back it takes the waiting batch, and the
// rows sold after the restore reach HQ too. The watermark moved to the batch's last id
// whatever the ledger held there: the new rows were never read, and HQ's reconcile showed
// them missing.
func TestRestoredLedgerUnderPendingBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, hqs, clk, cfg := restoreFixture(t)
	s.Sales(5, day0, "T1")
	u := MustNew(t, cfg)
	MustOnce(t, u) // HQ acknowledges ids 1..5
	backup := backupLedger(t, s)

	hqs.down.Store(true)
	s.Sales(3, day0.Add(time.Hour), "T1") // ids 6..8: T1 seq 6..8
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_ = u.Once(c) // the batch of ids 6..8 is recorded and waits for HQ
	cancel()
	u.Close()

	restoreLedger(t, s, backup)
	s.Sales(3, day0.Add(2*time.Hour), "T2") // after the restore: ids 6..8 again, T2 seq 1..3

	hqs.down.Store(false)
	u2, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("the uploader refuses the restored ledger: %v", err)
	}
	defer u2.Close()
	MustOnce(t, u2)
	s.DayClose(date0, day0.Add(10*time.Hour), "T1", "T2")
	MustOnce(t, u2)
	clk.Set(day1.Add(time.Hour)) // the day is over: the store declares it
	MustOnce(t, u2)

	everyRowAtHQ(t, s, st)
	rep, err := reconcile.Run(ctx, st, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.Txns {
		if d.Kind == reconcile.MissingAtHQ {
			t.Errorf("reconcile: %s %s/%s seq %d: %s", d.Kind, d.Store, d.Terminal, d.Seq, d.Detail)
		}
	}
}

// TestReviewDayWithoutSalesIsNeverDeclared: the store trades on 1 March and 3 March and is
// closed on 2 March. Its uploader is up to date (3 March is declared), yet HQ's nightly
// reconcile of 2 March with the stores file (reconcile --stores) reports the store as
// no_store_day and the date as NOT OK: nothing tells a closed store from a stuck upload.

// TestDayWithoutSales: the store trades on 1 and 3 March and is closed on 2 March. Its
// uploader, up to date, declares 2 March empty, and HQ's reconcile of the day with the
// store expected is OK. Nothing declared it: the reconcile reported the store no_store_day
// and the date NOT OK every night, as it would a stuck upload.
func TestDayWithoutSales(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, clk, cfg := restoreFixture(t)
	day2 := day0.AddDate(0, 0, 2)
	s.Sales(3, day0, "T1")
	s.DayClose(date0, day0.Add(10*time.Hour), "T1")
	s.Sales(3, day2, "T1")
	s.DayClose("2025-03-03", day2.Add(10*time.Hour), "T1")
	clk.Set(day2.AddDate(0, 0, 1).Add(time.Hour))
	u := MustNew(t, cfg)
	defer u.Close()
	MustOnce(t, u)
	for _, date := range []string{date0, "2025-03-03"} {
		// Declared and compared (the test day closes carry no per-method totals, so only
		// the per-method figures differ): the store's upload is up to date.
		if rep, err := reconcile.Run(ctx, st, date, "", testStore); err != nil || len(rep.Missing) != 0 ||
			len(rep.Txns) != 0 {
			t.Fatalf("%s: %s %v", date, rep.Summary(), err)
		}
	}
	rep, err := reconcile.Run(ctx, st, date1, "", testStore)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("%s; missing %+v", rep.Summary(), rep.Missing)
	}
}

// TestRestoredLedgerSameLastRow: as TestRestoredLedgerUnderPendingBatch, but after the
// restore the terminals deliver again the events the restore lost (their acks were lost with
// it, or the store asked for them), among a sale made after the restore. The waiting batch
// (ids 6..8 = T2:1, T1:6, T1:7) and the restored ledger (ids 6..9 = T3:1, T1:6, T1:7, T2:1)
// hold the same row at id 8 alone. Taking that for "the ledger holds the batch", the
// watermark moved to 8, past T3:1 at id 6, which never reached HQ.
func TestRestoredLedgerSameLastRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, hqs, _, cfg := restoreFixture(t)
	s.Sales(5, day0, "T1") // ids 1..5: T1 seq 1..5
	u := MustNew(t, cfg)
	MustOnce(t, u)
	backup := backupLedger(t, s)

	hqs.down.Store(true)
	s.mu.Lock()
	at := day0.Add(time.Hour)
	t2 := s.record("T2", at, wire.KindSale, salePayload(101, 1))
	t1a := s.record("T1", at.Add(time.Second), wire.KindSale, salePayload(102, 1))
	t1b := s.record("T1", at.Add(2*time.Second), wire.KindSale, salePayload(103, 1))
	s.mu.Unlock()
	s.commit([]ledger.Record{t2, t1a, t1b}) // ids 6..8
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_ = u.Once(c) // the batch of ids 6..8 waits for HQ
	cancel()
	u.Close()

	restoreLedger(t, s, backup)
	s.mu.Lock()
	t3 := s.record("T3", day0.Add(2*time.Hour), wire.KindSale, salePayload(104, 1)) // sold after the restore
	s.mu.Unlock()
	s.commit([]ledger.Record{t3})       // id 6
	s.commit([]ledger.Record{t1a, t1b}) // ids 7, 8: T1 delivers its events again
	s.commit([]ledger.Record{t2})       // id 9
	hqs.down.Store(false)
	u2, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("the uploader refuses the restored ledger: %v", err)
	}
	defer u2.Close()
	MustOnce(t, u2)

	everyRowAtHQ(t, s, st)
}

func hqCount(t *testing.T, dir, q string) int {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "hq.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTillClockResetDeclaresNoDecades: one offline sale of a till whose clock had reset (a
// dead RTC battery: 2000-01-01) is recorded, as an offline sale must be; the store trades on
// 2025-03-01. The uploader declares at most the last 31 days without trade. It declared every
// day from 2000-01-02 empty, 9,192 of them in 298 batches, and walked them all at each poll.
func TestTillClockResetDeclaresNoDecades(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, clk, cfg := restoreFixture(t)
	dir := filepath.Dir(cfg.StatePath)
	s.Sales(1, time.Date(2000, 1, 1, 10, 0, 0, 0, shanghai), "T9")
	s.Sales(3, day0, "T1")
	clk.Set(day1.Add(time.Hour))
	u := MustNew(t, cfg)
	MustOnce(t, u)
	days := hqCount(t, dir, `SELECT count(*) FROM days WHERE store = 'S1'`)
	batches := hqCount(t, dir, `SELECT count(*) FROM batches WHERE store = 'S1'`)
	if days > maxEmptyDays+2 {
		t.Errorf("one sale dated 2000-01-01 made the uploader declare %d days at HQ in %d batches", days, batches)
	}
	if rep, err := reconcile.Run(ctx, st, "2013-06-15", "", testStore); err != nil || rep.OK() {
		t.Errorf("reconcile of 2013-06-15, before the store traded, with S1 expected: %s (%v); want NOT OK", rep.Summary(), err)
	}
}

// TestOfflineDayNotDeclaredEmpty: the store trades on 1 March. On 2 March the tills cannot
// reach the store-server all day (they sell offline, as they must) while the uploader runs.
// 2 March is not declared empty while the tills have not been heard from since it ended, and
// HQ's nightly reconcile of it says NOT OK; once they come back its rows are declared. It was
// declared empty, and the reconcile said OK for a day the tills sold all through.
func TestOfflineDayNotDeclaredEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, clk, cfg := restoreFixture(t)
	s.Sales(5, day0, "T1", "T2")
	s.DayClose(date0, day0.Add(10*time.Hour), "T1", "T2")
	clk.Set(day1.AddDate(0, 0, 1).Add(time.Hour)) // 3 March 11:00: the uploader's run that night
	u := MustNew(t, cfg)
	MustOnce(t, u)
	rep, err := reconcile.Run(ctx, st, date1, "", testStore)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Errorf("reconcile of %s says OK while every sale of the day is still at the tills", date1)
	}
	// The tills come back: the day's rows reach the ledger, and the next revision declares them.
	s.Sales(8, day1, "T1", "T2")
	s.DayClose(date1, day1.Add(10*time.Hour), "T1", "T2")
	clk.Set(day1.AddDate(0, 0, 1).Add(2 * time.Hour))
	MustOnce(t, u)
	rep, err = reconcile.Run(ctx, st, date1, "", testStore)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.Txns {
		if d.Kind == reconcile.MissingAtHQ || d.Kind == reconcile.ExtraAtHQ {
			t.Errorf("after the tills came back: %s %s/%s seq %d: %s", d.Kind, d.Store, d.Terminal, d.Seq, d.Detail)
		}
	}
	if len(rep.Missing) > 0 {
		t.Errorf("after the tills came back: missing %+v", rep.Missing)
	}
}

// at is day0 + days, at 10:00; dateOf its business date.
func at(days int) time.Time  { return day0.AddDate(0, 0, days) }
func dateOf(days int) string { return at(days).Format("2006-01-02") }

// noLaterDayDeclared fails the test if HQ holds a declaration of a day after date0, or if
// HQ's reconcile of date with the store expected says OK; what says why.
func noLaterDayDeclared(t *testing.T, dir string, st *sqlite.Store, date, what string) {
	t.Helper()
	n := hqCount(t, dir, `SELECT count(*) FROM days WHERE store = 'S1' AND business_date > '`+date0+`'`)
	rep, err := reconcile.Run(context.Background(), st, date, "", testStore)
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 || rep.OK() {
		t.Errorf("%s: %d later days declared empty at HQ; reconcile of %s: %s", what, n, date, rep.Summary())
	}
}

// TestSingleTillOfflineLong: a store with one till, cut off from the store-server after 1
// March and selling offline (cash is never capped) for 40 days. No later day is declared
// empty: every sale of them is at the till. With a till retired after a week unheard, the
// run on 10 April declared 31 days empty, and HQ's reconcile said OK for them.
func TestSingleTillOfflineLong(t *testing.T) {
	t.Parallel()
	s, st, _, clk, cfg := restoreFixture(t)
	dir := filepath.Dir(cfg.StatePath)
	s.Sales(4, at(0), "T1")
	clk.Set(at(40).Add(time.Hour))
	u := MustNew(t, cfg)
	MustOnce(t, u)
	noLaterDayDeclared(t, dir, st, dateOf(20), "the store's only till last heard "+date0)
}

// TestTillClockAheadLastEvent: the store's only till, its last event dated 2030 by a clock
// gone forward, is cut off and sells offline. No later day is declared empty: a last event
// ahead of the uploader's clock says nothing of when the till was last heard. It counted as
// heard after every day, and the days were declared empty, reconciling OK at HQ.
func TestTillClockAheadLastEvent(t *testing.T) {
	t.Parallel()
	s, st, _, clk, cfg := restoreFixture(t)
	dir := filepath.Dir(cfg.StatePath)
	s.Sales(4, at(0), "T1")
	s.mu.Lock()
	hb := s.record("T1", time.Date(2030, 1, 1, 0, 0, 0, 0, shanghai), wire.KindHeartbeat, &wire.HeartbeatPayload{})
	s.mu.Unlock()
	s.commit([]ledger.Record{hb})
	clk.Set(at(5).Add(time.Hour))
	u := MustNew(t, cfg)
	defer u.Close()
	MustOnce(t, u)
	noLaterDayDeclared(t, dir, st, dateOf(2),
		"the store's only till, last heard by the store on "+date0+" (its last event dated 2030 by its clock)")
}

// restoreLive restores the store's ledger from backup while the uploader keeps it open, the
// way an operator does with `sqlite3 ledger.db ".restore ledger.bak"`: the store-server is
// stopped, the backup is copied in through SQLite's backup API (every open connection sees
// the restored ledger at its next read), and the store-server is started again.
func restoreLive(t *testing.T, s *store, backup string) {
	t.Helper()
	s.l.Close()
	ctx := context.Background()
	dst, err := sql.Open("sqlite3", s.path)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	src, err := sql.Open("sqlite3", "file:"+backup+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dc, err := dst.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	sc, err := src.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	err = dc.Raw(func(d any) error {
		return sc.Raw(func(s any) error {
			bk, err := d.(*sqlite3.SQLiteConn).Backup("main", s.(*sqlite3.SQLiteConn), "main")
			if err != nil {
				return err
			}
			if _, err := bk.Step(-1); err != nil {
				bk.Finish()
				return err
			}
			return bk.Finish()
		})
	})
	if err != nil {
		t.Fatalf("restore %s: %v", s.path, err)
	}
	s.reopen(t)
}

// TestRestoreUnderRunningUploader: the uploader runs while the store's ledger is restored
// from a backup older than the last row HQ acknowledged (ids 1..5 of 8), and the store sells
// on, its new sales taking ids 6..10. The uploader stops as it does at start with such a
// ledger (refusing it) instead of going on from its watermark (8): it sent ids 9 and 10, and
// the sales at ids 6..8 never reached HQ, while its state (backlog 0) and the next start
// (the ledger holds a row at 10 with the key it sent) said all was well. Started again with
// a new state, as the operator does with a restored ledger, it sends every row.
func TestRestoreUnderRunningUploader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, clk, cfg := restoreFixture(t)
	s.Sales(5, day0, "T1") // ids 1..5
	backup := backupLedger(t, s)
	s.Sales(3, day0.Add(time.Hour), "T1") // ids 6..8
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	u := MustNew(t, cfg)
	stop := runInBackground(t, u)
	waitFor(t, 10*time.Second, "HQ to acknowledge ids 1..8", func() bool {
		st, err := u.Status(ctx)
		return err == nil && st.SentThrough == 8
	})

	restoreLive(t, s, backup)
	s.Sales(5, day0.Add(2*time.Hour), "T2") // after the restore: ids 6..10
	// The uploader's next polls: it refuses the ledger, or sends on (id 10 acknowledged).
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		st, err := u.Status(ctx)
		errs, _ := metricstest.Value(scrape(t, reg), "posgate_upload_step_errors_total", nil)
		if errs > 0 || (err == nil && st.SentThrough == 10) {
			break
		}
	}
	stop()
	if err := u.Once(ctx); err == nil || !strings.Contains(err.Error(), "refusing") {
		everyRowAtHQ(t, s, st)
		t.Fatalf("the running uploader took a ledger restored from before its watermark: %v", err)
	}
	fams := scrape(t, reg)
	if v, _ := metricstest.Value(fams, "posgate_upload_ledger_behind_hq", nil); v != 1 {
		t.Errorf("posgate_upload_ledger_behind_hq = %v while the uploader refuses the ledger, want 1", v)
	}
	if v, _ := metricstest.Value(fams, "posgate_upload_step_errors_total", nil); v < 1 {
		t.Errorf("posgate_upload_step_errors_total = %v after Run refused the ledger, want ≥ 1", v)
	}
	u.Close()

	cfg.StatePath = filepath.Join(t.TempDir(), "upload.db") // the operator starts it with a new state
	cfg.Metrics = nil
	u2 := MustNew(t, cfg)
	MustOnce(t, u2)
	s.DayClose(date0, day0.Add(10*time.Hour), "T1", "T2")
	clk.Set(day1.Add(time.Hour))
	MustOnce(t, u2)
	everyRowAtHQ(t, s, st)
}

// TestLedgerFileReplacedUnderRunningUploader: the uploader runs while the store's ledger is
// restored by moving a copy of its backup into its place (the store-server stopped); the
// backup holds every row HQ acknowledged, and the store sells on. The uploader reads the
// new file from its next poll and sends the new sales. It kept reading the file it had
// opened, gone from the directory: nothing more reached HQ, and its status said the backlog
// was 0, until it was started again.
func TestLedgerFileReplacedUnderRunningUploader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, _, cfg := restoreFixture(t)
	s.Sales(5, day0, "T1") // ids 1..5
	u := MustNew(t, cfg)
	stop := runInBackground(t, u)
	waitFor(t, 10*time.Second, "HQ to acknowledge ids 1..5", func() bool {
		st, err := u.Status(ctx)
		return err == nil && st.SentThrough == 5
	})
	backup := backupLedger(t, s)

	moveIntoPlace(t, s, backup)
	s.Sales(3, day0.Add(time.Hour), "T2") // ids 6..8, in the new file
	time.Sleep(30 * cfg.PollInterval)     // the uploader's next polls (nothing else reads its ledger meanwhile)
	stop()
	MustOnce(t, u)
	status, err := u.Status(ctx)
	if err != nil || status.SentThrough != 8 || status.Backlog != 0 {
		t.Errorf("status after the new sales: %+v, %v; want sent through 8, no backlog", status, err)
	}
	everyRowAtHQ(t, s, st)
}

// moveIntoPlace restores the store's ledger by moving a copy of backup into its place, the
// store-server stopped, and starts the store-server again on it.
func moveIntoPlace(t *testing.T, s *store, backup string) {
	t.Helper()
	s.l.Close()
	for _, suffix := range []string{"-wal", "-shm"} {
		os.Remove(s.path + suffix)
	}
	if err := os.Rename(backup, s.path); err != nil {
		t.Fatal(err)
	}
	s.reopen(t)
}

// TestLedgerFileReplacedWhileHQIsDown: HQ is down and a batch waits for it when the store's
// ledger is restored, by moving a file into its place, from a backup older than the last row
// HQ acknowledged. The uploader's metrics and status read the ledger the path names from
// the next failed send on: ledger_behind_hq is 1, as `--status` and a restart say. They read
// the file the uploader had open before the restore for as long as HQ stayed away (days,
// maybe), and said the ledger was fine.
func TestLedgerFileReplacedWhileHQIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, hqs, _, cfg := restoreFixture(t)
	s.Sales(3, day0, "T1") // ids 1..3
	backup := backupLedger(t, s)
	s.Sales(2, day0.Add(time.Minute), "T1") // ids 4..5
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	u := MustNew(t, cfg)
	stop := runInBackground(t, u)
	defer stop()
	waitFor(t, 10*time.Second, "HQ to acknowledge ids 1..5", func() bool {
		st, err := u.Status(ctx)
		return err == nil && st.SentThrough == 5
	})

	hqs.down.Store(true)
	s.Sales(2, day0.Add(time.Hour), "T1") // ids 6..7: a batch waits for HQ
	waitFor(t, 10*time.Second, "a failed send of the batch of ids 6..7", func() bool {
		st, err := u.Status(ctx)
		return err == nil && st.Pending != "" && st.Attempts > 0
	})
	moveIntoPlace(t, s, backup)
	s.Sales(2, day0.Add(2*time.Hour), "T2") // after the restore: ids 4..5 again

	behind := func() float64 {
		v, _ := metricstest.Value(scrape(t, reg), "posgate_upload_ledger_behind_hq", nil)
		return v
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && behind() != 1; {
		time.Sleep(10 * time.Millisecond)
	}
	fromPath, err := uploadstate.ReadStatus(ctx, s.path, cfg.StatePath, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	st, err := u.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := behind(); v != 1 || st.Backlog != fromPath.Backlog {
		t.Errorf("HQ down, the ledger restored from before the last row HQ acknowledged: ledger_behind_hq = %v, "+
			"want 1; backlog %d, --status says %d", v, st.Backlog, fromPath.Backlog)
	}
}

// TestBacklogWhileLedgerBehindHQ: the ledger is restored, under the running uploader, from a
// backup older than the last row HQ acknowledged (ids 1..5 of 8), and the store sells on,
// its 4 new sales taking ids 6..9. Nothing goes (ledger_behind_hq), and the backlog counts
// the rows HQ may not have: those after the last sent batch the ledger still holds (ids
// 6..9), by --status, the uploader's status and its metrics. It counted the rows after the
// watermark (id 9 alone): 1 row waiting, while 4 sales were not at HQ.
func TestBacklogWhileLedgerBehindHQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, _, clk, cfg := restoreFixture(t)
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	u := MustNew(t, cfg)
	s.Sales(5, day0, "T1") // ids 1..5
	MustOnce(t, u)
	backup := backupLedger(t, s)
	s.Sales(3, day0.Add(time.Hour), "T1") // ids 6..8
	MustOnce(t, u)

	restoreLive(t, s, backup)
	s.Sales(4, day0.Add(2*time.Hour), "T2") // after the restore: ids 6..9
	clk.Set(day0.Add(3 * time.Hour))
	if err := u.Once(ctx); perr.CodeOf(err) != CodeLedgerBehind {
		t.Fatalf("Once on the restored ledger: %v, want %s", err, CodeLedgerBehind)
	}
	fromPath, err := uploadstate.ReadStatus(ctx, s.path, cfg.StatePath, testStore, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	st, err := u.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for via, got := range map[string]sclient.UploadStatus{"--status": fromPath, "Status": st} {
		if !got.LedgerBehindHQ || got.Backlog != 4 || got.SentThrough != 8 {
			t.Errorf("%s: ledger behind HQ %v, backlog %d, sent through %d; want true, the 4 sales since the restore, 8",
				via, got.LedgerBehindHQ, got.Backlog, got.SentThrough)
		}
	}
	fams := scrape(t, reg)
	for name, want := range map[string]float64{"posgate_upload_backlog_rows": 4, "posgate_upload_ledger_behind_hq": 1,
		"posgate_upload_oldest_unsent_age_seconds": 3600} {
		if v, _ := metricstest.Value(fams, name, nil); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}
