package upload

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sclient "github.com/posgate/posgate/store-server/client"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/store-server/uploadstate"
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
	t.Parallel()
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
	got := map[string]hqstore.StoredRow{}
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
	t.Parallel()
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
	path := filepath.Join(dir, "hq.db")
	copyNew(tb, path, newHQFile)
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// checkHQDay fails unless HQ holds every ledger row of date0 once and the day declared at
// revision rev with as many transactions as the ledger's manifest; it returns both.
func checkHQDay(tb testing.TB, st *sqlite.Store, s *store, rev int64) (hqwire.StoreDay, []hqwire.Txn) {
	tb.Helper()
	ctx := context.Background()
	rows, err := st.Rows(ctx, date0, testStore)
	if err != nil {
		tb.Fatal(err)
	}
	want := 0
	for _, o := range s.Outbox() {
		if o.Row.BusinessDate == date0 {
			want++
		}
	}
	if len(rows) != want {
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

// partsSeen records the declarations in parts that reach HQ, in order, before HQ sees them.
type partsSeen struct {
	h      http.Handler
	mu     sync.Mutex
	seen   []string       // "date rREV PART/PARTS"
	txns   map[string]int // "date rREV" → transactions its parts listed
	splits []string       // the split id of each part 1, in order
	max    int            // the largest part's JSON
}

func (p *partsSeen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var b hqwire.Batch
	if err := json.Unmarshal(body, &b); err == nil {
		p.mu.Lock()
		for _, d := range b.Days {
			if d.InParts() {
				js, _ := json.Marshal(&d)
				p.max = max(p.max, len(js))
				rev := fmt.Sprintf("%s r%d", d.BusinessDate, d.Revision)
				p.seen = append(p.seen, fmt.Sprintf("%s %d/%d", rev, d.Part, d.Parts))
				if p.txns == nil {
					p.txns = map[string]int{}
				}
				if d.Part == 1 {
					p.txns[rev] = 0 // the parts start over
					p.splits = append(p.splits, d.Split)
				}
				p.txns[rev] += len(d.Txns)
			}
		}
		p.mu.Unlock()
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.h.ServeHTTP(w, r)
}

func (p *partsSeen) last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) == 0 {
		return ""
	}
	return p.seen[len(p.seen)-1]
}

// listed returns how many transactions the parts of a revision ("date rREV") listed, from
// its last part 1 on.
func (p *partsSeen) listed(rev string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.txns[rev]
}

func (p *partsSeen) take() (seen []string, maxPart int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen, p.seen = p.seen, nil
	return seen, p.max
}

// TestDayDeclaredInParts: a day whose declaration is larger than one batch goes to hq-sync
// serve (SQLite engine) in parts, each under the limit, and HQ takes the revision only with
// its last part: until then it holds the day's revision before. The parts of a revision all
// come from one snapshot of the ledger: a late sale that arrives while they go is declared by
// the next revision. An uploader killed between parts goes on where it was, and one whose
// parts HQ lost (its database restored) declares the day again from part 1.
func TestDayDeclaredInParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seen := &partsSeen{}
	s, st, cfg := newBigDay(t, func(h http.Handler) http.Handler { seen.h = h; return seen })
	dir := filepath.Dir(cfg.StatePath)
	s.Sales(5, day1)
	u := MustNew(t, cfg)
	const limit = 3000 // date0's 60 transactions take three parts of this, date1's 5 one batch
	u.dayLimit = limit

	held := func(date string) (rev int64, txns int) { return heldAt(t, st, date) }
	inParts := func(want map[string]sclient.UploadParts) {
		t.Helper()
		st, err := u.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(st.InParts, want) || len(st.TooLarge) > 0 {
			t.Fatalf("status: declaring in parts %v, too large %v; want %v, none", st.InParts, st.TooLarge, want)
		}
	}

	// declared checks the parts sent since the last check, that the parts of revision rev
	// from its last part 1 listed txns transactions, and that HQ holds the day at rev.
	declared := func(rev int64, txns int, want ...string) {
		t.Helper()
		if got, _ := seen.take(); !slices.Equal(got, want) {
			t.Fatalf("parts sent %q, want %q", got, want)
		}
		if n := seen.listed(fmt.Sprintf("%s r%d", date0, rev)); n != txns {
			t.Errorf("revision %d's parts listed %d transactions, want %d", rev, n, txns)
		}
		checkHQDay(t, st, s, rev)
		inParts(nil)
	}

	// Before each batch goes: while date0's parts are on their way HQ holds no declaration
	// of it, and the uploader's status says how far they are.
	var checks []string
	u.afterRecord = func(id string) error {
		if rev, _ := held(date0); rev != 0 {
			checks = append(checks, fmt.Sprintf("before %s HQ holds %s at revision %d", id, date0, rev))
		}
		return nil
	}
	MustOnce(t, u)
	if len(checks) > 0 {
		t.Fatal(checks)
	}
	got, maxPart := seen.take()
	want := []string{date0 + " r1 1/3", date0 + " r1 2/3", date0 + " r1 3/3"}
	if !slices.Equal(got, want) {
		t.Fatalf("parts sent %q, want %q", got, want)
	}
	if maxPart > limit {
		t.Errorf("a part of %d bytes; a part may take %d", maxPart, limit)
	}
	day, manifest := checkHQDay(t, st, s, 1)
	if !slices.EqualFunc(day.Txns, manifest, sameTxn) {
		t.Errorf("HQ holds %s as %+v, the ledger's manifest is %+v", date0, day.Txns, manifest)
	}
	if rev, n := held(date1); rev != 1 || n != 5 {
		t.Fatalf("%s declared at revision %d with %d txns, want 1 with 5", date1, rev, n)
	}
	inParts(nil)
	// A batch names its parts apart from its whole declarations: its receipt declares the
	// days of its days whole (markSent), and a part's day only with its last part.
	rows, err := u.state.R.QueryContext(ctx, `SELECT days, parts FROM batches WHERE parts <> '{}'`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; rows.Next(); n++ {
		var days, parts string
		if err := rows.Scan(&days, &parts); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(days, date0) || !strings.Contains(parts, date0) {
			t.Errorf("a batch with a part records days %s, parts %s", days, parts)
		}
	}
	if err := rows.Close(); err != nil || n != 3 {
		t.Errorf("%d batches recorded parts (%v), want 3", n, err)
	}

	// A late sale of date0 sent while the next revision's parts go (after the first): the
	// parts declare what the ledger held when they were taken; the sale, revision 3.
	s.Sales(3, day0.Add(5*time.Hour))
	late := false
	u.afterSend = func(string) error {
		if !late && seen.last() == date0+" r2 1/3" {
			late = true
			if rev, n := held(date0); rev != 1 || n != 60 {
				t.Errorf("with part 1 of revision 2 sent, HQ holds %s at revision %d with %d txns; want 1 with 60", date0, rev, n)
			}
			inParts(map[string]sclient.UploadParts{date0: {Revision: 2, Sent: 0, Parts: 3}}) // not yet marked sent
			s.Sales(1, day0.Add(6*time.Hour))
		}
		return nil
	}
	MustOnce(t, u)
	if !late {
		t.Fatal("part 1 of revision 2 was never sent")
	}
	got, _ = seen.take()
	want = []string{date0 + " r2 1/3", date0 + " r2 2/3", date0 + " r2 3/3",
		date0 + " r3 1/3", date0 + " r3 2/3", date0 + " r3 3/3"}
	if !slices.Equal(got, want) {
		t.Fatalf("parts sent %q, want %q", got, want)
	}
	if n2, n3 := seen.listed(date0+" r2"), seen.listed(date0+" r3"); n2 != 63 || n3 != 64 {
		t.Errorf("revision 2's parts listed %d transactions, revision 3's %d; want 63 (before the late sale) and 64", n2, n3)
	}
	day, manifest = checkHQDay(t, st, s, 3)
	if len(day.Txns) != 64 || !slices.EqualFunc(day.Txns, manifest, sameTxn) {
		t.Errorf("HQ holds %s as %d txns, the ledger's manifest has %d", date0, len(day.Txns), len(manifest))
	}

	// Killed after the late row's batch was recorded, then after HQ took part 1 but before it
	// was marked sent: a new uploader sends part 1 again (HQ answers its first receipt) and
	// goes on.
	s.Sales(1, day0.Add(7*time.Hour))
	calls := 0
	u.afterRecord = func(string) error {
		if calls++; calls == 1 {
			return errCrash
		}
		return nil
	}
	u.afterSend = func(string) error {
		if calls == 2 {
			return errCrash
		}
		return nil
	}
	for range 2 {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := u.Once(c)
		cancel()
		if !errors.Is(err, errCrash) {
			t.Fatalf("want the crash, got %v", err)
		}
	}
	inParts(map[string]sclient.UploadParts{date0: {Revision: 4, Sent: 0, Parts: 3}})
	u.Close()
	u = MustNew(t, cfg)
	u.dayLimit = limit
	MustOnce(t, u)
	declared(4, 65, date0+" r4 1/3", date0+" r4 1/3", date0+" r4 2/3", date0+" r4 3/3")

	// HQ loses the parts it kept aside (its database restored from before they came): the
	// next part does not follow, HQ drops it, and the day goes again from part 1.
	s.Sales(1, day0.Add(8*time.Hour))
	hqDB, err := sql.Open("sqlite3", filepath.Join(dir, "hq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer hqDB.Close()
	lost := false
	u.afterSend = func(string) error {
		if !lost && seen.last() == date0+" r5 1/3" {
			lost = true
			_, err := hqDB.ExecContext(ctx, `DELETE FROM draft_txns; DELETE FROM day_drafts`)
			return err
		}
		return nil
	}
	MustOnce(t, u)
	// Part 2 dropped, then again from part 1, split anew.
	declared(5, 66, date0+" r5 1/3", date0+" r5 2/3", date0+" r5 1/3", date0+" r5 2/3", date0+" r5 3/3")
	if sp := seen.splits[len(seen.splits)-2:]; sp[0] == sp[1] {
		t.Errorf("revision 5 was split again with the same split id %q", sp[0])
	}
	if days, txns, err := st.PartsKept(ctx); err != nil || days != 0 || txns != 0 {
		t.Errorf("HQ keeps parts of %d days (%d txns) aside (%v); want none", days, txns, err)
	}
	// HQ proves the day transaction by transaction from the declaration it took in parts.
	rep, err := reconcile.Run(ctx, st, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Txns) > 0 || rep.LedgerTxns != 66 || rep.HQTxns != 66 ||
		slices.ContainsFunc(rep.Missing, func(m reconcile.MissingDeclaration) bool { return m.Kind == reconcile.NoStoreDay }) {
		t.Errorf("reconcile of %s: %d differences, %d txns declared, %d at HQ, missing %+v; want none, 66, 66, no store day missing",
			date0, len(rep.Txns), rep.LedgerTxns, rep.HQTxns, rep.Missing)
	}
}

// newBigDay starts a store whose date0 holds 60 sales (three parts of 3,000 bytes) and
// hq-sync serve on SQLite behind wrap, the clock after date0 and date1, and returns the
// store, HQ's database and the uploader's configuration.
func newBigDay(t *testing.T, wrap func(http.Handler) http.Handler) (*store, *sqlite.Store, Config) {
	t.Helper()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	st := mustOpenHQ(t, dir)
	clk := newClock(day1.AddDate(0, 0, 1).Add(time.Hour)) // date0 and date1 are over
	srv := httptest.NewServer(wrap(serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: clk.Now})))
	t.Cleanup(srv.Close)
	s.Sales(60, day0)
	return s, st, config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
}

// heldAt returns the revision of date HQ holds (0: none) and its transactions.
func heldAt(t *testing.T, st *sqlite.Store, date string) (rev int64, txns int) {
	t.Helper()
	days, err := st.Days(context.Background(), date, testStore)
	if err != nil || len(days) > 1 {
		t.Fatalf("days of %s: %+v %v", date, days, err)
	}
	if len(days) == 0 {
		return 0, 0
	}
	return days[0].Day.Revision, len(days[0].Day.Txns)
}

func sameTxn(a, b hqwire.Txn) bool {
	return a.Terminal == b.Terminal && a.Seq == b.Seq && a.Kind == b.Kind && a.FlowNo == b.FlowNo &&
		a.Amount == b.Amount && sameMap(a.ByMethod, b.ByMethod)
}

// TestDayTooLargeToDeclare: a day whose declaration would take more parts than HQ takes is
// left undeclared (and reported) while its rows and the other days still go, instead of
// being sent to an HQ that must refuse it and holding back every batch after it. A late
// row of the day tries again; with room, the day is declared.
func TestDayTooLargeToDeclare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, cfg := newBigDay(t, func(h http.Handler) http.Handler { return h })
	s.Sales(5, day1)
	u := MustNew(t, cfg)
	u.dayLimit = 3000 // date0's 60 transactions take three parts, date1's 5 one
	u.maxParts = 2

	declared := func(date string) int64 {
		t.Helper()
		rev, _ := heldAt(t, st, date)
		return rev
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
		if !slices.Equal(got.TooLarge, want) || got.Pending != "" || got.Backlog != 0 || len(got.InParts) > 0 {
			t.Fatalf("status %+v: want nothing pending, left or in parts and %v too large to declare", got, want)
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

	// With room for its parts, the next late sale gets the day declared.
	u.maxParts = hqwire.MaxDayParts
	s.Sales(1, day0.Add(6*time.Hour))
	MustOnce(t, u)
	if atHQ(date0) != 62 || declared(date0) != 1 {
		t.Fatalf("with room: %d rows of %s at HQ, declared at %d; want 62, revision 1", atHQ(date0), date0, declared(date0))
	}
	status()
}

// problem answers 400 with a problem document as hq-sync serve writes one.
func problem(w http.ResponseWriter, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(serve.Problem{Type: serve.ProblemTypePrefix + code, Title: "Bad batch",
		Status: http.StatusBadRequest, Code: code, Detail: detail})
}

// refusingParts is HQ refusing, while on, every batch that carries a part for something in
// it (a transaction it finds invalid, say).
type refusingParts struct {
	h       http.Handler
	on      atomic.Bool
	refused atomic.Int64
}

func (o *refusingParts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if o.on.Load() && refusePart(w, r, &o.refused, hqwire.CodeBatchInvalid, `day 2026-11-28: transaction T1:7 is not valid`) {
		return
	}
	o.h.ServeHTTP(w, r)
}

// refusePart answers a batch that carries a part of a day's declaration with a 400 problem
// of code and detail, counting it in refused, and reports whether it did; any other batch
// is left in r to be served.
func refusePart(w http.ResponseWriter, r *http.Request, refused *atomic.Int64, code, detail string) bool {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return true
	}
	if bytes.Contains(body, []byte(`"parts":`)) {
		refused.Add(1)
		problem(w, code, detail)
		return true
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return false
}

// TestPartRefusedForItsContent: a batch with a part that HQ refuses is refused like any
// batch: it stays pending, loudly, and is sent again as it is; the rows after it wait.
// Once HQ takes it, the day is declared.
func TestPartRefusedForItsContent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := &refusingParts{}
	o.on.Store(true)
	s, st, cfg := newBigDay(t, func(h http.Handler) http.Handler { o.h = h; return o })
	u := MustNew(t, cfg)
	u.dayLimit = 3000
	var pending string
	for range 3 {
		err := u.Once(ctx)
		if perr.CodeOf(err) != CodeRefused {
			t.Fatalf("Once: %v; want the batch with part 1 refused", err)
		}
		got, err := u.Status(ctx)
		if err != nil || got.Pending == "" || (pending != "" && got.Pending != pending) {
			t.Fatalf("status %+v (%v): want the same batch pending (%q)", got, err, pending)
		}
		pending = got.Pending
		s.Sales(1, day1) // later rows wait behind the refused batch
	}
	if rev, _ := heldAt(t, st, date0); rev != 0 || o.refused.Load() != 3 {
		t.Fatalf("HQ holds %s at revision %d after %d refusals; want nothing after 3", date0, rev, o.refused.Load())
	}
	o.on.Store(false)
	MustOnce(t, u)
	checkHQDay(t, st, s, 1)
	if got, err := u.Status(ctx); err != nil || got.Pending != "" || len(got.TooLarge) > 0 || len(got.InParts) > 0 {
		t.Fatalf("status %+v (%v): want everything sent and declared", got, err)
	}
}

// TestStateRestoredFromBackup: the upload state comes back from last night's backup (the
// disk replaced; the ledger intact). Its next batch ids were taken by HQ since, with other
// content: HQ refuses the first (422 batch_id_reused), the uploader starts a new batch
// series, and every row of the day reaches HQ once.
func TestStateRestoredFromBackup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := MustOpenStore(t, dir)
	st := mustOpenHQ(t, dir)
	clk := newClock(day0.Add(time.Hour))
	srv := httptest.NewServer(serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: clk.Now}))
	t.Cleanup(srv.Close)
	cfg := config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
	cfg.BatchRows = 50
	s.Sales(50, day0)
	u := MustNew(t, cfg)
	MustOnce(t, u)
	u.Close()
	backup := cfg.StatePath + ".bak"
	copyState(t, cfg.StatePath, backup) // the nightly backup
	s.Sales(120, day0.Add(time.Hour))
	u = MustNew(t, cfg)
	MustOnce(t, u)
	u.Close()
	copyState(t, backup, cfg.StatePath) // the disk is replaced; the state comes back from the backup
	s.Sales(10, day0.Add(2*time.Hour))
	u = MustNew(t, cfg)
	MustOnce(t, u)
	if got, err := u.Status(context.Background()); err != nil || got.Pending != "" || got.Backlog != 0 {
		t.Fatalf("status %+v (%v): want everything sent", got, err)
	}
	rows, err := st.Rows(context.Background(), date0, testStore)
	if err != nil || len(rows) != 180 {
		t.Fatalf("HQ holds %d rows of %s (%v), want 180", len(rows), date0, err)
	}
}

// copyState copies an upload state (closed) from one path to another, as a backup does.
func copyState(t *testing.T, from, to string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(from + suffix)
		if errors.Is(err, fs.ErrNotExist) {
			os.Remove(to + suffix)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(to + "-shm")
}

// receipts is HQ counting the receipts it answers.
type receipts struct {
	h http.Handler
	n atomic.Int64
}

func (c *receipts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, r)
	if rec.Code == http.StatusOK {
		c.n.Add(1)
	}
	maps.Copy(w.Header(), rec.Header())
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// TestBatchesCountedAcrossSeries: the status's batches are those HQ acknowledged to the
// state, the batches of a series before a new one (the state restored from a backup, HQ
// holding its next ids with other content) among them. It read the batch counter of the
// series, which the new series starts at 0 again: the store's upload looked as if it had
// only begun.
func TestBatchesCountedAcrossSeries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &receipts{}
	s, _, _, cfg := newHQFixture(t, func(h http.Handler) http.Handler { c.h = h; return c })
	cfg.BatchRows = 50
	batches := func(step string, want int64) {
		t.Helper()
		st, err := uploadstate.ReadStatus(ctx, s.path, cfg.StatePath, testStore, shanghai)
		if err != nil {
			t.Fatal(err)
		}
		if st.Batches != want {
			t.Errorf("%s: status says %d batches, HQ acknowledged %d to the state", step, st.Batches, want)
		}
	}
	s.Sales(120, day0)
	u := MustNew(t, cfg)
	MustOnce(t, u)
	u.Close()
	before := c.n.Load()
	batches("sent", before)
	backup := cfg.StatePath + ".bak"
	copyState(t, cfg.StatePath, backup) // the nightly backup
	s.Sales(60, day0.Add(time.Hour))
	u = MustNew(t, cfg)
	MustOnce(t, u)
	u.Close()
	copyState(t, backup, cfg.StatePath) // the state comes back from the backup
	series := seriesOf(t, cfg.StatePath)
	lost := c.n.Load() - before // acknowledged to the state lost with the disk
	s.Sales(10, day0.Add(2*time.Hour))
	u = MustNew(t, cfg)
	MustOnce(t, u) // HQ refuses the next id (batch_id_reused): a new series
	u.Close()
	if got := seriesOf(t, cfg.StatePath); got == series {
		t.Fatalf("the state goes on with series %s: want a new one", got)
	}
	batches("after a new series", c.n.Load()-lost)
}

// seriesOf reads the batch series of the upload state at path.
func seriesOf(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRow(`SELECT v FROM kv WHERE k = 'batch_series'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
