package ledger

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// dayView is what the readers of one business date answer.
type dayView struct {
	Totals   map[string]client.Counters
	Closes   map[string]wire.DayClosePayload
	Manifest []hqwire.Txn
}

func mustDayView(tb testing.TB, l *Ledger, date string) dayView {
	tb.Helper()
	ctx := context.Background()
	var v dayView
	var err error
	if v.Totals, err = l.Totals(ctx, date); err != nil {
		tb.Fatal(err)
	}
	if v.Closes, err = l.DayCloses(ctx, date); err != nil {
		tb.Fatal(err)
	}
	err = l.ViewHQ(ctx, func(r *HQReader) error {
		v.Manifest, err = r.DayManifest(ctx, date)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func mustMaxOutbox(tb testing.TB, l *Ledger) int64 {
	tb.Helper()
	var id int64
	if err := l.db.R.QueryRow(`SELECT coalesce(max(id), 0) FROM hq_outbox`).Scan(&id); err != nil {
		tb.Fatal(err)
	}
	return id
}

func mustOutOfRedis(tb testing.TB, l *Ledger, dates ...string) {
	tb.Helper()
	for _, d := range dates {
		seen, err := l.ExpireFromRedis(context.Background(), d)
		if err == nil {
			err = l.KeysGone(context.Background(), d, seen)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

func mustEventsOf(tb testing.TB, q interface {
	QueryRow(string, ...any) *sql.Row
}, date string) int64 {
	tb.Helper()
	var n int64
	if err := q.QueryRow(`SELECT count(*) FROM events WHERE business_date = ?`, date).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestArchive: days out of Redis, acknowledged by HQ and older than the cut move to their
// month's archive, a real SQLite file checked against the ledger; the ledger keeps what the
// readers of a day need to find them (Totals, DayCloses, the day manifest answer the same),
// stock stays provable from the ledger alone, a till's next seq follows on, a late event of
// an archived day takes a flow number above the archive's and is counted with it, and a
// day with rows HQ has not acknowledged, or still in Redis, or after the cut, stays.
func TestArchive(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := mustOpenAt(t, path, day)
	MustAdjust(t, l, "open-A", "A", 1000)
	MustAdjust(t, l, "open-B", "B", 1000)
	jan10 := time.Date(2025, 1, 10, 11, 0, 0, 0, shanghai)
	jan20 := time.Date(2025, 1, 20, 11, 0, 0, 0, shanghai)
	jan25 := time.Date(2025, 1, 25, 11, 0, 0, 0, shanghai)
	feb5 := time.Date(2025, 2, 5, 11, 0, 0, 0, shanghai)
	MustCommit(t, l,
		withFlow(accepted("T1", 1, jan10, salePayload("s1", []item{{"A", 2, 100}, {"B", 1, 50}}, cash(300))), 1),
		withFlow(accepted("T2", 1, jan10, salePayload("s2", []item{{"A", 1, 100}}, card(100))), 2),
		withFlow(accepted("T1", 2, jan10, refundPayload("r1", "s1", 1, true, "cash", []item{{"A", 1, 100}})), 3),
		accepted("T1", 3, jan10.Add(8*time.Hour), &wire.DayClosePayload{BusinessDate: "2025-01-10", SaleCount: 1,
			SaleAmount: 250, RefundCount: 1, RefundAmount: 100}),
		withFlow(accepted("T1", 4, jan20, salePayload("s3", []item{{"B", 3, 50}}, qr(150))), 1),
		withFlow(accepted("T2", 2, jan25, salePayload("s4", []item{{"A", 1, 100}}, cash(100))), 1),
		withFlow(accepted("T1", 5, feb5, salePayload("s5", []item{{"A", 1, 100}}, cash(100))), 1),
		withFlow(accepted("T1", 6, day, salePayload("s6", []item{{"B", 1, 50}}, cash(50))), 1),
	)
	dates := []string{"2025-01-10", "2025-01-20", "2025-01-25", "2025-02-05", dayDate}
	before := map[string]dayView{}
	for _, d := range dates {
		before[d] = mustDayView(t, l, d)
	}
	if len(before["2025-01-10"].Manifest) != 3 || len(before["2025-01-10"].Closes) != 1 {
		t.Fatalf("the day's manifest %v and closes %v before the archive", before["2025-01-10"].Manifest, before["2025-01-10"].Closes)
	}
	stock := mustStock(t, l)
	acked := mustMaxOutbox(t, l)

	// Nothing is out of Redis yet: nothing moves.
	if got, err := l.Archive(ctx, "2025-02-01", acked); err != nil || len(got) != 0 {
		t.Fatalf("archive with every day in Redis: %+v (%v)", got, err)
	}
	mustOutOfRedis(t, l, "2025-01-10", "2025-02-05")
	got, err := l.Archive(ctx, "2025-02-01", acked)
	if err != nil {
		t.Fatal(err)
	}
	jan := filepath.Join(filepath.Dir(path), "archive", "ledger-2025-01.db")
	if want := []Archived{{File: jan, Days: []string{"2025-01-10"}, Events: 4}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("archived %+v, want %+v (2025-02-05 is after the cut, the rest in Redis)", got, want)
	}
	// The day with a row HQ has not acknowledged stays.
	mustOutOfRedis(t, l, "2025-01-20", "2025-01-25")
	got, err = l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l)-3) // s4..s6's rows not acknowledged
	if err != nil {
		t.Fatal(err)
	}
	if want := []Archived{{File: jan, Days: []string{"2025-01-20"}, Events: 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("second archive %+v, want %+v", got, want)
	}
	if got, err = l.Archive(ctx, "2025-02-01", acked); err != nil || len(got) != 1 || got[0].Days[0] != "2025-01-25" {
		t.Fatalf("third archive %+v (%v), want 2025-01-25 into the same file", got, err)
	}

	// The ledger holds only each terminal's last event of the archived days.
	if n := mustEventsOf(t, l.db.R, "2025-01-10"); n != 0 {
		t.Errorf("the ledger holds %d events of 2025-01-10 (T1's and T2's last events are of later days)", n)
	}
	if n := mustEventsOf(t, l.db.R, "2025-01-25"); n != 1 {
		t.Errorf("the ledger holds %d events of 2025-01-25, want T2's last one", n)
	}
	a, err := sqlitedb.OpenQueryOnly(ctx, jan, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for d, want := range map[string]int64{"2025-01-10": 4, "2025-01-20": 1, "2025-01-25": 1} {
		if n := mustEventsOf(t, a, d); n != want {
			t.Errorf("the archive holds %d events of %s, want %d", n, d, want)
		}
	}
	var check string
	if err := a.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("the archive's integrity: %q (%v)", check, err)
	}
	if _, err := os.Stat(jan + ".new"); !os.IsNotExist(err) {
		t.Errorf("the archive's work file is left: %v", err)
	}

	for _, d := range dates {
		if v := mustDayView(t, l, d); !reflect.DeepEqual(v, before[d]) {
			t.Errorf("%s after the archive:\n got %+v\nwant %+v", d, v, before[d])
		}
	}
	if s := mustStock(t, l); !reflect.DeepEqual(s, stock) {
		t.Errorf("stock %v after the archive, want %v", s, stock)
	}

	// A till goes on after its archived events: no gap.
	out := MustCommit(t, l, withFlow(accepted("T2", 3, day, salePayload("s7", []item{{"A", 1, 100}}, cash(100))), 2))
	if out[0].Err != nil || out[0].Status != wire.AckAccepted {
		t.Fatalf("T2's next sale after the archive: %+v", out[0])
	}
	// A till offline since 2025-01-10: its flow number comes after the archive's.
	out = MustCommit(t, l, withFlow(offline(accepted("T3", 1, jan10, salePayload("s8", []item{{"B", 1, 50}}, cash(50)))), 1))
	if out[0].Err != nil || out[0].FlowNo != 4 {
		t.Fatalf("late sale of the archived day: flow %d, err %v; want 4 (the archive holds 1-3)", out[0].FlowNo, out[0].Err)
	}
	v := mustDayView(t, l, "2025-01-10")
	if c := v.Totals["T3"]; c.Sales != 1 || c.Amount != 50 || !reflect.DeepEqual(v.Totals["T1"], before["2025-01-10"].Totals["T1"]) {
		t.Errorf("totals of the archived day with its late sale: %+v", v.Totals)
	}
	if len(v.Manifest) != 4 {
		t.Errorf("manifest of the archived day with its late sale: %d transactions, want 4", len(v.Manifest))
	}
	mustStock(t, l)
	var gaps int
	if err := l.db.R.QueryRow(`SELECT count(*) FROM seq_gaps`).Scan(&gaps); err != nil || gaps != 0 {
		t.Errorf("seq gaps after the archive: %d (%v)", gaps, err)
	}

	// The archive stays found across a reopen.
	l.Close()
	l = mustOpenAt(t, path, day)
	if v := mustDayView(t, l, "2025-01-20"); !reflect.DeepEqual(v, before["2025-01-20"]) {
		t.Errorf("2025-01-20 after a reopen: %+v", v)
	}
	files, err := l.ArchiveFiles()
	if err != nil || !reflect.DeepEqual(files, []string{jan}) {
		t.Errorf("archive files %v (%v)", files, err)
	}

	// An archived event delivered again is its duplicate, with its flow number; with other
	// content, a conflict. Neither counts again.
	s2 := withFlow(accepted("T2", 1, jan10, salePayload("s2", []item{{"A", 1, 100}}, card(100))), 9)
	if st := mustLookup(t, l, "T2", 1); st.Hash != s2.Hash || st.FlowNo != 2 {
		t.Errorf("lookup of an archived event: %+v", st)
	}
	out = MustCommit(t, l, s2)
	if !out[0].Duplicate || out[0].FlowNo != 2 || out[0].Status != wire.AckAccepted {
		t.Errorf("an archived sale again: %+v, want its duplicate with flow 2", out[0])
	}
	other := withFlow(accepted("T1", 1, jan10, salePayload("s1-other", []item{{"B", 1, 50}}, cash(50))), 9)
	out = MustCommit(t, l, other)
	if out[0].Status != wire.AckConflict {
		t.Errorf("an archived key with other content: %+v, want a conflict", out[0])
	}
	if v := mustDayView(t, l, "2025-01-10"); !reflect.DeepEqual(v.Totals["T1"], before["2025-01-10"].Totals["T1"]) ||
		!reflect.DeepEqual(v.Totals["T2"], before["2025-01-10"].Totals["T2"]) {
		t.Errorf("totals of the archived day after its events came again: %+v", v.Totals)
	}
	mustStock(t, l)
}

// TestReadWhileTheDayIsArchived: Totals and DayCloses that read the ledger just before an
// archive pass prunes the day, and its archive just after, count the day once.
func TestReadWhileTheDayIsArchived(t *testing.T) {
	const date = "2025-01-10"
	for _, read := range []string{"Totals", "DayCloses"} {
		t.Run(read, func(t *testing.T) {
			ctx := context.Background()
			l := mustOpenAt(t, filepath.Join(t.TempDir(), "ledger.db"), day)
			MustAdjust(t, l, "open-A", "A", 1000)
			jan10 := time.Date(2025, 1, 10, 11, 0, 0, 0, shanghai)
			MustCommit(t, l,
				withFlow(accepted("T1", 1, jan10, salePayload("s1", []item{{"A", 2, 100}}, cash(200))), 1),
				accepted("T1", 2, jan10.Add(8*time.Hour), &wire.DayClosePayload{BusinessDate: date, SaleCount: 1,
					SaleAmount: 200}),
				withFlow(accepted("T1", 3, day, salePayload("s2", []item{{"A", 1, 100}}, cash(100))), 1),
			)
			want := mustDayView(t, l, date)
			mustOutOfRedis(t, l, date)
			acked := mustMaxOutbox(t, l)
			archived := false
			l.betweenReads = func() {
				l.betweenReads = nil
				got, err := l.Archive(ctx, "2025-02-01", acked)
				if err != nil {
					t.Error(err)
				}
				archived = len(got) == 1
			}
			var got any
			var err error
			if read == "Totals" {
				got, err = l.Totals(ctx, date)
				if err == nil && !reflect.DeepEqual(got, want.Totals) {
					t.Errorf("Totals while the day was archived: %+v, want %+v", got, want.Totals)
				}
			} else {
				got, err = l.DayCloses(ctx, date)
				if err == nil && !reflect.DeepEqual(got, want.Closes) {
					t.Errorf("DayCloses while the day was archived: %+v, want %+v", got, want.Closes)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if !archived {
				t.Fatal("the day was not archived between the reads")
			}
			if got := mustDayView(t, l, date); !reflect.DeepEqual(got, want) {
				t.Fatalf("after the archive: %+v, want %+v", got, want)
			}
		})
	}
}

// TestArchiveWhereAPathHasURICharacters: a ledger in a directory whose name holds the
// characters a URI gives a meaning to moves its days into its own archive there, and reads
// them back.
func TestArchiveWhereAPathHasURICharacters(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store #1 100%")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ledger.db")
	l := mustOpenAt(t, path, day)
	MustAdjust(t, l, "open-A", "A", 10)
	jan10 := time.Date(2025, 1, 10, 11, 0, 0, 0, shanghai)
	MustCommit(t, l, withFlow(accepted("T1", 1, jan10, salePayload("s1", []item{{"A", 2, 100}}, cash(200))), 1))
	before := mustDayView(t, l, "2025-01-10")
	mustOutOfRedis(t, l, "2025-01-10", "2025-01-10")
	got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l))
	if err != nil {
		t.Fatal(err)
	}
	jan := filepath.Join(dir, "archive", "ledger-2025-01.db")
	if len(got) != 1 || got[0].File != jan || got[0].Events != 1 {
		t.Fatalf("archived %+v, want one event into %s", got, jan)
	}
	if after := mustDayView(t, l, "2025-01-10"); !reflect.DeepEqual(after, before) {
		t.Fatalf("the archived day reads %+v, was %+v", after, before)
	}
}
