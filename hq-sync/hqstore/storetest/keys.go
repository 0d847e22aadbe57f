package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// testConflictAcrossDays: a row's key is unique whatever its day. The same key with other
// content dated another day (a till restored from a backup reuses its seqs at a later
// time) is a row_conflict, and the batch stores nothing; the same row sent again is held.
func testConflictAcrossDays(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 5, D1, t0)
	b1, h1 := NewBatch("S1", "b-1", rows)
	MustPut(t, s, b1, h1, at1)
	before := Take(t, s, D1, D2)

	later := Sale("S1", "T1", 3, D2, t0.Add(24*time.Hour), 555, wire.MethodCard)
	fresh := Sales("S1", "T1", 6, 2, D2, t0.Add(24*time.Hour))
	b2, h2 := NewBatch("S1", "b-2", append(slices.Clone(fresh), later))
	_, err := s.PutBatch(context.Background(), b2, h2, at2)
	mustCode(t, err, perr.Conflict, hqwire.CodeRowConflict)
	before.MustEqual(t, Take(t, s, D1, D2), "after the same key with other content on another day")

	b3, h3 := NewBatch("S1", "b-3", append(slices.Clone(rows[2:4]), fresh...))
	if rc := MustPut(t, s, b3, h3, at2); rc.New != 2 || rc.Rows != 4 {
		t.Fatalf("two rows again and two new ones: %+v, want 2 new of 4", rc)
	}
	CheckRows(t, rowsOf(t, s, D2, ""), storedAll("S1", fresh, at2))
}

// testRowBelowHeld: a row of a terminal below the highest seq HQ holds of it that HQ has not
// got (a live refusal the till sent again later, which the store accepted after the
// terminal's next events) is new; with another row's key and content it is held.
func testRowBelowHeld(t *testing.T, s hqstore.Storage) {
	rows := Sales("S1", "T1", 1, 10, D1, t0)
	held := append(slices.Clone(rows[:4]), rows[5:]...)
	b1, h1 := NewBatch("S1", "b-1", held)
	MustPut(t, s, b1, h1, at1)
	b2, h2 := NewBatch("S1", "b-2", []hqwire.Row{rows[4], rows[7]})
	if rc := MustPut(t, s, b2, h2, at2); rc.New != 1 {
		t.Fatalf("seq 5 late and seq 8 again: %+v, want 1 new", rc)
	}
	want := append(storedAll("S1", held, at1), Stored("S1", rows[4], at2))
	CheckRows(t, rowsOf(t, s, D1, ""), want)
}

// testDateStores: the stores of a date are those with rows or a declaration of it, in byte
// order, each once.
func testDateStores(t *testing.T, s hqstore.Storage) {
	ctx := context.Background()
	for i, st := range []string{"S2", "S10", "S1"} {
		rows := Sales(st, "T1", 1, 3, D1, t0)
		var days []hqwire.StoreDay
		if i == 0 {
			days = append(days, Day(D1, 1, t0, rows))
		}
		b, h := NewBatch(st, "b", rows, days...)
		MustPut(t, s, b, h, at1)
	}
	// S3 declares D2 empty; S1 has rows of D2 without a declaration.
	b, h := NewBatch("S3", "b", nil, Day(D2, 1, t0, nil))
	MustPut(t, s, b, h, at1)
	b, h = NewBatch("S1", "b2", Sales("S1", "T1", 100, 2, D2, t0))
	MustPut(t, s, b, h, at1)
	for date, want := range map[string][]string{D1: {"S1", "S10", "S2"}, D2: {"S1", "S3"}, "2025-03-03": nil} {
		got, err := s.DateStores(ctx, date)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("stores of %s: %v, want %v", date, got, want)
		}
	}
	run := hqstore.ReconcileRun{Date: D1, Finished: at2, OK: true, Stores: 3, HQTxns: 9}
	for range 2 { // a run recorded twice is one
		if err := s.RecordReconcile(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
}
