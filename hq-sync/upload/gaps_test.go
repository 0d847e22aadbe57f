package upload

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hq"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/prometheus/client_golang/prometheus"
)

// GapSale commits terminal's sale after a gap in its seqs: the events of seqs next..next+n-1
// went to a ledger this one is not (reason), and the store accepts the one after them,
// recording the gap as the store-server does.
func (s *store) GapSale(terminal string, at time.Time, n int64, reason string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	from := s.seq[terminal] + 1
	s.seq[terminal] += n
	s.sale++
	r := s.record(terminal, at, wire.KindSale, salePayload(s.sale, 1))
	r.Gap = &ledger.SeqGap{From: from, To: from + n - 1, Reason: reason}
	out, err := s.l.Commit(context.Background(), []ledger.Record{r})
	if err != nil || out[0].Err != nil || out[0].Status != wire.AckAccepted || !out[0].GapRecorded {
		s.tb.Fatalf("commit %s after a gap: %+v, %v", wire.Key(r.Terminal, r.Seq), out, err)
	}
}

// olderHQWithoutSeqGaps is the release before seq gaps: it takes exceptions and parked
// events, refuses a batch with an exception of kind seq_gap (as its validation words it),
// and its receipts do not say takes_seq_gaps.
func olderHQWithoutSeqGaps() *olderHQ {
	return &olderHQ{lacks: "takes_seq_gaps", refuse: func(body []byte) (string, string, bool) {
		var b hq.Batch
		if json.Unmarshal(body, &b) != nil {
			return "", "", false
		}
		for i, x := range b.Exceptions {
			if x.Kind == hq.ExceptionSeqGap {
				return serve.CodeBatchInvalid, fmt.Sprintf(
					`exceptions[%d] (kind "seq_gap" terminal %q seq %d sku ""): kind "seq_gap" is not oversell, refund or parked`,
					i, x.Terminal, x.Seq), true
			}
		}
		return "", "", false
	}}
}

// sentGaps lists the seq gaps of the batches HQ was sent.
func sentGaps(l *batchLog) []string {
	var out []string
	for _, b := range l.batches() {
		for _, x := range b.Exceptions {
			if x.Kind == hq.ExceptionSeqGap {
				out = append(out, b.ID+" "+x.Key())
			}
		}
	}
	return out
}

// TestSeqGapsReachHQ: a gap the store took in a till's seqs (its ledger restored from a
// backup) reaches HQ as an exception of kind seq_gap, under the day of the event after it,
// saying which seqs the store lacks and why. An HQ of the release before, whose receipts do
// not say takes_seq_gaps, is never sent one: it gets the changes before the gap and the
// rows, the rest wait at the gap, and the status and metrics say they are held until
// takes_seq_gaps. HQ heard nothing of a gap before.
func TestSeqGapsReachHQ(t *testing.T) {
	ctx := context.Background()
	o := olderHQWithoutSeqGaps()
	o.older.Store(true)
	s, st, log, cfg := newHQFixture(t, func(h http.Handler) http.Handler { o.h = h; return o })
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	u := MustNew(t, cfg)

	s.Sales(3, day0)
	MustOnce(t, u) // a receipt: HQ takes exceptions and parked events, not seq gaps
	s.GapSale("T2", day0.Add(2*time.Minute), 4, ledger.GapRestored)
	s.OfflineSale("T9", day0.Add(3*time.Minute)) // an oversell, changed after the gap
	MustOnce(t, u)
	all := inLedger(t, s.l)
	before := slices.DeleteFunc(slices.Clone(all), func(x string) bool {
		return strings.HasPrefix(x, "seq_gap ") || strings.HasPrefix(x, "oversell T9:1 ")
	})
	// The oversell of T2's sale after the gap changed before it (the ledger records the gap
	// last in the sale's commit), and goes.
	if len(before) != len(all)-2 || !slices.Contains(before, "oversell T2:6 SKU004 oversold") {
		t.Fatalf("the ledger holds %q, want the sales' oversells, T2's gap and T9's oversell", all)
	}
	if got := atHQ(t, st); !slices.Equal(got, before) {
		t.Errorf("an HQ without seq gaps holds %q, want %q", got, before)
	}
	if rows, err := st.Rows(ctx, date0, testStore); err != nil || len(rows) != len(s.Outbox()) {
		t.Errorf("%d rows at HQ of the ledger's %d (%v)", len(rows), len(s.Outbox()), err)
	}
	if sent := sentGaps(log); len(sent) != 0 || o.refused.Load() != 0 {
		t.Fatalf("an HQ without seq gaps was sent %q (%d batches refused)", sent, o.refused.Load())
	}
	for _, via := range []string{"Status", "ReadStatus"} {
		stat, err := u.Status(ctx)
		if via == "ReadStatus" {
			stat, err = ReadStatus(ctx, s.path, cfg.StatePath, testStore, shanghai)
		}
		if err != nil {
			t.Fatalf("%s: %v", via, err)
		}
		if stat.ExceptionsWaiting != 2 || stat.ExceptionsHeld != 2 || stat.ExceptionsHeldUntil != HeldUntilSeqGaps {
			t.Errorf("%s says %d exception changes waiting, %d held until %q; want 2, 2, %q", via,
				stat.ExceptionsWaiting, stat.ExceptionsHeld, stat.ExceptionsHeldUntil, HeldUntilSeqGaps)
		}
	}
	fams := scrape(t, reg)
	if v, ok := metricstest.Value(fams, "posgate_upload_exception_changes_held",
		map[string]string{"until": HeldUntilSeqGaps}); !ok || v != 2 {
		t.Errorf("posgate_upload_exception_changes_held{until=%q} = %v (present %v), want 2", HeldUntilSeqGaps, v, ok)
	}

	o.older.Store(false)
	s.Sales(1, day0.Add(time.Hour)) // a receipt that says HQ takes seq gaps, then the rest
	MustOnce(t, u)
	MustOnce(t, u)
	if got, want := atHQ(t, st), inLedger(t, s.l); !slices.Equal(got, want) ||
		!slices.Contains(got, "seq_gap T2:2  restored") {
		t.Fatalf("HQ holds %q, the ledger %q", got, want)
	}
	stored, err := st.Exceptions(ctx, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range stored {
		if x.Kind == hq.ExceptionSeqGap && (!strings.HasPrefix(x.Detail, "seqs 2 to 5 of terminal T2: ") ||
			x.SKU != "" || x.Resolved) {
			t.Errorf("the gap at HQ: %+v, want seqs 2 to 5 of T2 and why, open", x.Exception)
		}
	}
	if stat, err := u.Status(ctx); err != nil || stat.ExceptionsWaiting != 0 || stat.ExceptionsHeld != 0 {
		t.Errorf("once HQ takes seq gaps: %+v, %v; want nothing waiting", stat, err)
	}
}

// TestSeqGapsWaitForAnHQGoneBack: HQ goes back to the release before seq gaps after its
// receipts said it takes them, and a gap is recorded. The batch built with it is refused;
// its rows go again without the exceptions, which wait at the gap; once HQ takes seq gaps
// again, the gap goes. Kept pending, the refused batch held back every later row.
func TestSeqGapsWaitForAnHQGoneBack(t *testing.T) {
	ctx := context.Background()
	o := olderHQWithoutSeqGaps()
	s, st, _, cfg := newHQFixture(t, func(h http.Handler) http.Handler { o.h = h; return o })
	u := MustNew(t, cfg)

	s.Sales(3, day0)
	MustOnce(t, u) // HQ takes exceptions, seq gaps among them

	o.older.Store(true)
	s.GapSale("T1", day0.Add(time.Minute), 2, ledger.GapNewLedger)
	before := slices.DeleteFunc(inLedger(t, s.l), func(x string) bool { return strings.HasPrefix(x, "seq_gap ") })
	s.Sales(4, day0.Add(time.Hour))
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := u.Once(ctx2); err != nil {
		t.Fatalf("upload to an HQ gone back a release, with a seq gap waiting: %v", err)
	}
	o.rowsWentAgain(t, s, st)
	if got := atHQ(t, st); !slices.Equal(got, before) {
		t.Fatalf("the older HQ holds %q: want %q, all but the gap", got, before)
	}
	if stat, err := u.Status(ctx); err != nil || stat.ExceptionsHeldUntil != HeldUntilSeqGaps {
		t.Errorf("status with HQ gone back: %+v, %v; want the changes held until %q", stat, err, HeldUntilSeqGaps)
	}

	o.upgradedAgain(t, s, st, u, 2) // a receipt that says HQ takes seq gaps, then they go
}
