package ledger

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

func TestTerminals(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	MustAdjust(t, l, "open-A", "A", 100)
	if got, err := l.Terminals(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Terminals of an empty ledger = %+v, %v", got, err)
	}

	sale := func(terminal string, seq int64, at time.Time) Record {
		return accepted(terminal, seq, at, salePayload(wire.Key(terminal, seq), []item{{"A", 1, 100}}, cash(100)))
	}
	hb := func(terminal string, seq int64, at time.Time, backlog int64) Record {
		return accepted(terminal, seq, at, &wire.HeartbeatPayload{Backlog: backlog, OldestAgeMs: backlog * 1000, CatalogVersion: 3})
	}
	// T1: a heartbeat, a later one, then a sale (the last event is not a heartbeat).
	// T2: only sales, one of them parked as bad input. T3: a refused heartbeat only.
	MustCommit(t, l,
		hb("T1", 1, day, 40),
		sale("T2", 1, day),
		hb("T1", 2, day.Add(time.Minute), 7),
		sale("T1", 3, day.Add(2*time.Minute)),
		refused(sale("T2", 2, day.Add(time.Minute)), wire.AckRejected, true, "payload_invalid"),
		refused(hb("T3", 1, day, 5), wire.AckRejected, true, "payload_invalid"),
	)
	later := day.Add(time.Hour)
	l.Now = func() time.Time { return later }
	MustCommit(t, l, sale("T2", 3, day.Add(3*time.Minute)))

	got, err := l.Terminals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []client.TerminalSeen{
		{Terminal: "T1", LastSeq: 3, LastKind: wire.KindSale, LastStatus: wire.AckAccepted,
			LastAt: day.Add(2 * time.Minute), LastReceived: day,
			Heartbeat: &client.Heartbeat{Seq: 2, At: day.Add(time.Minute), Received: day,
				HeartbeatPayload: wire.HeartbeatPayload{Backlog: 7, OldestAgeMs: 7000, CatalogVersion: 3}}},
		{Terminal: "T2", LastSeq: 3, LastKind: wire.KindSale, LastStatus: wire.AckAccepted,
			LastAt: day.Add(3 * time.Minute), LastReceived: later, Parked: 1},
		{Terminal: "T3", LastSeq: 1, LastKind: wire.KindHeartbeat, LastStatus: wire.AckRejected,
			LastAt: day, LastReceived: day, Parked: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Terminals\n got %+v\nwant %+v", got, want)
	}
}

// TestTerminalsFindsAnOldHeartbeat: a heartbeat far behind the terminal's last event is
// still found (in one seek: TestTerminalsSeek).
func TestTerminalsFindsAnOldHeartbeat(t *testing.T) {
	ctx := context.Background()
	l := MustOpen(t, day)
	recs := []Record{accepted("T1", 1, day, &wire.HeartbeatPayload{Backlog: 1})}
	for seq := int64(2); seq <= 6000; seq++ {
		recs = append(recs, accepted("T1", seq, day, &wire.ScanPayload{SaleID: "s", Line: 1, SKU: "A", Qty: 1, UnitPrice: 100}))
	}
	MustCommit(t, l, recs...)
	got, err := l.Terminals(ctx)
	if err != nil || len(got) != 1 || got[0].LastSeq != 6000 || got[0].Heartbeat == nil || got[0].Heartbeat.Seq != 1 {
		t.Fatalf("Terminals = %+v, %v; want T1 at 6000 with the heartbeat of seq 1", got, err)
	}
	MustCommit(t, l, accepted("T1", 6001, day, &wire.HeartbeatPayload{Backlog: 2}))
	got, err = l.Terminals(ctx)
	if err != nil || len(got) != 1 || got[0].Heartbeat == nil || got[0].Heartbeat.Backlog != 2 {
		t.Fatalf("Terminals = %+v, %v; want the new heartbeat", got, err)
	}
}

// TestTerminalsSeek: Terminals never scans the events table or sorts it.
func TestTerminalsSeek(t *testing.T) {
	l := MustOpen(t, day)
	for _, q := range []string{selTerminals, selLastEvent, selLastHeartbeat, selParked, selGaps} {
		plan := queryPlan(t, l, q, "T1", 1)
		all := strings.Join(plan, "; ")
		for _, step := range plan {
			// Only the recursive CTE's own rows (t) may be scanned.
			if strings.HasPrefix(step, "SCAN") && step != "SCAN t" || strings.Contains(step, "TEMP B-TREE") {
				t.Errorf("%s\nplan: %s", q, all)
			}
		}
		if !strings.Contains(all, "SEARCH") {
			t.Errorf("%s\nplan without a seek: %s", q, all)
		}
	}
}

// queryPlan returns the steps of SQLite's plan for query q, given the first of args for its
// parameters.
func queryPlan(t *testing.T, l *Ledger, q string, args ...any) []string {
	t.Helper()
	rows, err := l.db.R.Query(`EXPLAIN QUERY PLAN `+q, args[:strings.Count(q, "?")]...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var detail string
		if err := rows.Scan(new(int), new(int), new(int), &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
