package upload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

var errCrash = errors.New("simulated crash")

// waitFor polls cond until it holds or the deadline passes.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runInBackground runs u.Run until the returned stop is called.
func runInBackground(tb testing.TB, u *Uploader) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("run: %v", err)
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

// checkDay fails unless the declaration is the ledger's manifest of its date, stored after
// every row of that date HQ holds.
func checkDay(tb testing.TB, h *testHQ, s *store, d storedDay, rev int64) {
	tb.Helper()
	if d.day.Revision != rev {
		tb.Errorf("%s declared with revision %d, want %d", d.day.BusinessDate, d.day.Revision, rev)
	}
	want, err := s.l.DayManifest(context.Background(), d.day.BusinessDate)
	if err != nil {
		tb.Fatal(err)
	}
	if !reflect.DeepEqual(d.day.Txns, want) {
		tb.Errorf("%s rev %d lists %d txns, the ledger %d", d.day.BusinessDate, rev, len(d.day.Txns), len(want))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, r := range h.rows {
		if r.row.BusinessDate == d.day.BusinessDate && r.pos >= d.rows && r.row.Kind != hqwire.KindDayClose {
			tb.Errorf("row %s of %s arrived after declaration rev %d", k, d.day.BusinessDate, rev)
		}
	}
}

func TestUploadEverythingOnceAndDeclareDays(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	s.Sales(250, day0)
	s.Refund("T1", day0.Add(time.Hour))
	s.Sales(120, day1)
	s.DayClose(date0, day1.Add(-9*time.Hour-30*time.Minute), "T1", "T2", "T3") // 00:30 the next day
	h := newTestHQ(t)
	srv := startHQ(t, h)
	clk := newClock(day1.Add(2 * time.Hour)) // date0 is over, date1 is not
	u := MustNew(t, config(dir, s, srv.URL(), clk.Now))

	MustOnce(t, u)
	h.check(t, s)
	checkBatches(t, h, u)
	if ids, first := h.batchIDs(), nthBatch(t, u, 1); len(ids) < 4 || ids[0] != first {
		t.Errorf("batch ids %v, want %s on (374 rows in batches of 100, then the declaration)", ids, first)
	}
	d0 := h.daysOf(date0)
	if len(d0) != 1 {
		t.Fatalf("%s declared %d times, want once", date0, len(d0))
	}
	checkDay(t, h, s, d0[0], 1)
	if d := h.daysOf(date1); len(d) != 0 {
		t.Errorf("%s declared before it is over", date1)
	}

	// Nothing new: nothing sent.
	before := h.snap().requests
	MustOnce(t, u)
	if h.snap().requests != before {
		t.Errorf("an idle Once sent %d requests", h.snap().requests-before)
	}

	// A late offline sale of date0 goes up and date0 is declared again, revision 2.
	s.Sales(1, day0.Add(13*time.Hour), "T9")
	MustOnce(t, u)
	h.check(t, s)
	if d0 = h.daysOf(date0); len(d0) != 2 {
		t.Fatalf("%s declared %d times after a late sale, want twice", date0, len(d0))
	}
	checkDay(t, h, s, d0[1], 2)
	if len(d0[1].day.Txns) != len(d0[0].day.Txns)+1 {
		t.Errorf("revision 2 lists %d txns, revision 1 %d", len(d0[1].day.Txns), len(d0[0].day.Txns))
	}

	// The next day is over.
	clk.Set(day1.AddDate(0, 0, 1))
	MustOnce(t, u)
	d1 := h.daysOf(date1)
	if len(d1) != 1 {
		t.Fatalf("%s declared %d times, want once", date1, len(d1))
	}
	checkDay(t, h, s, d1[0], 1)
	if len(h.daysOf(date0)) != 2 {
		t.Errorf("%s declared again without new rows", date0)
	}

	st, err := u.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows := s.Outbox()
	if st.SentThrough != rows[len(rows)-1].ID || st.Backlog != 0 || st.Pending != "" ||
		!reflect.DeepEqual(st.Declared, map[string]int64{date0: 2, date1: 1}) {
		t.Errorf("status %+v", st)
	}
	checkBatches(t, h, u)
}

func TestRunSendsFullBatchesAtOnceAndSmallOnesAfterBatchAge(t *testing.T) {
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	h := newTestHQ(t)
	srv := startHQ(t, h)
	clk := newClock(day0.Add(time.Hour))
	cfg := config(dir, s, srv.URL(), clk.Now)
	cfg.BatchAge = 400 * time.Millisecond
	u := MustNew(t, cfg)
	runInBackground(t, u)

	// 30 rows wait for BatchAge.
	s.Sales(30, day0)
	time.Sleep(150 * time.Millisecond)
	if n := h.rowCount(); n != 0 {
		t.Errorf("%d rows sent before they were BatchAge old", n)
	}
	waitFor(t, 10*time.Second, "30 rows", func() bool { return h.rowCount() == 30 })

	// 250 rows do not wait: full batches go at once, the 50 left wait their turn.
	s.Sales(250, day0)
	start := time.Now()
	waitFor(t, 10*time.Second, "200 more rows", func() bool { return h.rowCount() >= 230 })
	if n := h.rowCount(); n != 230 && time.Since(start) < 300*time.Millisecond {
		t.Errorf("%d rows at HQ %v after, want 230 (50 waiting for BatchAge)", n, time.Since(start))
	}
	waitFor(t, 10*time.Second, "every row", func() bool { return h.rowCount() == 280 })
	h.check(t, s)
}

func TestHQDownForAWhileThenUp(t *testing.T) {
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	h := newTestHQ(t)
	srv := startHQ(t, h)
	srv.Down() // connections refused
	clk := newClock(day1.Add(time.Hour))
	u := MustNew(t, config(dir, s, srv.URL(), clk.Now))
	stop := runInBackground(t, u)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the store keeps selling
		defer wg.Done()
		for i := 0; i < 20; i++ {
			s.Sales(25, day0.Add(time.Duration(i)*time.Minute))
			time.Sleep(10 * time.Millisecond)
		}
		s.DayClose(date0, day1, "T1", "T2", "T3")
	}()
	time.Sleep(300 * time.Millisecond)
	// Up again, but flaky: 503s, dropped connections before and after storing.
	faults := []fault{unavailable, unavailable, dropBefore, unavailable, dropAfter, failAfter, dropAfter, answer,
		unavailable, failAfter}
	h.setFault(func(n int, b *hqwire.Batch) fault {
		if n <= len(faults) {
			return faults[n-1]
		}
		if n%5 == 0 {
			return dropAfter
		}
		return answer
	})
	srv.Up()
	wg.Wait()
	want := len(s.Outbox())
	waitFor(t, 30*time.Second, "every row at HQ", func() bool { return h.rowCount() == want })
	waitFor(t, 10*time.Second, "the declaration", func() bool { return len(h.daysOf(date0)) == 1 })
	stop()
	h.check(t, s)
	checkBatches(t, h, u)
	checkDay(t, h, s, h.daysOf(date0)[0], 1)
	var retried int
	if err := u.state.R.QueryRow(`SELECT count(*) FROM batches WHERE attempts > 0`).Scan(&retried); err != nil {
		t.Fatal(err)
	}
	if retried == 0 || h.snap().dups == 0 {
		t.Errorf("%d batches retried, %d duplicate receipts: the faults did not bite", retried, h.snap().dups)
	}
}

func TestCrashAfterRecordBeforeSend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	s.Sales(150, day0)
	h := newTestHQ(t)
	srv := startHQ(t, h)
	clk := newClock(day0.Add(time.Hour))
	cfg := config(dir, s, srv.URL(), clk.Now)

	u := MustNew(t, cfg)
	u.afterRecord = func(string) error { return errCrash }
	if err := u.Once(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("once: %v, want the crash", err)
	}
	recorded, pending := stateBatches(t, u)
	first := nthBatch(t, u, 1)
	u.Close()
	if h.snap().requests != 0 || pending != first {
		t.Fatalf("%d requests, pending %q, want %q", h.snap().requests, pending, first)
	}

	// More rows arrive before the restart: the recorded batch still carries exactly its rows.
	s.Sales(30, day0)
	clk.Set(day1)
	u = MustNew(t, cfg)
	MustOnce(t, u)
	if hash := h.snap().batches[first]; hash != recorded[first] {
		t.Errorf("batch 1 arrived with content %s, recorded %s", hash, recorded[first])
	}
	h.check(t, s)
	checkBatches(t, h, u)
	checkDay(t, h, s, h.daysOf(date0)[0], 1)
}

func TestCrashAfterHQStoredBeforeMarkedSent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	s.Sales(150, day0)
	h := newTestHQ(t)
	srv := startHQ(t, h)
	clk := newClock(day1)
	cfg := config(dir, s, srv.URL(), clk.Now)

	u := MustNew(t, cfg)
	u.afterSend = func(string) error { return errCrash }
	if err := u.Once(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("once: %v, want the crash", err)
	}
	_, pending := stateBatches(t, u)
	first := nthBatch(t, u, 1)
	u.Close()
	if h.snap().stored != 1 || pending != first {
		t.Fatalf("HQ stored %d batches, pending %q, want %q", h.snap().stored, pending, first)
	}
	s.Sales(10, day0)
	u = MustNew(t, cfg)
	MustOnce(t, u)
	if h.snap().dups != 1 {
		t.Errorf("%d duplicate receipts, want 1 (batch 1 sent again after the crash)", h.snap().dups)
	}
	h.check(t, s)
	checkBatches(t, h, u)
	checkDay(t, h, s, h.daysOf(date0)[0], 1)
}

func TestKilledAtRandomPointsAndRestarted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	h := newTestHQ(t)
	srv := startHQ(t, h)
	clk := newClock(day0.Add(time.Hour))
	cfg := config(dir, s, srv.URL(), clk.Now)
	cfg.BatchRows = 40
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	var mu sync.Mutex
	h.setFault(func(n int, b *hqwire.Batch) fault {
		mu.Lock()
		defer mu.Unlock()
		switch x := rng.IntN(100); {
		case x < 15:
			return dropAfter
		case x < 25:
			return failAfter
		case x < 35:
			return unavailable
		case x < 40:
			return dropBefore
		}
		return answer
	})

	stopWriter := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopWriter:
				return
			default:
			}
			s.Sales(15, day0.Add(time.Duration(i)*time.Second))
			time.Sleep(3 * time.Millisecond)
		}
	}()
	for i := 0; i < 40; i++ {
		u, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		life := time.Duration(rng.IntN(25000)) * time.Microsecond
		crash := rng.IntN(4)
		mu.Unlock()
		switch crash { // sometimes die exactly at the two delicate points
		case 1:
			u.afterRecord = func(string) error { return errCrash }
		case 2:
			u.afterSend = func(string) error { return errCrash }
		}
		ctx, cancel := context.WithTimeout(context.Background(), life)
		if crash == 0 {
			u.Run(ctx)
		} else {
			for ctx.Err() == nil {
				if _, err := u.step(ctx, true); err != nil {
					break // the crash, or the cancellation
				}
			}
		}
		cancel()
		u.Close()
	}
	close(stopWriter)
	wg.Wait()
	h.setFault(nil)
	clk.Set(day1)
	u := MustNew(t, cfg)
	MustOnce(t, u)
	h.check(t, s)
	checkBatches(t, h, u)
	checkDay(t, h, s, h.daysOf(date0)[0], 1)
	t.Logf("%d rows in %d batches, %d requests, %d duplicate receipts", h.rowCount(), len(h.batchIDs()),
		h.snap().requests, h.snap().dups)
}

// TestKilledProcessRestarted kills an uploader process with SIGKILL at random points of a
// long upload and restarts it.
func TestKilledProcessRestarted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	s.Sales(3000, day0)
	h := newTestHQ(t)
	h.delay = 2 * time.Millisecond
	srv := startHQ(t, h)
	state := filepath.Join(dir, "upload.db")
	kills := 0
	for i := 0; i < 6; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUploaderProcess$")
		cmd.Env = append(os.Environ(), "UPLOAD_LEDGER="+s.path, "UPLOAD_STATE="+state, "UPLOAD_URL="+srv.URL())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		startRows := h.rowCount()
		// Kill it once it has sent something (or after a while), at a random moment.
		deadline := time.Now().Add(10 * time.Second)
		for h.rowCount() == startRows && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(80)) * time.Millisecond)
		if cmd.Process.Kill() == nil {
			kills++
		}
		cmd.Wait()
		if strings.Contains(out.String(), "FAIL") {
			t.Fatalf("uploader process: %s", out.String())
		}
		s.Sales(50, day0)
	}
	u := MustNew(t, config(dir, s, srv.URL(), newClock(day1).Now))
	MustOnce(t, u)
	h.check(t, s)
	checkBatches(t, h, u)
	t.Logf("%d kills; %d rows in %d batches, %d requests, %d duplicate receipts", kills, h.rowCount(),
		len(h.batchIDs()), h.snap().requests, h.snap().dups)
}

// TestUploaderProcess is the uploader process of TestKilledProcessRestarted.
func TestUploaderProcess(t *testing.T) {
	ledgerPath := os.Getenv("UPLOAD_LEDGER")
	if ledgerPath == "" {
		t.Skip("run by TestKilledProcessRestarted")
	}
	cfg := Config{LedgerPath: ledgerPath, StatePath: os.Getenv("UPLOAD_STATE"), Store: testStore, Location: shanghai,
		Secret: testSecret, HQURL: os.Getenv("UPLOAD_URL"), BatchRows: 50, RetryBase: time.Millisecond,
		RetryCap: 20 * time.Millisecond, Now: func() time.Time { return day1 }, Logger: quietLogger()}
	u, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	u.Run(context.Background()) // until killed
}

func TestRefusedBatchStaysPendingAndBlocks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	s.Sales(350, day0)
	h := newTestHQ(t)
	srv := startHQ(t, h)
	clk := newClock(day1)
	cfg := config(dir, s, srv.URL(), clk.Now)
	var logs bytes.Buffer
	var logMu sync.Mutex
	cfg.Logger = slogTo(&lockedWriter{w: &logs, mu: &logMu})
	refusals := 0
	h.setFault(func(n int, b *hqwire.Batch) fault {
		if strings.HasSuffix(b.ID, "-000000002") && refusals < 4 {
			refusals++
			return refuse
		}
		return answer
	})
	u := MustNew(t, cfg)

	err := u.Once(context.Background())
	if perr.KindOf(err) != perr.Refused || perr.CodeOf(err) != CodeRefused {
		t.Fatalf("once: %v, want a refusal", err)
	}
	st, _ := u.Status(context.Background())
	if st.Pending != nthBatch(t, u, 2) || h.rowCount() != 100 || st.Attempts != 1 {
		t.Errorf("after the refusal: status %+v, %d rows at HQ; want batch 2 pending and only batch 1's 100 rows", st, h.rowCount())
	}

	// Run keeps the batch and tries again after RefusedRetry until HQ takes it.
	stop := runInBackground(t, u)
	waitFor(t, 20*time.Second, "every row", func() bool { return h.rowCount() == 350 })
	waitFor(t, 10*time.Second, "the declaration", func() bool { return len(h.daysOf(date0)) == 1 })
	stop()
	h.check(t, s)
	checkBatches(t, h, u)
	logMu.Lock()
	defer logMu.Unlock()
	if n := strings.Count(logs.String(), "HQ REFUSED THE BATCH"); n != 4 {
		t.Errorf("%d refusals logged, want 4:\n%s", n, logs.String())
	}

	t.Run("wrong secret", func(t *testing.T) {
		dir := t.TempDir()
		s := MustOpenStore(t, dir)
		s.Sales(5, day0)
		cfg := config(dir, s, srv.URL(), clk.Now)
		cfg.Secret = []byte("not the store secret at all")
		u := MustNew(t, cfg)
		if err := u.Once(context.Background()); perr.CodeOf(err) != CodeRefused || !strings.Contains(err.Error(), "401") {
			t.Errorf("once with a wrong secret: %v", err)
		}
	})
}

func TestBatchesStayUnderTheByteLimit(t *testing.T) {
	t.Parallel()
	t.Run("small budget", func(t *testing.T) {
		dir := t.TempDir()
		s := MustOpenStore(t, dir)
		s.SalesWithLines(60, 20, day0)
		h := newTestHQ(t)
		srv := startHQ(t, h)
		u := MustNew(t, config(dir, s, srv.URL(), newClock(day1).Now))
		u.budget = 40_000
		MustOnce(t, u)
		h.check(t, s)
		for i, n := range h.snap().bodies {
			if n > u.budget+2048 {
				t.Errorf("request %d: %d bytes, budget %d", i+1, n, u.budget)
			}
		}
		if len(h.snap().bodies) < 3 {
			t.Errorf("%d requests: the budget did not cut", len(h.snap().bodies))
		}
	})
	t.Run("protocol limit", func(t *testing.T) {
		dir := t.TempDir()
		s := MustOpenStore(t, dir)
		s.SalesWithLines(170, 250, day0) // about 55 kB of payload each: 9.4 MB
		h := newTestHQ(t)
		srv := startHQ(t, h)
		cfg := config(dir, s, srv.URL(), newClock(day1).Now)
		cfg.BatchRows = 1000
		u := MustNew(t, cfg)
		MustOnce(t, u)
		h.check(t, s)
		if len(h.snap().bodies) < 2 {
			t.Errorf("%d requests for about 12 MB", len(h.snap().bodies))
		}
		for i, n := range h.snap().bodies {
			if n > hqwire.MaxBatchBytes {
				t.Errorf("request %d: %d bytes, over %d", i+1, n, hqwire.MaxBatchBytes)
			}
		}
	})
}

// TestProgressLines: a catch-up prints "sent N rows, M left, R rows/s" lines, at most one a
// second of the uploader's clock (Now), whose sent and left add up to the backlog. Each of
// HQ's answers takes 200 ms on that clock.
func TestProgressLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	s.Sales(1200, day0)
	h := newTestHQ(t)
	clk := newClock(time.Now())
	h.setFault(func(int, *hqwire.Batch) fault {
		clk.Set(clk.Now().Add(200 * time.Millisecond))
		return answer
	})
	srv := startHQ(t, h)
	cfg := config(dir, s, srv.URL(), clk.Now)
	cfg.BatchRows = 20
	w := &timedWriter{now: clk.Now}
	cfg.Progress = w
	u := MustNew(t, cfg)
	start := clk.Now()
	MustOnce(t, u)
	h.check(t, s)
	line := regexp.MustCompile(`^sent (\d+) rows, (\d+) left, \d+ rows/s\n$`)
	if len(w.lines) < 2 {
		t.Fatalf("%d progress lines in a catch-up of %v", len(w.lines), clk.Now().Sub(start))
	}
	for i, l := range w.lines {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("line %q", l)
			continue
		}
		sent, _ := strconv.Atoi(m[1])
		left, _ := strconv.Atoi(m[2])
		if sent+left != 1200 {
			t.Errorf("line %q: sent + left is not 1200", l)
		}
		if i > 0 && w.at[i].Sub(w.at[i-1]) < time.Second {
			t.Errorf("lines %d and %d %v apart", i, i+1, w.at[i].Sub(w.at[i-1]))
		}
	}
	t.Logf("progress:\n%s", strings.Join(w.lines, ""))
}

// timedWriter keeps the lines written to it, and when each was written on its clock.
type timedWriter struct {
	now   func() time.Time
	lines []string
	at    []time.Time
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.lines = append(w.lines, string(p))
	w.at = append(w.at, w.now())
	return len(p), nil
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func TestRefusesAnotherStoreOrLedger(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	s.Sales(20, day0)
	h := newTestHQ(t)
	srv := startHQ(t, h)
	cfg := config(dir, s, srv.URL(), newClock(day1).Now)
	u := MustNew(t, cfg)
	MustOnce(t, u)
	u.Close()

	other := MustOpenStore(t, t.TempDir()) // a ledger with fewer rows (an old backup)
	other.Sales(5, day0)
	cfg2 := cfg
	cfg2.LedgerPath = other.path
	if _, err := New(context.Background(), cfg2); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("uploaded from a ledger without the acknowledged rows: %v", err)
	}
	another := MustOpenStore(t, t.TempDir()) // as many rows, other content
	another.Sales(20, day1)
	cfg2.LedgerPath = another.path
	if _, err := New(context.Background(), cfg2); err == nil {
		t.Error("uploaded from another ledger with as many rows")
	}
	cfg3 := cfg
	cfg3.Store = "S2"
	if _, err := New(context.Background(), cfg3); err == nil {
		t.Error("store S2 used store S1's state and ledger")
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Location = nil },
		func(c *Config) { c.Secret = nil },
		func(c *Config) { c.HQURL = "ftp://x" },
		func(c *Config) { c.LedgerPath = filepath.Join(dir, "missing.db") },
	} {
		c := cfg
		bad(&c)
		if u, err := New(context.Background(), c); err == nil {
			u.Close()
			t.Errorf("accepted %+v", c)
		}
	}
	if got := len(h.snap().problems); got != 0 {
		t.Errorf("problems %v", h.snap().problems)
	}
}

func TestBackoffIsFullJitterCapped(t *testing.T) {
	t.Parallel()
	u := &Uploader{cfg: Config{RetryBase: 100 * time.Millisecond, RetryCap: time.Second}}
	for n := 0; n < 70; n++ {
		window := min(time.Second, 100*time.Millisecond<<min(n, 20))
		var top time.Duration
		for i := 0; i < 300; i++ {
			d := u.backoff(n)
			if d < 0 || d > window {
				t.Fatalf("attempt %d: %v outside [0, %v]", n, d, window)
			}
			top = max(top, d)
		}
		if top < window/2 {
			t.Errorf("attempt %d: longest of 300 waits %v, window %v", n, top, window)
		}
	}
}

func TestBatchIDFormat(t *testing.T) {
	t.Parallel()
	if got := batchID("S1", "9f86d081", 42); got != "S1-9f86d081-000000042" {
		t.Errorf("batch id %q", got)
	}
	// Every valid store id gives a valid batch id, however long.
	for _, store := range []string{strings.Repeat("S", wire.MaxIDLen-19), strings.Repeat("S", wire.MaxIDLen-18),
		strings.Repeat("S", wire.MaxIDLen)} {
		if got := batchID(store, "9f86d081", 1_000_000_000); !wire.ValidID(got) || !strings.Contains(got, "9f86d081-1000000000") {
			t.Errorf("batch id of a %d-character store: %q", len(store), got)
		}
	}
}

func TestCatchUpOverManyDaysDeclaresEachDayOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	for d := 0; d < 6; d++ {
		s.Sales(30, day0.AddDate(0, 0, d))
		s.DayClose(day0.AddDate(0, 0, d).Format("2006-01-02"), day0.AddDate(0, 0, d).Add(13*time.Hour), "T1", "T2", "T3")
	}
	h := newTestHQ(t)
	srv := startHQ(t, h)
	u := MustNew(t, config(dir, s, srv.URL(), newClock(day0.AddDate(0, 0, 10)).Now))
	u.budget = 12_000 // a declaration of 30 sales is about 3.5 kB: a few per batch
	MustOnce(t, u)
	h.check(t, s)
	checkBatches(t, h, u)
	for d := 0; d < 6; d++ {
		date := day0.AddDate(0, 0, d).Format("2006-01-02")
		days := h.daysOf(date)
		if len(days) != 1 {
			t.Fatalf("%s declared %d times", date, len(days))
		}
		checkDay(t, h, s, days[0], 1)
	}
	for i, n := range h.snap().bodies {
		if n > u.budget+2048 {
			t.Errorf("request %d: %d bytes, budget %d", i+1, n, u.budget)
		}
	}
}

func TestEncodeBatchIsTheBatchJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	s.Sales(20, day0)
	s.Refund("T1", day0)
	var rows []hqwire.Row
	for _, o := range s.Outbox() {
		rows = append(rows, o.Row)
	}
	manifest, err := s.l.DayManifest(context.Background(), date0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []hqwire.Batch{
		{V: hqwire.Version, Store: "S1", ID: "S1-000000007", Rows: rows, SentAt: day1},
		{V: hqwire.Version, Store: "S1", ID: "S1-000000008", Rows: rows[:1], Days: []hqwire.StoreDay{{BusinessDate: date0,
			Revision: 2, ClosedAt: day1, Txns: manifest}}, SentAt: day1},
		{V: hqwire.Version, Store: "S1", ID: "S1-000000009", Days: []hqwire.StoreDay{{BusinessDate: date0, Revision: 1,
			ClosedAt: day1, Txns: manifest}}, SentAt: day1},
	} {
		want, err := json.Marshal(&b)
		if err != nil {
			t.Fatal(err)
		}
		var parts [][]byte
		for i := range b.Rows {
			js, _ := json.Marshal(&b.Rows[i])
			parts = append(parts, js)
		}
		got, err := encodeBatch(&b, append(append([]byte("["), bytes.Join(parts, []byte(","))...), ']'))
		if err != nil {
			t.Fatal(err)
		}
		if b.Rows == nil { // no rows: an empty array where Marshal writes null; both decode to no rows
			want = bytes.Replace(want, []byte(`"rows":null`), []byte(`"rows":[]`), 1)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("batch %s:\n got %.300s\nwant %.300s", b.ID, got, want)
		}
	}
}

// TestSplitParts: each part's JSON is within the limit, the parts are numbered 1..n and
// together list the day's transactions in order; a transaction larger than the limit on its
// own still goes, alone in its part.
func TestSplitParts(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 1, 23, 0, 0, 0, time.UTC)
	mk := func(n int) hqwire.StoreDay {
		d := hqwire.StoreDay{BusinessDate: date0, Revision: 7, ClosedAt: at}
		for i := range n {
			d.Txns = append(d.Txns, hqwire.Txn{Terminal: "T" + itoa(int64(i%3)), Seq: int64(i + 1), Kind: hqwire.KindSale,
				FlowNo: int64(i + 1), Amount: money.Fen(100 * i), ByMethod: map[string]money.Fen{"cash": money.Fen(100 * i)}})
		}
		return d
	}
	for _, c := range []struct {
		txns, limit, parts int
	}{{0, 1000, 1}, {1, 1000, 1}, {10, 100_000, 1}, {100, 2000, 0}, {100, 600, 0}, {3, 10, 3}} {
		d := mk(c.txns)
		ps, err := splitParts(d, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if c.parts > 0 && len(ps) != c.parts {
			t.Errorf("%d txns, limit %d: %d parts, want %d", c.txns, c.limit, len(ps), c.parts)
		}
		var all []hqwire.Txn
		if !wire.ValidID(ps[0].Split) {
			t.Errorf("%d txns, limit %d: split id %q", c.txns, c.limit, ps[0].Split)
		}
		if again, _ := splitParts(d, c.limit); again[0].Split == ps[0].Split {
			t.Errorf("%d txns, limit %d: two splits of the day have the same id %q", c.txns, c.limit, ps[0].Split)
		}
		for i, p := range ps {
			if p.Part != i+1 || p.Parts != len(ps) || p.Revision != 7 || p.BusinessDate != date0 || !p.ClosedAt.Equal(at) ||
				p.Split != ps[0].Split {
				t.Errorf("%d txns, limit %d: part %d is %d/%d of %s revision %d", c.txns, c.limit, i, p.Part, p.Parts,
					p.BusinessDate, p.Revision)
			}
			if n, _ := jsonSize(&p); n > c.limit && len(p.Txns) > 1 {
				t.Errorf("%d txns, limit %d: part %d takes %d bytes with %d txns", c.txns, c.limit, i+1, n, len(p.Txns))
			}
			all = append(all, p.Txns...)
		}
		if !slices.EqualFunc(all, d.Txns, sameTxn) {
			t.Errorf("%d txns, limit %d: the parts list %d txns, not the day's in order", c.txns, c.limit, len(all))
		}
		if c.txns > 1 && c.limit < 3000 && len(ps) < 2 {
			t.Errorf("%d txns, limit %d: not split", c.txns, c.limit)
		}
	}
}

// TestSentBatchesKeptAWeek: a store that trades all day sends a batch every few seconds;
// the state keeps those HQ acknowledged for a week and no more, and still says when the
// last one went.
func TestSentBatchesKeptAWeek(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, _, clk, cfg := restoreFixture(t)
	u := MustNew(t, cfg)
	sentOn := func() map[string]int {
		t.Helper()
		rows, err := u.state.R.Query(`SELECT substr(sent_at, 1, 10), count(*) FROM batches WHERE state = 'sent'
			GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var day string
			var n int
			if err := rows.Scan(&day, &n); err != nil {
				t.Fatal(err)
			}
			out[day] = n
		}
		return out
	}
	start := clk.Now()
	var days []string
	for day := range 3 {
		clk.Set(start.Add(time.Duration(day) * 4 * 24 * time.Hour))
		days = append(days, clk.Now().UTC().Format("2006-01-02"))
		for i := range 3 {
			s.Sales(1, day0.Add(time.Duration(10*day+i)*time.Minute), "T1")
			MustOnce(t, u)
		}
	}
	// Sent on days 0, 4 and 8: those of day 0 are more than a week old on day 8.
	got := sentOn()
	if _, ok := got[days[0]]; ok || got[days[1]] == 0 || got[days[2]] == 0 || len(got) != 2 {
		t.Errorf("sent batches kept, by day sent: %v; want those of %s and %s only", got, days[1], days[2])
	}
	st, err := u.Status(ctx)
	if err != nil || !st.LastSentAt.Equal(clk.Now()) || st.Backlog != 0 {
		t.Errorf("status %+v (%v): want the last batch sent now, backlog 0", st, err)
	}
}

// TestLastSentAfterAClockCorrected: the store's clock ran a year ahead for a while (a reset
// real-time clock, a wrong NTP server) and was then set right. The batches sent since say
// when HQ last acknowledged one: `--status` and posgate_upload_last_success_timestamp_seconds
// follow them, not the batches stamped a year ahead, or the alert on a store whose upload
// stopped could not fire for a year.
func TestLastSentAfterAClockCorrected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, _, clk, cfg := restoreFixture(t)
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	u := MustNew(t, cfg)
	right := clk.Now()
	s.Sales(2, day0, "T1")
	MustOnce(t, u)
	clk.Set(right.AddDate(1, 0, 0)) // a year ahead
	s.Sales(2, day0.Add(time.Minute), "T1")
	MustOnce(t, u)
	clk.Set(right.Add(time.Hour)) // set right
	s.Sales(2, day0.Add(2*time.Minute), "T1")
	MustOnce(t, u)
	st, err := u.Status(ctx)
	if err != nil || st.Backlog != 0 || !st.LastSentAt.Equal(clk.Now()) {
		t.Errorf("status %+v (%v): want backlog 0 and the last batch sent at %v", st, err, clk.Now())
	}
	v, _ := metricstest.Value(scrape(t, reg), "posgate_upload_last_success_timestamp_seconds", nil)
	if want := float64(clk.Now().Unix()); v != want {
		t.Errorf("last_success_timestamp_seconds = %v, want %v (now)", v, want)
	}
}
