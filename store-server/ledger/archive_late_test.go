package ledger

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/wire"
)

// TestArchiveLateEvents: the events of an archived day that arrive later (a till offline
// past --keep) go to the day's archive at the next pass once the day is out of Redis again
// and HQ holds them: the ledger keeps none of them, the archive holds them beside the rest,
// the day reads the same, stock stays provable, and an event moved so is found as before.
// A move of them that stopped after the archive was written and before the ledger let them
// go (the copy is in the archive, the ledger holds them still) counts them once.
func TestArchiveLateEvents(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := mustOpenAt(t, path, day)
	MustAdjust(t, l, "open-A", "A", 1000)
	MustAdjust(t, l, "open-B", "B", 1000)
	jan10 := time.Date(2025, 1, 10, 11, 0, 0, 0, shanghai)
	const d = "2025-01-10"
	MustCommit(t, l,
		withFlow(accepted("T1", 1, jan10, salePayload("s1", []item{{"A", 2, 100}, {"B", 1, 50}}, cash(300))), 1),
		withFlow(accepted("T2", 1, jan10, salePayload("s2", []item{{"A", 1, 100}}, card(100))), 2),
		withFlow(accepted("T1", 2, day, salePayload("s3", []item{{"B", 1, 50}}, cash(50))), 1),
		withFlow(accepted("T2", 2, day, salePayload("s4", []item{{"B", 1, 50}}, cash(50))), 2),
	)
	mustOutOfRedis(t, l, d)
	if got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l)); err != nil || len(got) != 1 || got[0].Events != 2 {
		t.Fatalf("first archive: %+v (%v)", got, err)
	}

	// T3, offline since 2025-01-10, comes back: two sales and its day close of that day,
	// then a sale of today.
	MustCommit(t, l,
		withFlow(offline(accepted("T3", 1, jan10, salePayload("s5", []item{{"A", 1, 100}}, cash(100)))), 1),
		withFlow(offline(accepted("T3", 2, jan10.Add(time.Hour), salePayload("s6", []item{{"B", 2, 50}}, qr(100)))), 2),
		accepted("T3", 3, jan10.Add(8*time.Hour), &wire.DayClosePayload{BusinessDate: d, SaleCount: 2, SaleAmount: 200}),
		withFlow(accepted("T3", 4, day, salePayload("s7", []item{{"A", 1, 100}}, cash(100))), 3),
	)
	want := mustDayView(t, l, d)
	if c := want.Totals["T3"]; c.Sales != 2 || c.Amount != 200 || len(want.Manifest) != 4 || len(want.Closes) != 1 {
		t.Fatalf("the archived day with its late events: %+v", want)
	}
	stock := mustStock(t, l)
	if n := mustEventsOf(t, l.db.R, d); n != 3 {
		t.Fatalf("the ledger holds %d events of %s before the pass, want T3's 3", n, d)
	}

	// The day is touched (its keys came back to Redis for the late sales): it stays.
	if got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l)); err != nil || len(got) != 0 {
		t.Fatalf("archive of a touched day: %+v (%v)", got, err)
	}
	mustOutOfRedis(t, l, d)
	// HQ does not hold the late rows yet: it stays.
	if got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l)-3); err != nil || len(got) != 0 {
		t.Fatalf("archive of a day HQ does not hold whole: %+v (%v)", got, err)
	}

	// A move that stopped after the archive was written: the day reads the same.
	final := l.ArchivePath(d)
	if err := startArchive(ctx, final, final+".new", l.storeID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.copyDays(ctx, final+".new", nil, []string{d}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(final+".new", final); err != nil {
		t.Fatal(err)
	}
	if v := mustDayView(t, l, d); !reflect.DeepEqual(v, want) {
		t.Errorf("%s with its late events in the ledger and copied to the archive:\n got %+v\nwant %+v", d, v, want)
	}

	got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l))
	if err != nil {
		t.Fatal(err)
	}
	if w := []Archived{{File: final, Days: []string{d}, Events: 3}}; !reflect.DeepEqual(got, w) {
		t.Fatalf("the late events' pass: %+v, want %+v", got, w)
	}
	if n := mustEventsOf(t, l.db.R, d); n != 0 {
		t.Errorf("the ledger holds %d events of %s after the pass", n, d)
	}
	var sales, closes int
	if err := l.db.R.QueryRow(`SELECT (SELECT count(*) FROM sales WHERE business_date = ?1),
		(SELECT count(*) FROM day_closes WHERE business_date = ?1)`, d).Scan(&sales, &closes); err != nil || sales+closes != 0 {
		t.Errorf("the ledger holds %d sales and %d day closes of %s after the pass (%v)", sales, closes, d, err)
	}
	a, err := sqlitedb.OpenQueryOnly(ctx, final, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if n := mustEventsOf(t, a, d); n != 5 {
		t.Errorf("the archive holds %d events of %s, want 5", n, d)
	}
	var events, maxFlow int64
	if err := l.db.R.QueryRow(`SELECT events, max_flow FROM archived_days WHERE business_date = ?`, d).Scan(&events, &maxFlow); err != nil ||
		events != 5 || maxFlow != 4 {
		t.Errorf("archived_days of %s: %d events, flow up to %d (%v); want 5 and 4", d, events, maxFlow, err)
	}
	if v := mustDayView(t, l, d); !reflect.DeepEqual(v, want) {
		t.Errorf("%s after its late events moved:\n got %+v\nwant %+v", d, v, want)
	}
	if s := mustStock(t, l); !reflect.DeepEqual(s, stock) {
		t.Errorf("stock %v after the late events moved, want %v", s, stock)
	}
	// Nothing is left to move: the next pass moves nothing.
	if got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l)); err != nil || len(got) != 0 {
		t.Errorf("a pass with nothing late: %+v (%v)", got, err)
	}
	// T3's moved sale delivered again is its duplicate.
	out := MustCommit(t, l, withFlow(offline(accepted("T3", 2, jan10.Add(time.Hour), salePayload("s6", []item{{"B", 2, 50}}, qr(100)))), 9))
	if !out[0].Duplicate || out[0].FlowNo != 4 {
		t.Errorf("a moved late sale again: %+v, want its duplicate with flow 4", out[0])
	}
}

// TestArchiveSeqsOfEveryDay: the archived seq of each till counts every day of a month
// moved at once, the last ones too: an event of the month's last day delivered again is its
// duplicate, not a new sale.
func TestArchiveSeqsOfEveryDay(t *testing.T) {
	ctx := context.Background()
	l := mustOpenAt(t, filepath.Join(t.TempDir(), "ledger.db"), day)
	MustAdjust(t, l, "open-A", "A", 1000)
	var days []string
	for i := range 3 {
		at := time.Date(2025, 1, 10+i, 11, 0, 0, 0, shanghai)
		MustCommit(t, l, withFlow(accepted("T1", int64(i+1), at, salePayload(fmt.Sprintf("s%d", i+1), []item{{"A", 1, 100}}, cash(100))), 1))
		days = append(days, at.Format(wire.BusinessDate))
	}
	MustCommit(t, l, withFlow(accepted("T1", 4, day, salePayload("s4", []item{{"A", 1, 100}}, cash(100))), 1))
	mustOutOfRedis(t, l, days...)
	if got, err := l.Archive(ctx, "2025-02-01", mustMaxOutbox(t, l)); err != nil || len(got) != 1 || len(got[0].Days) != 3 {
		t.Fatalf("archive of the month: %+v (%v)", got, err)
	}
	if seq, err := l.archivedSeq("T1"); err != nil || seq != 3 {
		t.Fatalf("T1's archived seq: %d (%v), want 3", seq, err)
	}
	last := withFlow(accepted("T1", 3, time.Date(2025, 1, 12, 11, 0, 0, 0, shanghai), salePayload("s3", []item{{"A", 1, 100}}, cash(100))), 9)
	if out := MustCommit(t, l, last); !out[0].Duplicate || out[0].FlowNo != 1 {
		t.Errorf("the month's last archived sale again: %+v, want its duplicate", out[0])
	}
	if v := mustDayView(t, l, "2025-01-12"); v.Totals["T1"].Sales != 1 {
		t.Errorf("totals of 2025-01-12 after its sale came again: %+v", v.Totals)
	}
}
