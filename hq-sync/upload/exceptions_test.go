package upload

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/metricstest"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// OfflineSale commits a sale the terminal made offline, of one line, or of one line per
// SKU given. No stock is ever booked in these tests, so it takes its SKUs below zero and the
// ledger flags an oversell of each, as it does every sale of these tests.
func (s *store) OfflineSale(terminal string, at time.Time, skus ...string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sale++
	p := salePayload(s.sale, len(skus))
	for i, sku := range skus {
		p.Lines[i].SKU = sku
	}
	if err := p.Validate(); err != nil {
		s.tb.Fatalf("the wire refuses the sale: %v", err)
	}
	r := s.record(terminal, at, wire.KindSale, p)
	r.Offline = true
	s.commit([]ledger.Record{r})
}

// RefundBeforeSale makes terminal's next sale and a refund of it, and commits only the
// refund: the ledger flags it refund_sale_unknown. It returns the sale, to commit later.
func (s *store) RefundBeforeSale(terminal string, at time.Time) ledger.Record {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sale++
	p := salePayload(s.sale, 1)
	sale := s.record(terminal, at, wire.KindSale, p)
	sale.Offline = true
	refund := s.record(terminal, at.Add(time.Minute), wire.KindRefund, &wire.RefundPayload{
		RefundID: fmt.Sprintf("r%d", s.sale), SaleID: p.SaleID, SaleSeq: sale.Seq, Amount: p.Lines[0].Amount,
		Lines:  []wire.RefundLine{{Line: 1, SKU: p.Lines[0].SKU, Qty: 1, Amount: p.Lines[0].Amount}},
		Method: wire.MethodCash})
	s.commit([]ledger.Record{refund})
	return sale
}

// exceptionLines lists exceptions as "kind terminal:seq sku code[ resolved: note]".
func exceptionLines(xs []hqwire.Exception) []string {
	out := []string{}
	for _, x := range xs {
		s := fmt.Sprintf("%s %s %s %s", x.Kind, wire.Key(x.Terminal, x.Seq), x.SKU, x.Code)
		if x.Resolved {
			s += " resolved: " + x.Resolution
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// atHQ lists the exceptions HQ holds of date0.
func atHQ(t *testing.T, st *sqlite.Store) []string {
	t.Helper()
	stored, err := st.Exceptions(context.Background(), date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	var xs []hqwire.Exception
	for _, x := range stored {
		xs = append(xs, x.Exception)
	}
	return exceptionLines(xs)
}

// inLedger lists the exceptions the ledger holds, open and resolved.
func inLedger(t *testing.T, l *ledger.Ledger) []string {
	t.Helper()
	ctx := context.Background()
	over, err := l.Oversells(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	refunds, err := l.RefundExceptions(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	var xs []hqwire.Exception
	for _, o := range over {
		xs = append(xs, hqwire.Exception{Kind: hqwire.ExceptionOversell, Terminal: o.Terminal, Seq: o.Seq, SKU: o.SKU,
			Code: hqwire.CodeOversold, Resolved: o.Resolved, Resolution: o.Resolution})
	}
	for _, r := range refunds {
		xs = append(xs, hqwire.Exception{Kind: hqwire.ExceptionRefund, Terminal: r.Terminal, Seq: r.Seq, Code: r.Code,
			Resolved: r.Resolved, Resolution: r.Resolution})
	}
	parked, err := l.Parked(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	// A key's first parked content is its exception with no sku, each later one (a higher
	// id) under its hash.
	first := map[string]int64{}
	for _, p := range parked {
		if id, ok := first[wire.Key(p.Terminal, p.Seq)]; !ok || p.ID < id {
			first[wire.Key(p.Terminal, p.Seq)] = p.ID
		}
	}
	for _, p := range parked {
		sku := p.Hash
		if first[wire.Key(p.Terminal, p.Seq)] == p.ID {
			sku = ""
		}
		xs = append(xs, hqwire.Exception{Kind: hqwire.ExceptionParked, Terminal: p.Terminal, Seq: p.Seq, SKU: sku,
			Code: p.Code, Resolved: p.Resolved, Resolution: p.Resolution})
	}
	gaps, err := l.SeqGaps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, gs := range gaps {
		for _, g := range gs {
			xs = append(xs, hqwire.Exception{Kind: hqwire.ExceptionSeqGap, Terminal: g.Terminal, Seq: g.From, Code: g.Reason})
		}
	}
	return exceptionLines(xs)
}

// ParkedSale makes terminal's next sale, of one line, and commits it refused for good, as
// the store-server commits an event it refuses as bad input: the ledger parks it.
func (s *store) ParkedSale(terminal string, at time.Time) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sale++
	r := s.record(terminal, at, wire.KindSale, salePayload(s.sale, 1))
	r.Sale, r.Status, r.Code, r.Message = nil, wire.AckRejected, "payload_invalid", "the lines do not add up"
	out, err := s.l.Commit(context.Background(), []ledger.Record{r})
	if err != nil || out[0].Err != nil || out[0].Status != wire.AckRejected {
		s.tb.Fatalf("park %s: %+v, %v", wire.Key(r.Terminal, r.Seq), out, err)
	}
}

// newHQFixture returns a store's ledger, HQ (hq-sync serve on the SQLite engine, wrapped by
// wrap if not nil, keeping a copy of every batch it is sent) and an uploader's config
// between them.
func newHQFixture(t *testing.T, wrap func(http.Handler) http.Handler) (*store, *sqlite.Store, *batchLog, Config) {
	t.Helper()
	dir := t.TempDir()
	s, st := MustOpenStore(t, dir), mustOpenHQ(t, dir)
	clk := newClock(day0.Add(time.Hour))
	var h http.Handler = serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: clk.Now})
	if wrap != nil {
		h = wrap(h)
	}
	log := &batchLog{h: h}
	srv := httptest.NewServer(log)
	t.Cleanup(srv.Close)
	return s, st, log, config(dir, s, srv.URL+serve.BatchesPath, clk.Now)
}

// batchLog is HQ (hq-sync serve) keeping a copy of every batch it is sent.
type batchLog struct {
	h  http.Handler
	mu sync.Mutex
	bs []hqwire.Batch
}

func (l *batchLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var b hqwire.Batch
	if json.Unmarshal(body, &b) == nil {
		l.mu.Lock()
		l.bs = append(l.bs, b)
		l.mu.Unlock()
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	l.h.ServeHTTP(w, r)
}

func (l *batchLog) batches() []hqwire.Batch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.bs)
}

// TestExceptionsReachHQ: the exceptions the store's ledger flags reach HQ (hq-sync serve on
// the SQLite engine) with the rows, from the first batch on, and each change follows: a
// manager's resolution, and a refund exception withdrawn when the sale it names arrives.
func TestExceptionsReachHQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, log, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)

	s.Sales(5, day0)
	s.OfflineSale("T1", day0.Add(time.Minute))
	late := s.RefundBeforeSale("T4", day0.Add(2*time.Minute))
	MustOnce(t, u)
	bs := log.batches()
	if len(bs) == 0 || len(bs[0].Exceptions) == 0 {
		t.Fatalf("%d batches, the first without exceptions: they go with the rows", len(bs))
	}
	want := inLedger(t, s.l)
	if !slices.Contains(want, "refund T4:2  refund_sale_unknown") || !slices.ContainsFunc(want, func(x string) bool {
		return strings.HasPrefix(x, "oversell T1:2 ")
	}) {
		t.Fatalf("the ledger holds %q, want T1:2's oversell and T4:2's refund exception among them", want)
	}
	if got := atHQ(t, st); !slices.Equal(got, want) {
		t.Fatalf("HQ holds %q, the ledger %q", got, want)
	}

	// Nothing changed: nothing more goes.
	n := len(bs)
	MustOnce(t, u)
	if bs = log.batches(); len(bs) != n {
		t.Fatalf("%d more batches with nothing changed", len(bs)-n)
	}

	// The manager explains the oversell: that alone goes.
	over, err := s.l.Oversells(ctx, "", false)
	if err != nil || len(over) == 0 {
		t.Fatalf("oversells %+v, %v", over, err)
	}
	if _, _, err := s.l.ResolveOversell(ctx, over[0].Terminal, over[0].Seq, over[0].SKU, "a delivery not booked"); err != nil {
		t.Fatal(err)
	}
	MustOnce(t, u)
	if got, want := atHQ(t, st), inLedger(t, s.l); !slices.Equal(got, want) {
		t.Fatalf("after the resolution HQ holds %q, the ledger %q", got, want)
	}
	if bs = log.batches(); len(bs) != n+1 || len(bs[n].Rows) != 0 || len(bs[n].Exceptions) != 1 {
		t.Errorf("the resolution went in %d batches, the last of %d rows and %d exceptions; want one of 0 and 1",
			len(bs)-n, len(bs[len(bs)-1].Rows), len(bs[len(bs)-1].Exceptions))
	}

	// The refunded sale arrives: the ledger covers the refund, and HQ hears it is withdrawn.
	s.commit([]ledger.Record{late})
	MustOnce(t, u)
	got, want := atHQ(t, st), inLedger(t, s.l)
	if slices.ContainsFunc(want, func(x string) bool { return strings.HasPrefix(x, "refund ") }) || !slices.Equal(got, want) {
		t.Fatalf("after the sale arrived HQ holds %q, the ledger %q (want no refund exception)", got, want)
	}
}

// TestParkedEventsReachHQ: a sale the store parked reaches HQ as an exception of kind
// parked, saying what the till took, with the exceptions changed after it and the rows;
// the manager's resolution follows it.
func TestParkedEventsReachHQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)

	s.Sales(3, day0)
	MustOnce(t, u)
	s.ParkedSale("T8", day0.Add(2*time.Minute))
	s.OfflineSale("T9", day0.Add(3*time.Minute)) // an oversell, changed after the parked sale
	MustOnce(t, u)
	got, want := atHQ(t, st), inLedger(t, s.l)
	if !slices.Contains(want, "parked T8:1  payload_invalid") || !slices.ContainsFunc(want, func(x string) bool {
		return strings.HasPrefix(x, "oversell T9:1 ")
	}) {
		t.Fatalf("the ledger holds %q, want T8's parked sale and T9's oversell among them", want)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("HQ holds %q, the ledger %q", got, want)
	}
	if rows, err := st.Rows(ctx, date0, testStore); err != nil || len(rows) != len(s.Outbox()) {
		t.Errorf("%d rows at HQ of the ledger's %d (%v)", len(rows), len(s.Outbox()), err)
	}
	stored, err := st.Exceptions(ctx, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range stored {
		if x.Kind == hqwire.ExceptionParked && !strings.HasPrefix(x.Detail, `sale "`) {
			t.Errorf("the parked sale at HQ says %q, want what the till took", x.Detail)
		}
	}

	if _, _, err := s.l.ResolveParked(ctx, "T8", 1, "", "the customer paid again at T1"); err != nil {
		t.Fatal(err)
	}
	MustOnce(t, u)
	if got, want := atHQ(t, st), inLedger(t, s.l); !slices.Equal(got, want) ||
		!slices.Contains(got, "parked T8:1  payload_invalid resolved: the customer paid again at T1") {
		t.Errorf("after the resolution HQ holds %q, the ledger %q", got, want)
	}
}

// TestFitText: an exception's text goes as HQ takes it, whatever the store's ledger holds.
func TestFitText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", hqwire.MaxExceptionText) // 2 bytes each
	for _, tc := range []struct{ name, in string }{
		{"short", "a delivery not booked"},
		{"NUL", "counted\x00 again"},
		{"long", long},
		{"long ASCII", strings.Repeat("x", hqwire.MaxExceptionText+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fitText(tc.in)
			switch {
			case len(got) > hqwire.MaxExceptionText || !utf8.ValidString(got) || strings.Contains(got, "\x00"):
				t.Fatalf("fitText(%.20q…) = %d bytes, valid %v", tc.in, len(got), utf8.ValidString(got))
			case len(tc.in) <= hqwire.MaxExceptionText && !strings.Contains(tc.in, "\x00") && got != tc.in:
				t.Fatalf("fitText(%q) = %q, want it unchanged", tc.in, got)
			}
		})
	}
}

// TestNULInSKU: the wire takes any SKU of 1 to 128 bytes, NUL included, and so does the
// ledger; HQ takes no NUL (PostgreSQL text cannot hold one). An offline sale of such a SKU,
// as long as it may be, oversells, and its exception goes with the SKU escaped
// (hqwire.EscapeSKU) instead of making HQ refuse the batch and hold back every later row.
func TestNULInSKU(t *testing.T) {
	t.Parallel()
	s, st, _, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)
	s.Sales(3, day0)
	MustOnce(t, u)

	sku := "A\x00" + strings.Repeat("B", wire.MaxTextLen-2)
	s.OfflineSale("T1", day0.Add(time.Minute), sku)
	s.Sales(3, day0.Add(2*time.Minute))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.Once(ctx); err != nil {
		t.Fatalf("upload after an oversell of a %d-byte SKU with a NUL: %v", len(sku), err)
	}
	want := "oversell T1:2 " + hqwire.EscapeSKU(sku) + " oversold"
	if got := atHQ(t, st); !slices.Contains(got, want) {
		t.Fatalf("HQ holds %q, want %q among them", got, want)
	}
}

// TestLedgerRestoredFromBackup: a ledger restored from a backup that still holds the last
// row HQ acknowledged (a manager's resolution adds no row) passes the uploader's check. Its
// next exception changes are numbered from the time, above those made since the backup and
// acknowledged already, so they are read and HQ takes them.
func TestLedgerRestoredFromBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)
	s.Sales(3, day0)
	MustOnce(t, u)
	s.OfflineSale("T1", day0.Add(time.Minute))
	MustOnce(t, u)

	// The nightly backup of the ledger.
	backup := filepath.Join(t.TempDir(), "ledger.bak")
	raw, err := sql.Open("sqlite3", s.path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`VACUUM INTO ?`, backup); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	// The manager explains the oversell; HQ hears of it.
	over, err := s.l.Oversells(ctx, "", false)
	if err != nil || len(over) == 0 {
		t.Fatalf("oversells %+v, %v", over, err)
	}
	if _, _, err := s.l.ResolveOversell(ctx, over[0].Terminal, over[0].Seq, over[0].SKU, "found it"); err != nil {
		t.Fatal(err)
	}
	MustOnce(t, u)
	u.Close()

	// The ledger's disk is replaced; the ledger comes back from the backup.
	restoreLedger(t, s, backup)
	s.OfflineSale("T2", day0.Add(3*time.Minute)) // a new oversell after the restore

	u, err = New(ctx, cfg)
	if err != nil {
		t.Fatalf("the uploader refuses the restored ledger: %v", err)
	}
	defer u.Close()
	MustOnce(t, u)
	got := atHQ(t, st)
	if !slices.ContainsFunc(got, func(x string) bool { return strings.HasPrefix(x, "oversell T2:2 ") }) {
		t.Fatalf("HQ holds %q; the ledger %q: T2's oversell, flagged after the restore, never went", got, inLedger(t, s.l))
	}
}

// TestBudgetCutsExceptions: a small budget cuts the exceptions over several batches,
// with changes between the batches; HQ ends with the ledger's state.
func TestBudgetCutsExceptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)
	s.Sales(2, day0)
	MustOnce(t, u)
	for i := 0; i < 40; i++ {
		s.OfflineSale("T9", day0.Add(time.Duration(i)*time.Second))
	}
	u.budget = 3000
	for round := 0; round < 5; round++ {
		over, _ := s.l.Oversells(ctx, "", false)
		for i, o := range over {
			if (i+round)%3 == 0 {
				s.l.ResolveOversell(ctx, o.Terminal, o.Seq, o.SKU, strings.Repeat("n", 100+round))
			}
		}
		if _, err := u.step(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	MustOnce(t, u)
	if got, want := atHQ(t, st), inLedger(t, s.l); !slices.Equal(got, want) {
		t.Fatalf("HQ %q\nledger %q", got, want)
	}
}

// TestExceptionsWaitWithTheRows: exception changes wait with the rows for BatchRows or
// BatchAge: in a store whose sales oversell (no stock counted), each sale would otherwise go
// to HQ in a request of its own.
func TestExceptionsWaitWithTheRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, log, cfg := newHQFixture(t, nil)
	cfg.BatchAge = time.Hour
	u := MustNew(t, cfg)
	s.Sales(2, day0)
	MustOnce(t, u)
	n0 := len(log.batches())
	stop := runInBackground(t, u)
	for i := 0; i < 10; i++ { // stock for every SKU but one: none of these oversells
		if _, _, err := s.l.Adjust(ctx, "stock-"+itoa(int64(i)), "SKU0"+itoa(int64(10+i)), 1000, "adjust"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	n1 := len(log.batches())
	for i := 0; i < 10; i++ {
		s.OfflineSale("T1", day0.Add(time.Duration(i)*time.Second)) // oversells
		time.Sleep(30 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	stop()
	n2 := len(log.batches())
	t.Logf("batches: %d before Run, %d after the stock adjustments, %d after 10 oversold sales (BatchRows %d, BatchAge %v)",
		n0, n1, n2, cfg.BatchRows, cfg.BatchAge)
	if n2-n1 > 1 {
		t.Errorf("%d requests for 10 rows with BatchRows %d and BatchAge %v", n2-n1, cfg.BatchRows, cfg.BatchAge)
	}
}

// TestFullBatchOfChangesGoes: exception changes wait with the rows for BatchAge, but not
// when they fill a batch: a burst of 2.5 batches' worth (a day of offline sales that
// oversold, flagged at once) goes as two full batches at once, and the rest waits.
func TestFullBatchOfChangesGoes(t *testing.T) {
	t.Parallel()
	s, _, log, cfg := newHQFixture(t, nil)
	cfg.BatchAge = time.Hour
	u := MustNew(t, cfg)
	s.Sales(2, day0)
	MustOnce(t, u)
	n0 := len(log.batches())

	raw, err := sql.Open("sqlite3", s.path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tx, err := raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < hqwire.MaxBatchExceptions*5/2; i++ {
		if _, err := tx.Exec(`INSERT INTO oversells (terminal, seq, sku, qty_short, at, business_date)
			VALUES ('T9', ?, 'A', 1, '2025-03-01T10:00:00+08:00', '2025-03-01')`, 1000+i); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	stop := runInBackground(t, u)
	defer stop()
	for deadline := time.Now().Add(15 * time.Second); len(log.batches()) < n0+2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches of changes in 15 s with BatchAge %v, want 2 full ones at once", len(log.batches())-n0, cfg.BatchAge)
		}
	}
	time.Sleep(300 * time.Millisecond)
	bs := log.batches()[n0:]
	if len(bs) != 2 || len(bs[0].Exceptions) != hqwire.MaxBatchExceptions || len(bs[1].Exceptions) != hqwire.MaxBatchExceptions {
		t.Fatalf("%d batches, want 2 full ones (the rest waits for BatchAge)", len(bs))
	}
}

// TestSKUsThatDifferByANULAndASUB: one sale's oversells of SKUs "A\x00B" and "A\x1aB" (both
// valid on the wire) stay two exceptions at HQ: the escape keeps them apart (a batch with
// one key twice would be refused, and hold back every row after it).
func TestSKUsThatDifferByANULAndASUB(t *testing.T) {
	t.Parallel()
	s, st, _, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)
	s.Sales(3, day0)
	MustOnce(t, u)

	s.OfflineSale("T1", day0.Add(time.Minute), "A\x00B", "A\x1aB")
	s.Sales(3, day0.Add(2*time.Minute))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.Once(ctx); err != nil {
		t.Fatalf("upload after oversells of SKUs \"A\\x00B\" and \"A\\x1aB\" in one sale: %v", err)
	}
	if got := atHQ(t, st); !slices.Contains(got, "oversell T1:2 A\x1a0B oversold") ||
		!slices.Contains(got, "oversell T1:2 A\x1a\x1aB oversold") {
		t.Fatalf("HQ holds %q, want both of T1:2's oversells, escaped", got)
	}
	rows, err := st.Rows(ctx, date0, testStore)
	if err != nil || len(rows) != len(s.Outbox()) {
		t.Fatalf("HQ holds %d rows of the ledger's %d (%v)", len(rows), len(s.Outbox()), err)
	}
}

// TestParkedEventOfAFarTime: a till whose clock is far off sends a sale whose business time
// the wire refuses (wire_time: 9999-12-31T23:00-10:00 is the year 10000 in UTC and in the
// store's zone). The store-server parks it with that time, as it parks any bad event. Its
// exception must go to HQ under a date HQ takes, and the rows and exceptions after it must
// follow; a batch HQ refuses would hold back everything the store sells from then on.
func TestParkedEventOfAFarTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)
	s.Sales(3, day0)
	MustOnce(t, u)

	far := time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("HST", -10*3600))
	s.l.Now = func() time.Time { return day0.Add(time.Minute) } // when the store parks it
	s.parkedAt("T8", far, "wire_time", "business time 9999-12-31T23:00:00-10:00 is outside the years 1970-9998")
	s.Sales(2, day0.Add(time.Minute))
	s.OfflineSale("T9", day0.Add(2*time.Minute))

	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := u.Once(ctx2); err != nil {
		t.Fatalf("upload after a parked sale of the year 10000: %v", err)
	}
	if rows, err := st.Rows(ctx, date0, testStore); err != nil || len(rows) != len(s.Outbox()) {
		t.Errorf("%d rows at HQ of the ledger's %d (%v)", len(rows), len(s.Outbox()), err)
	}
	parked, err := s.l.Parked(ctx, 0, true)
	if err != nil || len(parked) != 1 {
		t.Fatalf("parked %+v, %v", parked, err)
	}
	if parked[0].BusinessDate != date0 {
		t.Errorf("the parked sale is filed under %q, want the store's date when it was parked, %s",
			parked[0].BusinessDate, date0)
	}
	if got := atHQ(t, st); !slices.Contains(got, "parked T8:1  wire_time") ||
		!slices.ContainsFunc(got, func(x string) bool { return strings.HasPrefix(x, "oversell T9:1 ") }) {
		t.Errorf("HQ holds %q of %s, want T8's parked sale and T9's oversell among them", got, date0)
	}
}

// parkedAt commits terminal's next sale, of one line, at business time at, refused for
// good with code and message, as the store-server commits an event it refuses as bad input.
func (s *store) parkedAt(terminal string, at time.Time, code, message string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sale++
	r := s.record(terminal, at, wire.KindSale, salePayload(s.sale, 1))
	r.Sale, r.Status, r.Code, r.Message, r.FlowNo = nil, wire.AckRejected, code, message, 0
	out, err := s.l.Commit(context.Background(), []ledger.Record{r})
	if err != nil || out[0].Err != nil || out[0].Status != wire.AckRejected {
		s.tb.Fatalf("park %s: %+v, %v", wire.Key(r.Terminal, r.Seq), out, err)
	}
}

// TestParkedDayCloseFiledUnderItsDay: a till's day close the store refused for good, made
// after midnight as a day close usually is, reaches HQ under the business date it closes,
// where reconcile finds the terminal without a day close, and says what the till declared.
// Filed under the date of its time, it would be listed the night after, beside nothing.
func TestParkedDayCloseFiledUnderItsDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)
	s.Sales(3, day0)
	MustOnce(t, u)

	closedAt := time.Date(2025, 3, 2, 0, 20, 0, 0, shanghai)
	r := s.record("T8", closedAt, wire.KindDayClose, &wire.DayClosePayload{BusinessDate: date0, SaleCount: 2,
		SaleAmount: 4650, Methods: []wire.MethodTotal{{Method: wire.MethodCash, SaleCount: 2, SaleAmount: 4650}}})
	r.DayClose, r.Status, r.Code, r.Message = nil, wire.AckRejected, "payload_invalid", "the methods do not add up"
	if out, err := s.l.Commit(ctx, []ledger.Record{r}); err != nil || out[0].Err != nil || out[0].Status != wire.AckRejected {
		t.Fatalf("park the day close: %+v, %v", out, err)
	}
	s.Sales(1, day0.Add(time.Hour))
	MustOnce(t, u)
	MustOnce(t, u)

	next, err := st.Exceptions(ctx, "2025-03-02", testStore)
	if err != nil {
		t.Fatal(err)
	}
	of, err := st.Exceptions(ctx, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	var found *hqstore.StoredException
	for i := range of {
		if of[i].Kind == hqwire.ExceptionParked && of[i].Terminal == "T8" {
			found = &of[i]
		}
	}
	if found == nil || len(next) != 0 {
		var nextKeys []string
		for _, x := range next {
			nextKeys = append(nextKeys, x.Key()+" "+x.BusinessDate)
		}
		t.Fatalf("the parked day close of %s is not at HQ under its date; under 2025-03-02: %q", date0, nextKeys)
	}
	if !strings.HasPrefix(found.Detail, "day close of \""+date0+"\" (sales 2 of 46.50") {
		t.Errorf("the parked day close at HQ says %q, want the day and the totals the till declared", found.Detail)
	}
}

// changesInLedger counts the ledger's exception changes after change number after, read
// straight from its table.
func changesInLedger(t *testing.T, s *store, after int64) int64 {
	t.Helper()
	raw, err := sql.Open("sqlite3", "file:"+s.path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int64
	if err := raw.QueryRow(`SELECT count(*) FROM exception_changes WHERE id > ?`, after).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestExceptionChangesWaitingShown: the exception changes HQ has not acknowledged show in
// the status (--status, the store-server's GET /v1/hq) and the metrics: all of them before
// the uploader runs, none once HQ has them, and the new ones after a change. They showed
// nowhere: a store whose resolutions never reached HQ looked all sent.
func TestExceptionChangesWaitingShown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, _, cfg := newHQFixture(t, nil)
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	u := MustNew(t, cfg)
	check := func(step string, waiting int64) {
		t.Helper()
		for _, via := range []string{"Status", "ReadStatus"} {
			st, err := u.Status(ctx)
			if via == "ReadStatus" {
				st, err = uploadstate.ReadStatus(ctx, s.path, cfg.StatePath, testStore, shanghai)
			}
			if err != nil {
				t.Fatalf("%s: %s: %v", step, via, err)
			}
			if st.ExceptionsWaiting != waiting {
				t.Errorf("%s: %s says %d exception changes waiting; want %d", step, via, st.ExceptionsWaiting, waiting)
			}
		}
		fams := scrape(t, reg)
		if v, ok := metricstest.Value(fams, "posgate_upload_exception_changes_waiting", nil); !ok || v != float64(waiting) {
			t.Errorf("%s: posgate_upload_exception_changes_waiting = %v (present %v), want %d", step, v, ok, waiting)
		}
	}

	s.Sales(3, day0) // every sale of these tests oversells
	n := changesInLedger(t, s, 0)
	if n == 0 {
		t.Fatal("the sales flagged no exception")
	}
	check("before any batch", n)

	MustOnce(t, u)
	check("sent", 0)

	s.ParkedSale("T8", day0.Add(2*time.Minute))
	s.OfflineSale("T9", day0.Add(3*time.Minute), "SKU001")
	check("a parked sale and an oversell", 2)
	MustOnce(t, u)
	check("sent again", 0)
}

// TestRowsNotStarvedByExceptions: a backlog of exception changes with long details (the
// manager's notes) larger than many batches, and sales waiting behind it: every batch
// carries rows, so the sales reach HQ within a few batches while the changes still drain in
// each. The changes took the whole batch, and the sales waited until every one had gone.
func TestRowsNotStarvedByExceptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, log, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)
	s.Sales(2, day0)
	MustOnce(t, u) // HQ takes exceptions from now on

	raw, err := sql.Open("sqlite3", s.path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tx, err := raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	note := strings.Repeat("counted the shelf again, a delivery not booked; ", 25)[:hqwire.MaxExceptionText]
	const changes = 300
	for i := 0; i < changes; i++ {
		if _, err := tx.Exec(`INSERT INTO oversells (terminal, seq, sku, qty_short, at, business_date, resolved,
			resolved_at, resolution) VALUES ('T9', ?, 'A', 1, '2025-03-01T10:00:00+08:00', '2025-03-01', 1,
			'2025-03-01T11:00:00+08:00', ?)`, 1000+i, note); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Sales(40, day0.Add(time.Hour), "T1")
	u.budget = 60 << 10 // some 50 changes, or 70 sales, a batch

	n0 := len(log.batches())
	const bound = 3 // the 40 sales fill half of the budget twice at most
	for i := 0; i < bound; i++ {
		if _, err := u.step(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	bs := log.batches()[n0:]
	rows, err := st.Rows(ctx, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(s.Outbox()) {
		var carried []string
		for _, b := range bs {
			carried = append(carried, fmt.Sprintf("%d rows + %d exceptions", len(b.Rows), len(b.Exceptions)))
		}
		t.Fatalf("after %d batches (%s) HQ holds %d rows of the ledger's %d: the sales wait behind the exceptions",
			bound, strings.Join(carried, ", "), len(rows), len(s.Outbox()))
	}
	for i, b := range bs {
		if len(b.Exceptions) == 0 {
			t.Errorf("batch %d carries %d rows and no exception: the changes wait behind the rows", i+1, len(b.Rows))
		}
	}
	MustOnce(t, u)
	if got, want := atHQ(t, st), inLedger(t, s.l); !slices.Equal(got, want) {
		t.Fatalf("HQ holds %d exceptions, the ledger %d", len(got), len(want))
	}
}

// ParkedContents commits terminal's next sale, then n other contents under its key (a till
// restored from a backup n times over): the ledger parks each, and returns the sale.
func (s *store) ParkedContents(terminal string, at time.Time, n int) ledger.Record {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sale++
	r := s.record(terminal, at, wire.KindSale, salePayload(s.sale, 1))
	s.commit([]ledger.Record{r})
	for i := range n {
		p := salePayload(s.sale, 2+i)
		body, err := json.Marshal(p)
		if err != nil {
			s.tb.Fatal(err)
		}
		c := r
		c.Sale, c.Payload, c.Hash = nil, body, wire.Hash(r.Kind, testStore, r.Terminal, r.Seq, r.At, body)
		c.Status, c.Code, c.FlowNo, c.OtherContent = wire.AckConflict, ledger.CodeIdempotencyConflict, 0, true
		out, err := s.l.Commit(context.Background(), []ledger.Record{c})
		if err != nil || out[0].Status != wire.AckConflict {
			s.tb.Fatalf("park another content of %s: %+v, %v", wire.Key(r.Terminal, r.Seq), out, err)
		}
	}
	return r
}

// TestLaterParkedContentsReachHQ: a key reused with other content twice over has two
// parked contents, each an exception of its own at HQ: the first with no sku, the second
// under its hash.
func TestLaterParkedContentsReachHQ(t *testing.T) {
	t.Parallel()
	s, st, _, cfg := newHQFixture(t, nil)
	u := MustNew(t, cfg)

	s.Sales(3, day0)
	MustOnce(t, u)
	s.ParkedContents("T8", day0.Add(time.Minute), 2)
	want := inLedger(t, s.l)
	if n := len(slices.DeleteFunc(slices.Clone(want), func(x string) bool { return !strings.HasPrefix(x, "parked T8:1 ") })); n != 2 {
		t.Fatalf("the ledger holds %q, want two parked contents of T8:1", want)
	}
	s.Sales(2, day0.Add(time.Hour))
	MustOnce(t, u)
	if got, want := atHQ(t, st), inLedger(t, s.l); !slices.Equal(got, want) {
		t.Fatalf("HQ holds %q, the ledger %q", got, want)
	}
	if rows, err := st.Rows(context.Background(), date0, testStore); err != nil || len(rows) != len(s.Outbox()) {
		t.Errorf("%d rows at HQ of the ledger's %d (%v)", len(rows), len(s.Outbox()), err)
	}
}
