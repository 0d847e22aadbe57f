package reconcile

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/internal/hqwire"
)

// TestFlowExceptionsListed: a store's flow exceptions of the date are listed among its
// exceptions, open and resolved with the manager's note, in (store, kind, terminal, seq)
// order; another date's are left out of the date's report, the open ones of every date are
// among the open exceptions, and the table names both receipts' numbers.
func TestFlowExceptionsListed(t *testing.T) {
	st, _ := MustOpenHQ(t)
	s1 := newStoreDay("S1", 2, 10)
	s1.upload(t, st)
	short := storetest.Oversell("T1", 2, "SKU-A", date, t0, 1, 1)
	b, h := storetest.ExceptionBatch("S1", "exceptions", nil, short)
	storetest.MustPut(t, st, b, h, received.Add(time.Hour))
	open := storetest.FlowException("T2", 3, date, t0, 7, 21, "T1:4", 10)
	resolved := storetest.ResolvedFlow(storetest.FlowException("T1", 9, date, t0, 5, 22, "", 11), t0.Add(time.Hour),
		"T1's receipt reprinted as no. 22", 12)
	later := storetest.FlowException("T1", 30, storetest.D2, t0.Add(24*time.Hour), 2, 9, "T2:1", 13)
	storetest.MustPutFlows(t, st, "S1", "f-10-13", received, 3, open, resolved, later)

	r := MustRun(t, st, "")
	wantResolved := StoreException{Kind: ExceptionFlow, Store: "S1", BusinessDate: date, Terminal: "T1", Seq: 9,
		Code: CodeFlowTaken, Detail: "the sale's receipt prints flow no. 5, which another transaction holds; booked as no. 22",
		FlowGiven: 5, FlowBooked: 22, Resolved: true, Resolution: "T1's receipt reprinted as no. 22"}
	wantOpen := StoreException{Kind: ExceptionFlow, Store: "S1", BusinessDate: date, Terminal: "T2", Seq: 3,
		Code: CodeFlowTaken, Detail: "the sale's receipt prints flow no. 7, which T1:4 holds; booked as no. 21",
		FlowGiven: 7, FlowBooked: 21, HeldBy: "T1:4"}
	want := []StoreException{wantResolved, wantOpen, {Kind: hqwire.ExceptionOversell, Store: "S1", BusinessDate: date,
		Terminal: "T1", Seq: 2, SKU: "SKU-A", Code: hqwire.CodeOversold, QtyShort: 1}}
	if !reflect.DeepEqual(r.Exceptions, want) {
		t.Fatalf("exceptions\n got %+v\nwant %+v", r.Exceptions, want)
	}
	if !r.OK() || r.OpenExceptions() != 2 {
		t.Fatalf("a clean day with flow exceptions: %s", r.Summary())
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	text := squeeze(table.String())
	for _, s := range []string{
		"EXCEPTIONS (3, 2 open)",
		"flow  S1  T1  9  -  flow_number_taken  -  resolved  the sale's receipt prints flow no. 5, which another transaction holds; booked as no. 22; resolution: T1's receipt reprinted as no. 22\n",
		"flow  S1  T2  3  -  flow_number_taken  -  open  the sale's receipt prints flow no. 7, which T1:4 holds; booked as no. 21\n",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("table lacks %q:\n%s", s, text)
		}
	}

	all, err := RunOpen(context.Background(), st, "S1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, x := range all.Exceptions {
		kinds = append(kinds, x.BusinessDate+" "+x.Kind+" "+x.Terminal)
	}
	if wantKinds := []string{date + " flow T2", date + " oversell T1", storetest.D2 + " flow T1"}; !reflect.DeepEqual(kinds, wantKinds) {
		t.Fatalf("open exceptions %q, want %q", kinds, wantKinds)
	}
}
