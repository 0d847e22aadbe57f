package reconcile

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/money"
)

// wholeDay is the report of the date compared all at once: every row and declaration of
// every store read in one go, as the reconciliation once did. RunWith must give the same.
func wholeDay(t *testing.T, st hqstore.Storage, store string, expect ...string) Report {
	t.Helper()
	ctx := context.Background()
	rows, err := st.Rows(ctx, date, store)
	if err != nil {
		t.Fatal(err)
	}
	days, err := st.Days(ctx, date, store)
	if err != nil {
		t.Fatal(err)
	}
	xs, err := st.Exceptions(ctx, date, store)
	if err != nil {
		t.Fatal(err)
	}
	r := reconcile(date, store, rows, days, expect...)
	r.Exceptions = storeExceptions(xs)
	return r
}

// TestStoreByStoreIsTheWholeDay: a day of a dozen stores with every kind of difference,
// reconciled store by store with one worker or several, gives the report the comparison of
// the whole day at once gives, entry for entry and in the same order; with the stores HQ
// expects, and for one store.
func TestStoreByStoreIsTheWholeDay(t *testing.T) {
	st, _ := MustOpenHQ(t)
	for i := range 12 {
		sd := newStoreDay(fmt.Sprintf("S%02d", i), 1+i%3, 5+i)
		switch i % 6 {
		case 1: // a row missing at HQ
			sd.rows = sd.rows[1:]
		case 2: // a row HQ has that the declaration does not list
			sd.day.Txns = sd.day.Txns[1:]
		case 3: // an amount that differs
			sd.day.Txns[2].Amount += 1
			sd.day.Txns[2].ByMethod = map[string]money.Fen{}
			for m, a := range sd.rows[2].ByMethod {
				sd.day.Txns[2].ByMethod[m] = a + 1
			}
		case 4: // no declaration at all
			put(t, st, sd.store, "rows", received, append(sd.rows, sd.closes...))
			continue
		case 5: // no day close of the first terminal
			sd.closes = sd.closes[1:]
		}
		sd.upload(t, st)
	}
	late := newStoreDay("S99", 1, 3) // declared, then a row arrives late
	put(t, st, late.store, "rows", received, append(late.rows[1:], late.closes...))
	put(t, st, late.store, "day", received.Add(time.Second), nil, late.day)
	put(t, st, late.store, "late", received.Add(time.Hour), late.rows[:1])
	expect := []string{"S00", "S05", "S50"} // S50: HQ has nothing of it

	for _, c := range []struct {
		store  string
		expect []string
	}{{"", nil}, {"", expect}, {"S03", nil}, {"S50", expect}} {
		want := wholeDay(t, st, c.store, c.expect...)
		if want.OK() {
			t.Fatalf("the fixture reconciles (store %q): it must hold differences", c.store)
		}
		for _, workers := range []int{1, 3} {
			got, err := RunWith(context.Background(), st, date, Options{Store: c.store, Expect: c.expect, Workers: workers})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				var g, w bytes.Buffer
				got.WriteTable(&g)
				want.WriteTable(&w)
				t.Fatalf("store %q, expect %v, %d workers: store by store\n%s\nthe whole day\n%s", c.store, c.expect, workers,
					g.String(), w.String())
			}
		}
	}
}

// TestProgress: with Progress, RunWith says how far it is and ends with a summary line.
func TestProgress(t *testing.T) {
	st, _ := MustOpenHQ(t)
	for i := range 5 {
		newStoreDay(fmt.Sprintf("S%d", i), 1, 3).upload(t, st)
	}
	var out bytes.Buffer
	r, err := RunWith(context.Background(), st, date, Options{Progress: &out, ProgressEvery: time.Nanosecond})
	if err != nil || !r.OK() {
		t.Fatal(err, r.Counts)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "/5 stores") ||
		!strings.Contains(lines[len(lines)-1], fmt.Sprintf("5 stores, %d transactions compared", r.HQTxns+r.LedgerTxns)) {
		t.Fatalf("progress:\n%s", out.String())
	}
}
