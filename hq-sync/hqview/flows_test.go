package hqview

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/hqstore/storetest"
	"github.com/posgate/posgate/hq-sync/reconcile"
)

// TestFlowExceptionsShown: a store's flow exceptions of the reconciled date are among the
// date's exceptions, the open one among the open exceptions, both in the HTML report with
// their kind's words and the manager's note.
func TestFlowExceptionsShown(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows := storetest.Sales("S1", "T1", 1, 3, storetest.D1, storetest.T0)
	b, h := storetest.NewBatch("S1", "b-1", rows, storetest.Day(storetest.D1, 1, storetest.T0.Add(12*time.Hour), rows))
	storetest.MustPut(t, st, b, h, storetest.T0.Add(13*time.Hour))
	open := storetest.FlowException("T2", 1, storetest.D1, storetest.T0, 2, 4, "T1:2", 10)
	done := storetest.ResolvedFlow(storetest.FlowException("T2", 2, storetest.D1, storetest.T0, 3, 5, "T1:3", 11),
		storetest.T0.Add(time.Hour), "receipt 3 of T2 reprinted as 5", 12)
	storetest.MustPutFlows(t, st, "S1", "f-10-12", storetest.T0.Add(13*time.Hour), 2, open, done)

	o, err := BuildOverview(ctx, st, []string{"S1"}, storetest.D1, storetest.T0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if o.Reconcile == nil || len(o.Reconcile.Exceptions) != 2 || len(o.Open) != 1 || o.Open[0].Kind != reconcile.ExceptionFlow ||
		o.Open[0].Seq != 1 || len(o.Stores) != 1 || o.Stores[0].Exceptions != 2 || o.Stores[0].Open != 1 {
		t.Fatalf("overview: %+v (reconcile %+v)", o, o.Reconcile)
	}
	var html strings.Builder
	if err := WriteHTML(&html, o, "en"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"receipt flow number taken", "which T1:2 holds; booked as no. 4", "receipt 3 of T2 reprinted as 5"} {
		if !strings.Contains(html.String(), s) {
			t.Errorf("the report lacks %q:\n%s", s, html.String())
		}
	}
}
