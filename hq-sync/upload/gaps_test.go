package upload

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
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

// sentGaps lists the seq gaps of the batches HQ was sent.
func sentGaps(l *batchLog) []string {
	var out []string
	for _, b := range l.batches() {
		for _, x := range b.Exceptions {
			if x.Kind == hqwire.ExceptionSeqGap {
				out = append(out, b.ID+" "+x.Key())
			}
		}
	}
	return out
}

// TestSeqGapsReachHQ: a gap the store took in a till's seqs (its ledger restored from a
// backup) reaches HQ as an exception of kind seq_gap, under the day of the event after it,
// saying which seqs the store lacks and why, with the exceptions changed after it and the
// rows. HQ heard nothing of a gap before.
func TestSeqGapsReachHQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, log, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)

	s.Sales(3, day0)
	MustOnce(t, u)
	s.GapSale("T2", day0.Add(2*time.Minute), 4, ledger.GapPruned)
	s.OfflineSale("T9", day0.Add(3*time.Minute)) // an oversell, changed after the gap
	MustOnce(t, u)
	all := inLedger(t, s.l)
	if !slices.Contains(all, "seq_gap T2:2  pruned") || !slices.Contains(all, "oversell T2:6 SKU004 oversold") ||
		!slices.ContainsFunc(all, func(x string) bool { return strings.HasPrefix(x, "oversell T9:1 ") }) {
		t.Fatalf("the ledger holds %q, want T2's gap, the oversell of its sale after it and T9's oversell", all)
	}
	if got := atHQ(t, st); !slices.Equal(got, all) {
		t.Fatalf("HQ holds %q, the ledger %q", got, all)
	}
	if sent := sentGaps(log); len(sent) != 1 {
		t.Errorf("HQ was sent the gap %d times (%q), want once", len(sent), sent)
	}
	if rows, err := st.Rows(ctx, date0, testStore); err != nil || len(rows) != len(s.Outbox()) {
		t.Errorf("%d rows at HQ of the ledger's %d (%v)", len(rows), len(s.Outbox()), err)
	}
	stored, err := st.Exceptions(ctx, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range stored {
		if x.Kind == hqwire.ExceptionSeqGap && (!strings.HasPrefix(x.Detail, "seqs 2 to 5 of terminal T2: ") ||
			x.SKU != "" || x.Resolved) {
			t.Errorf("the gap at HQ: %+v, want seqs 2 to 5 of T2 and why, open", x.Exception)
		}
	}
	if stat, err := u.Status(ctx); err != nil || stat.ExceptionsWaiting != 0 {
		t.Errorf("status: %+v, %v; want nothing waiting", stat, err)
	}
}
