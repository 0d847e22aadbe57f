package reconcile

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/hq-sync/upload"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

var e2eSecret = []byte("e2e-secret-of-the-store")

// e2eStore is a store ledger written as the store-server writes it.
type e2eStore struct {
	tb   testing.TB
	l    *ledger.Ledger
	path string
	seq  map[string]int64
	flow int64
}

var shanghai = time.FixedZone("UTC+08:00", 8*3600)

func (s *e2eStore) commit(terminal string, at time.Time, kind wire.Kind, p wire.Payload) int64 {
	s.tb.Helper()
	body, err := json.Marshal(p)
	if err != nil {
		s.tb.Fatal(err)
	}
	s.seq[terminal]++
	seq := s.seq[terminal]
	r := ledger.Record{Terminal: terminal, Seq: seq, Kind: kind, At: at, Payload: body, Status: wire.AckAccepted,
		Final: true, Hash: wire.Hash(kind, "S1", terminal, seq, at, body)}
	if kind == wire.KindSale || kind == wire.KindRefund {
		s.flow++
		r.FlowNo = s.flow
	}
	out, err := s.l.Commit(context.Background(), []ledger.Record{r})
	if err != nil || out[0].Err != nil || out[0].Status != wire.AckAccepted {
		s.tb.Fatalf("commit %s:%d: %v %+v", terminal, seq, err, out)
	}
	return seq
}

func (s *e2eStore) sale(terminal string, at time.Time, n int) {
	p := &wire.SalePayload{SaleID: fmt.Sprintf("%s-%d", terminal, s.seq[terminal]+1), OpenedAt: at,
		Lines: []wire.Line{{Line: 1, SKU: "A", Qty: 1, UnitPrice: money.Fen(100 + n), Amount: money.Fen(100 + n)}},
		Total: money.Fen(100 + n)}
	switch n % 3 {
	case 0: // cash with change
		p.Payments, p.Change = []wire.Payment{{Method: wire.MethodCash, Amount: 1000}}, 1000-p.Total
	case 1: // card and cash, the cash all given back
		p.Payments = []wire.Payment{{Method: wire.MethodCash, Amount: 50}, {Method: wire.MethodCard, Amount: p.Total, Reference: "c"}}
		p.Change = 50
	default:
		p.Payments = []wire.Payment{{Method: wire.MethodQR, Amount: p.Total, Reference: "q"}}
	}
	s.commit(terminal, at, wire.KindSale, p)
}

func (s *e2eStore) refund(terminal string, at time.Time) {
	s.commit(terminal, at, wire.KindRefund, &wire.RefundPayload{RefundID: fmt.Sprintf("r%d", s.seq[terminal]+1),
		SaleID: terminal + "-1", SaleSeq: 1, Lines: []wire.RefundLine{{Line: 1, SKU: "A", Qty: 1, Amount: 100}},
		Amount: 100, Method: wire.MethodCash})
}

// dayClose commits the terminal's own totals of date, as terminal-agent counts them.
func (s *e2eStore) dayClose(terminal, date string, at time.Time) {
	s.tb.Helper()
	txns, err := s.l.DayManifest(context.Background(), date)
	if err != nil {
		s.tb.Fatal(err)
	}
	p := &wire.DayClosePayload{BusinessDate: date, Methods: []wire.MethodTotal{}}
	per := map[string]*wire.MethodTotal{}
	for _, tx := range txns {
		if tx.Terminal != terminal {
			continue
		}
		for m, a := range tx.ByMethod {
			if per[m] == nil {
				per[m] = &wire.MethodTotal{Method: m}
			}
			if tx.Kind == hqwire.KindSale {
				per[m].SaleCount++
				per[m].SaleAmount += a
			} else {
				per[m].RefundCount++
				per[m].RefundAmount += a
			}
		}
		if tx.Kind == hqwire.KindSale {
			p.SaleCount++
			p.SaleAmount += tx.Amount
		} else {
			p.RefundCount++
			p.RefundAmount += tx.Amount
		}
	}
	for _, m := range []string{wire.MethodCash, wire.MethodCard, wire.MethodQR} {
		if per[m] != nil {
			p.Methods = append(p.Methods, *per[m])
		}
	}
	s.commit(terminal, at, wire.KindDayClose, p)
}

// TestEndToEnd runs a store's day through the real pipeline: the store ledger, hq-sync
// upload, hq-sync serve on the SQLite engine, and reconcile — then an offline terminal's
// late sales and day close, which arrive after the store declared the day.
func TestEndToEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := ledger.Open(ctx, filepath.Join(dir, "ledger.db"), "S1", shanghai)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &e2eStore{tb: t, l: l, path: filepath.Join(dir, "ledger.db"), seq: map[string]int64{}}
	day := time.Date(2025, 3, 1, 9, 0, 0, 0, shanghai)
	for i := 0; i < 60; i++ {
		s.sale([]string{"T1", "T2"}[i%2], day.Add(time.Duration(i)*time.Minute), i)
	}
	s.refund("T1", day.Add(3*time.Hour))
	s.sale("T3", day.Add(4*time.Hour), 7) // T3 goes offline after this sale
	s.sale("T2", time.Date(2025, 3, 1, 23, 59, 0, 0, shanghai), 1)
	s.dayClose("T1", date, day.Add(14*time.Hour))
	s.dayClose("T2", date, time.Date(2025, 3, 2, 0, 5, 0, 0, shanghai))

	st, _ := MustOpenHQ(t)
	var hqNow atomic.Pointer[time.Time]
	setHQNow := func(t time.Time) { hqNow.Store(&t) }
	setHQNow(time.Date(2025, 3, 2, 1, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(serve.New(st, map[string][]byte{"S1": e2eSecret},
		serve.Options{Now: func() time.Time { return *hqNow.Load() }, MaxClockSkew: 24 * time.Hour}))
	defer srv.Close()
	cfg := upload.Config{LedgerPath: s.path, StatePath: filepath.Join(dir, "upload.db"), Store: "S1",
		Location: shanghai, Secret: e2eSecret, HQURL: srv.URL + serve.BatchesPath,
		Now: func() time.Time { return time.Date(2025, 3, 2, 9, 0, 0, 0, shanghai) }}
	u, err := upload.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.Once(ctx); err != nil {
		t.Fatal(err)
	}
	r := MustRun(t, st, "")
	var b bytes.Buffer
	r.WriteTable(&b)
	// T3 is offline: it has sold but not closed its day.
	if r.OK() || len(r.Missing) != 1 || r.Missing[0].Kind != NoDayClose || r.Missing[0].Terminal != "T3" ||
		len(r.Txns) != 0 || len(r.Totals) != 0 {
		t.Fatalf("before T3 is back:\n%s", b.String())
	}

	// T3 comes back: two offline sales of the day and its day close, after the declaration.
	setHQNow(hqNow.Load().Add(2 * time.Hour))
	s.sale("T3", day.Add(10*time.Hour), 8)
	s.sale("T3", day.Add(11*time.Hour), 9)
	s.dayClose("T3", date, time.Date(2025, 3, 2, 10, 0, 0, 0, shanghai))
	if err := u.Once(ctx); err != nil {
		t.Fatal(err)
	}
	r = MustRun(t, st, "")
	b.Reset()
	r.WriteTable(&b)
	if !r.OK() || r.Counts[Late] != 2 || r.HQTxns != 65 || r.LedgerTxns != 65 || r.DayCloses != 3 {
		t.Fatalf("after T3 is back:\n%s", b.String())
	}
	days, err := st.Days(ctx, date, "S1")
	if err != nil || len(days) != 1 || days[0].Day.Revision != 2 {
		t.Errorf("declarations %+v %v, want revision 2", days, err)
	}
	t.Logf("\n%s", b.String())
}

// TestSeqGapListedEndToEnd: a store whose data directory was lost starts an empty ledger;
// till T1's next event jumps the seqs the lost ledger held, and the store records the gap.
// T1's day close counts the lost sales, HQ's rows do not: the day does not reconcile, and
// the reconciliation lists the gap with the store's exceptions (table, JSON and CSV),
// saying which seqs the store lacks and why. It listed nothing to say why.
func TestSeqGapListedEndToEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := ledger.Open(ctx, filepath.Join(dir, "ledger.db"), "S1", shanghai)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &e2eStore{tb: t, l: l, path: filepath.Join(dir, "ledger.db"), seq: map[string]int64{}}
	day := time.Date(2025, 3, 1, 9, 0, 0, 0, shanghai)
	s.sale("T2", day, 2)

	// T1 sold seqs 1 to 3 (QR, 102 fen each) into the lost ledger; seq 4 comes to the new one.
	s.seq["T1"] = 3
	p := &wire.SalePayload{SaleID: "T1-4", OpenedAt: day, Total: 102,
		Lines:    []wire.Line{{Line: 1, SKU: "A", Qty: 1, UnitPrice: 102, Amount: 102}},
		Payments: []wire.Payment{{Method: wire.MethodQR, Amount: 102, Reference: "q"}}}
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	at := day.Add(time.Hour)
	s.flow++
	r := ledger.Record{Terminal: "T1", Seq: 4, Kind: wire.KindSale, At: at, Payload: body, Status: wire.AckAccepted,
		Final: true, Hash: wire.Hash(wire.KindSale, "S1", "T1", 4, at, body), FlowNo: s.flow, Sale: p,
		Gap: &ledger.SeqGap{From: 1, To: 3, Reason: ledger.GapPruned}}
	if out, err := l.Commit(ctx, []ledger.Record{r}); err != nil || out[0].Status != wire.AckAccepted || !out[0].GapRecorded {
		t.Fatalf("commit T1:4 after the gap: %+v, %v", out, err)
	}
	s.seq["T1"] = 4
	s.commit("T1", day.Add(10*time.Hour), wire.KindDayClose, &wire.DayClosePayload{BusinessDate: date,
		SaleCount: 4, SaleAmount: 408, Methods: []wire.MethodTotal{{Method: wire.MethodQR, SaleCount: 4, SaleAmount: 408}}})
	s.dayClose("T2", date, day.Add(10*time.Hour))

	st, _ := MustOpenHQ(t)
	srv := httptest.NewServer(serve.New(st, map[string][]byte{"S1": e2eSecret}, serve.Options{
		Now: func() time.Time { return time.Date(2025, 3, 2, 1, 0, 0, 0, time.UTC) }, MaxClockSkew: 24 * time.Hour}))
	defer srv.Close()
	u, err := upload.New(ctx, upload.Config{LedgerPath: s.path, StatePath: filepath.Join(dir, "upload.db"),
		Store: "S1", Location: shanghai, Secret: e2eSecret, HQURL: srv.URL + serve.BatchesPath,
		Now: func() time.Time { return time.Date(2025, 3, 2, 9, 0, 0, 0, shanghai) }})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for range 3 { // the first receipt says what HQ takes; the gap goes after it
		if err := u.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}

	rep := MustRun(t, st, "")
	var table bytes.Buffer
	rep.WriteTable(&table)
	if rep.OK() {
		t.Fatalf("T1's day close counts the lost sales, yet the day reconciles:\n%s", table.String())
	}
	var gap *StoreException
	for i := range rep.Exceptions {
		if rep.Exceptions[i].Kind == hqwire.ExceptionSeqGap {
			gap = &rep.Exceptions[i]
		}
	}
	if gap == nil {
		t.Fatalf("the reconciliation lists no seq gap:\n%s", table.String())
	}
	if gap.Store != "S1" || gap.Terminal != "T1" || gap.Seq != 1 || gap.SKU != "" || gap.Code != hqwire.SeqGapPruned ||
		gap.BusinessDate != date || gap.Resolved || !strings.HasPrefix(gap.Detail, "seqs 1 to 3 of terminal T1: ") {
		t.Errorf("the gap listed: %+v", *gap)
	}
	if !strings.Contains(squeeze(table.String()), "seq_gap  S1  T1  1  -  pruned  -  open  seqs 1 to 3 of terminal T1") {
		t.Errorf("the table lacks the gap:\n%s", table.String())
	}
	js, err := json.Marshal(&rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || !slices.Contains(back.Exceptions, *gap) {
		t.Errorf("the JSON report's exceptions %+v (%v), want the gap among them", back.Exceptions, err)
	}
	var cb bytes.Buffer
	if err := rep.WriteCSV(&cb); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(recs, func(r []string) bool {
		return slices.Equal(r[:5], []string{"exception", "seq_gap", "S1", "T1", "1"}) && r[11] == "" &&
			r[12] == hqwire.SeqGapPruned && r[14] == "false" && strings.HasPrefix(r[10], "seqs 1 to 3 of terminal T1")
	}) {
		t.Errorf("the CSV lacks the gap: %q", recs)
	}
	t.Logf("\n%s", table.String())
}
