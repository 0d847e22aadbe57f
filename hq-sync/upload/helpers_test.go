package upload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

const testStore = "S1"

var (
	testSecret = []byte("s1-secret-of-the-tests")
	shanghai   = mustLoadLocation("Asia/Shanghai")
	// day0 is a business day at 10:00 store time; day1 the next one.
	day0 = time.Date(2025, 3, 1, 10, 0, 0, 0, shanghai)
	day1 = day0.AddDate(0, 0, 1)
)

const (
	date0 = "2025-03-01"
	date1 = "2025-03-02"
)

func mustLoadLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// clock is a settable clock for the uploader's Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// store is a store ledger written the way the store-server writes it, with per-terminal
// seqs.
type store struct {
	tb   testing.TB
	path string
	l    *ledger.Ledger
	mu   sync.Mutex
	seq  map[string]int64
	flow map[string]int64 // business date → last flow number given (as the Redis gate does)
	sale int
}

// MustOpenStore opens a fresh ledger of store S1 in dir.
// reopen opens the store's ledger again, as the store-server does when it starts on a
// restored file, closed when the test ends.
func (s *store) reopen(tb testing.TB) {
	tb.Helper()
	l, err := ledger.Open(context.Background(), s.path, testStore, shanghai)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	s.l = l
}

func MustOpenStore(tb testing.TB, dir string) *store {
	tb.Helper()
	path := filepath.Join(dir, "ledger.db")
	copyNew(tb, path, newLedgerFile)
	l, err := ledger.Open(context.Background(), path, testStore, shanghai)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return &store{tb: tb, path: path, l: l, seq: map[string]int64{}, flow: map[string]int64{}}
}

func (s *store) record(terminal string, at time.Time, kind wire.Kind, p wire.Payload) ledger.Record {
	body, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	s.seq[terminal]++
	seq := s.seq[terminal]
	r := ledger.Record{Terminal: terminal, Seq: seq, Kind: kind, At: at, Payload: body, Status: wire.AckAccepted,
		Final: true, Hash: wire.Hash(kind, testStore, terminal, seq, at, body)}
	switch v := p.(type) {
	case *wire.SalePayload:
		r.Sale = v
	case *wire.RefundPayload:
		r.Refund = v
	case *wire.DayClosePayload:
		r.DayClose = v
	}
	if kind == wire.KindSale || kind == wire.KindRefund {
		date := s.l.BusinessDate(at)
		s.flow[date]++
		r.FlowNo = s.flow[date]
	}
	switch v := p.(type) {
	case *wire.DayClosePayload:
		r.DayClose = v
	}
	return r
}

func (s *store) commit(recs []ledger.Record) {
	s.tb.Helper()
	out, err := s.l.Commit(context.Background(), recs)
	if err != nil {
		s.tb.Error(err)
		return
	}
	for i, o := range out {
		if o.Err != nil || o.Status != wire.AckAccepted {
			s.tb.Errorf("commit %s:%d: %+v", recs[i].Terminal, recs[i].Seq, o)
		}
	}
}

// itemName is a line's name, as long as a name may be (wire.MaxTextLen).
var itemName = strings.Repeat("long item name ", 9)[:wire.MaxTextLen]

// salePayload returns the n-th test sale: its tenders vary (cash with change, card, QR, a
// split), and with lines > 1 it carries that many lines.
func salePayload(n, lines int) *wire.SalePayload {
	p := &wire.SalePayload{SaleID: fmt.Sprintf("s%d", n), OpenedAt: day0}
	for i := 0; i < max(lines, 1); i++ {
		price := money.Fen(100 + (n*7+i)%900)
		p.Lines = append(p.Lines, wire.Line{Line: i + 1, SKU: fmt.Sprintf("SKU%03d", (n+i)%50),
			Name: itemName, Qty: 1, UnitPrice: price,
			Amount: price})
		p.Total += price
	}
	switch n % 4 {
	case 0:
		paid := (p.Total/1000 + 1) * 1000
		p.Payments, p.Change = []wire.Payment{{Method: wire.MethodCash, Amount: paid}}, paid-p.Total
	case 1:
		p.Payments = []wire.Payment{{Method: wire.MethodCard, Amount: p.Total, Reference: "card"}}
	case 2:
		p.Payments = []wire.Payment{{Method: wire.MethodQR, Amount: p.Total, Reference: "qr"}}
	default:
		p.Payments = []wire.Payment{{Method: wire.MethodCash, Amount: 50}, {Method: wire.MethodCard,
			Amount: p.Total - 50, Reference: "card"}}
	}
	return p
}

// Sales commits n sales spread over the terminals at at, in commits of up to 200.
func (s *store) Sales(n int, at time.Time, terminals ...string) {
	s.tb.Helper()
	s.SalesWithLines(n, 1, at, terminals...)
}

// SalesWithLines is Sales with lines lines per sale.
func (s *store) SalesWithLines(n, lines int, at time.Time, terminals ...string) {
	s.tb.Helper()
	if len(terminals) == 0 {
		terminals = []string{"T1", "T2", "T3"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var recs []ledger.Record
	for i := 0; i < n; i++ {
		s.sale++
		term := terminals[s.sale%len(terminals)]
		recs = append(recs, s.record(term, at.Add(time.Duration(i)*time.Second), wire.KindSale, salePayload(s.sale, lines)))
		if len(recs) == 200 {
			s.commit(recs)
			recs = nil
		}
	}
	s.commit(recs)
}

// Refund commits a card refund of 1.00 at at.
func (s *store) Refund(terminal string, at time.Time) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &wire.RefundPayload{RefundID: fmt.Sprintf("r%d", s.seq[terminal]+1), SaleID: "s1", SaleSeq: 1,
		Lines: []wire.RefundLine{{Line: 1, SKU: "SKU001", Qty: 1, Amount: 100}}, Amount: 100,
		Method: wire.MethodCard, Reference: "refund"}
	s.commit([]ledger.Record{s.record(terminal, at, wire.KindRefund, p)})
}

// DayClose commits each terminal's day close of date, with the ledger's totals.
func (s *store) DayClose(date string, at time.Time, terminals ...string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	totals, err := s.l.Totals(context.Background(), date)
	if err != nil {
		s.tb.Fatal(err)
	}
	var recs []ledger.Record
	for _, term := range terminals {
		c := totals[term]
		p := &wire.DayClosePayload{BusinessDate: date, SaleCount: c.Sales, SaleAmount: c.Amount,
			RefundCount: c.Refunds, RefundAmount: c.RefundAmount, Methods: []wire.MethodTotal{}}
		recs = append(recs, s.record(term, at, wire.KindDayClose, p))
	}
	s.commit(recs)
}

// Outbox returns every hq_outbox row of the ledger.
func (s *store) Outbox() []ledger.OutboxRow {
	s.tb.Helper()
	rows, err := s.l.OutboxAfter(context.Background(), 0, 1<<30)
	if err != nil {
		s.tb.Fatal(err)
	}
	return rows
}

// testHQ is an honest HQ receiver for the tests: it checks each request's signature and
// body, stores batches by id and rows by key like hqstore.Storage promises, and records what
// would break the upload's promises: a batch id sent with other content, a row carried by
// two batch ids, a row stored with another hash. Faults can be injected per request.
type testHQ struct {
	tb     testing.TB
	secret []byte

	mu       sync.Mutex
	batches  map[string]string // batch id → content hash
	receipts map[string]hqwire.Receipt
	rows     map[string]storedRow // row key → row
	rowOrder []string             // row keys as first stored
	days     []storedDay          // declarations, as stored
	requests int
	stored   int // batches stored (not duplicates)
	dups     int // duplicate receipts answered
	bodies   []int
	problems []string
	fault    func(n int, b *hqwire.Batch) fault // n counts requests from 1
	delay    time.Duration
}

type storedRow struct {
	row   hqwire.Row
	batch string
	pos   int // position in rowOrder
}

type storedDay struct {
	day   hqwire.StoreDay
	batch string
	rows  int // rows HQ held when the declaration was stored
}

// fault is what the test HQ does with one request.
type fault int

const (
	answer      fault = iota // store the batch and answer the receipt
	unavailable              // answer 503 without storing
	refuse                   // answer 400 without storing
	dropBefore               // close the connection without storing
	dropAfter                // store the batch, then close the connection without answering
	failAfter                // store the batch, then answer 503
)

func newTestHQ(tb testing.TB) *testHQ {
	return &testHQ{tb: tb, secret: testSecret, batches: map[string]string{}, receipts: map[string]hqwire.Receipt{},
		rows: map[string]storedRow{}}
}

func (h *testHQ) problem(format string, args ...any) {
	h.problems = append(h.problems, fmt.Sprintf(format, args...))
}

func (h *testHQ) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, hqwire.MaxBatchBytes+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	delay := h.delay
	h.requests++
	n := h.requests
	h.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bodies = append(h.bodies, len(body))
	store, ts, idem := r.Header.Get(hqwire.HeaderStore), r.Header.Get(hqwire.HeaderTimestamp), r.Header.Get(hqwire.HeaderIdemKey)
	if r.Method != http.MethodPost || len(body) > hqwire.MaxBatchBytes {
		h.problem("request %d: %s with %d bytes", n, r.Method, len(body))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if !hqwire.Verify(h.secret, r.Header.Get(hqwire.HeaderSignature), r.Method, r.URL.Path, store, ts, idem, body) {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > hqwire.MaxClockSkew {
		// The uploader's clock is the test's; only check that it is a number.
		if err != nil {
			h.problem("request %d: timestamp %q", n, ts)
		}
	}
	var b hqwire.Batch
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || b.V != hqwire.Version || b.Store != store || b.ID != idem ||
		len(b.Rows) > hqwire.MaxBatchRows || len(b.Rows)+len(b.Days)+len(b.Exceptions) == 0 {
		h.problem("request %d: batch %s: %v (v %d, store %q/%q, id %q/%q, %d rows)", n, idem, err, b.V, b.Store,
			store, b.ID, idem, len(b.Rows))
		http.Error(w, "bad batch", http.StatusBadRequest)
		return
	}
	f := answer
	if h.fault != nil {
		f = h.fault(n, &b)
	}
	switch f {
	case unavailable:
		w.Header().Set("Retry-After", "0")
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	case refuse:
		http.Error(w, `{"code":"batch_invalid"}`, http.StatusBadRequest)
		return
	case dropBefore:
		drop(w)
		return
	}
	hash := hqwire.ContentHash(body)
	if prev, ok := h.batches[b.ID]; ok {
		if prev != hash {
			h.problem("batch id %s reused with other content", b.ID)
			http.Error(w, `{"code":"batch_id_reused"}`, http.StatusUnprocessableEntity)
			return
		}
		rec := h.receipts[b.ID]
		rec.Duplicate = true
		h.dups++
		h.reply(w, f, rec)
		return
	}
	rec := hqwire.Receipt{Store: store, BatchID: b.ID, Rows: len(b.Rows), Days: len(b.Days), StoredAt: time.Now()}
	for _, row := range b.Rows {
		k := row.Key(store)
		if old, ok := h.rows[k]; ok {
			if old.row.Hash != row.Hash {
				h.problem("row %s stored with hash %s, batch %s brings %s", k, old.row.Hash, b.ID, row.Hash)
			} else {
				h.problem("row %s carried by batch %s and again by batch %s", k, old.batch, b.ID)
			}
			continue
		}
		h.rows[k] = storedRow{row: row, batch: b.ID, pos: len(h.rowOrder)}
		h.rowOrder = append(h.rowOrder, k)
		rec.New++
	}
	for _, d := range b.Days {
		h.days = append(h.days, storedDay{day: d, batch: b.ID, rows: len(h.rowOrder)})
	}
	h.batches[b.ID] = hash
	h.receipts[b.ID] = rec
	h.stored++
	h.reply(w, f, rec)
}

func (h *testHQ) reply(w http.ResponseWriter, f fault, rec hqwire.Receipt) {
	switch f {
	case dropAfter:
		drop(w)
	case failAfter:
		http.Error(w, "lost the answer", http.StatusServiceUnavailable)
	default:
		body, _ := json.Marshal(rec)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(hqwire.HeaderSignature, hqwire.SignReceipt(h.secret, rec.Store, rec.BatchID, body))
		w.Write(body)
	}
}

// drop closes the client's connection without an answer.
func drop(w http.ResponseWriter) {
	c, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		c.Close()
	}
}

func (h *testHQ) setFault(f func(n int, b *hqwire.Batch) fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fault = f
}

// check fails the test on any broken promise, and unless the ledger's rows are exactly the
// rows HQ stored (each once, carried by one batch, in ledger order).
func (h *testHQ) check(tb testing.TB, s *store) {
	tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.problems {
		tb.Error(p)
	}
	want := s.Outbox()
	if len(h.rows) != len(want) {
		tb.Errorf("HQ holds %d rows, the ledger %d", len(h.rows), len(want))
	}
	for i, o := range want {
		got, ok := h.rows[o.Row.Key(testStore)]
		switch {
		case !ok:
			tb.Errorf("row %s (outbox id %d) never reached HQ", o.Row.Key(testStore), o.ID)
		case !reflect.DeepEqual(normal(got.row), normal(o.Row)):
			tb.Errorf("row %s at HQ\n got %+v\nwant %+v", o.Row.Key(testStore), got.row, o.Row)
		case got.pos != i:
			tb.Errorf("row %s arrived %d-th, it is the ledger's %d-th", o.Row.Key(testStore), got.pos, i)
		}
	}
}

// normal returns a row as it compares after a JSON round trip: UTC time, compact payload.
func normal(r hqwire.Row) hqwire.Row {
	r.At = r.At.UTC()
	var b bytes.Buffer
	if json.Compact(&b, r.Payload) == nil {
		r.Payload = b.Bytes()
	}
	return r
}

// daysOf returns the declarations HQ stored for a date, in order.
func (h *testHQ) daysOf(date string) []storedDay {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []storedDay
	for _, d := range h.days {
		if d.day.BusinessDate == date {
			out = append(out, d)
		}
	}
	return out
}

// hqStats is a copy of the test HQ's counters.
type hqStats struct {
	requests, stored, dups int
	bodies                 []int
	problems               []string
	batches                map[string]string
}

func (h *testHQ) snap() hqStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := make(map[string]string, len(h.batches))
	for k, v := range h.batches {
		b[k] = v
	}
	return hqStats{requests: h.requests, stored: h.stored, dups: h.dups, bodies: append([]int(nil), h.bodies...),
		problems: append([]string(nil), h.problems...), batches: b}
}

func (h *testHQ) batchIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.batches))
	for id := range h.batches {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (h *testHQ) rowCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.rows)
}

// hqServer serves a handler on a fixed 127.0.0.1 port that can be taken down (connections
// refused) and brought back up.
type hqServer struct {
	tb   testing.TB
	addr string
	h    http.Handler
	mu   sync.Mutex
	srv  *http.Server
}

func startHQ(tb testing.TB, h http.Handler) *hqServer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &hqServer{tb: tb, addr: ln.Addr().String(), h: h}
	s.serve(ln)
	tb.Cleanup(s.Down)
	return s
}

func (s *hqServer) URL() string { return "http://" + s.addr + "/v1/batches" }

func (s *hqServer) serve(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv = &http.Server{Handler: s.h}
	go s.srv.Serve(ln)
}

// Down closes the listener and every connection: new connections are refused.
func (s *hqServer) Down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Close()
		s.srv = nil
	}
}

// Up listens again on the same address.
func (s *hqServer) Up() {
	s.tb.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.tb.Fatal(err)
	}
	s.serve(ln)
}

// config returns an uploader configuration for the store's ledger in dir, with fast retries.
func config(dir string, s *store, url string, now func() time.Time) Config {
	return Config{LedgerPath: s.path, StatePath: filepath.Join(dir, "upload.db"), Store: testStore,
		Location: shanghai, Secret: testSecret, HQURL: url, BatchRows: 100, BatchAge: 20 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, RetryBase: 2 * time.Millisecond, RetryCap: 40 * time.Millisecond,
		RefusedRetry: 30 * time.Millisecond, Now: now,
		Client: &http.Client{Timeout: 5 * time.Second}, Logger: quietLogger()}
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// MustNew starts an uploader or fails the test. A state not there yet starts as a copy of
// a new one (copyNew).
func MustNew(tb testing.TB, cfg Config) *Uploader {
	tb.Helper()
	copyNew(tb, cfg.StatePath, newStateFile)
	u, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { u.Close() })
	return u
}

// MustOnce runs Once or fails the test.
func MustOnce(tb testing.TB, u *Uploader) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := u.Once(ctx); err != nil {
		tb.Fatal(err)
	}
}

// stateBatches returns the state's batches: id → content hash, and the pending one.
func stateBatches(tb testing.TB, u *Uploader) (map[string]string, string) {
	tb.Helper()
	rows, err := u.state.R.Query(`SELECT batch_id, content_hash, state FROM batches`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	m := map[string]string{}
	pending := ""
	for rows.Next() {
		var id, hash, state string
		if err := rows.Scan(&id, &hash, &state); err != nil {
			tb.Fatal(err)
		}
		m[id] = hash
		if state == "pending" {
			pending = id
		}
	}
	return m, pending
}

// nthBatch returns the id of u's n-th batch (in its state's series).
func nthBatch(tb testing.TB, u *Uploader, n int64) string {
	tb.Helper()
	kv, err := u.kv(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return batchID(u.cfg.Store, kv["batch_series"], n)
}

// checkBatches fails unless every batch HQ stored is the state's batch of that id, with
// the same content, and every batch the state holds as sent is at HQ.
func checkBatches(tb testing.TB, h *testHQ, u *Uploader) {
	tb.Helper()
	state, pending := stateBatches(tb, u)
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, hash := range h.batches {
		if state[id] != hash {
			tb.Errorf("HQ holds batch %s with content %s, the uploader recorded %q", id, hash[:8], state[id])
		}
	}
	for id := range state {
		if _, ok := h.batches[id]; !ok && id != pending {
			tb.Errorf("batch %s is sent in the state but HQ never stored it", id)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func sameMap[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// copyNew writes at path, unless a file is there, the file of a new database that file
// gives: made once in this test binary by the code that makes it in posgate, so that each
// test's store, HQ and uploader state do not run the migrations again (10-20 ms of CPU and
// a dozen syncs a database). New makes its state itself where a test calls it rather than
// MustNew.
func copyNew(tb testing.TB, path string, file func() ([]byte, error)) {
	tb.Helper()
	b, err := file()
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return
	}
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// newDBFile returns the file of the database open makes at a new path and closes, made once.
func newDBFile(open func(path string) (io.Closer, error)) func() ([]byte, error) {
	return sync.OnceValues(func() ([]byte, error) {
		dir, err := os.MkdirTemp("", "posgate-upload-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "new.db")
		db, err := open(path)
		if err != nil {
			return nil, err
		}
		if err := db.Close(); err != nil {
			return nil, err
		}
		if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("a closed new database left its write-ahead log: %v", err)
		}
		return os.ReadFile(path)
	})
}

var (
	newLedgerFile = newDBFile(func(path string) (io.Closer, error) {
		return ledger.Open(context.Background(), path, testStore, shanghai)
	})
	newHQFile = newDBFile(func(path string) (io.Closer, error) {
		return sqlite.Open(context.Background(), path)
	})
	newStateFile = newDBFile(func(path string) (io.Closer, error) {
		return uploadstate.Open(context.Background(), path)
	})
)

// olderServe is hq-sync serve on an HQ store behind a front that, while old is set, answers
// 404 to every path but the batches' (a v0.1.0 serve, which knows no route beside them),
// while refuse is set answers every batch 400 batch_invalid (one HQ refuses until an
// operator mends it), and counts the requests to each path.
type olderServe struct {
	*httptest.Server
	old    atomic.Bool
	refuse atomic.Bool
	mu     sync.Mutex
	asked  map[string]int
}

func newOlderServe(t *testing.T, st hqstore.Storage, now func() time.Time) *olderServe {
	t.Helper()
	h := serve.New(st, map[string][]byte{testStore: testSecret}, serve.Options{Now: now})
	o := &olderServe{asked: map[string]int{}}
	o.old.Store(true)
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.asked[r.URL.Path]++
		o.mu.Unlock()
		if o.old.Load() && r.URL.Path != serve.BatchesPath {
			http.NotFound(w, r)
			return
		}
		if o.refuse.Load() && r.URL.Path == serve.BatchesPath {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code":%q,"message":"refused until an operator mends it"}`, hqwire.CodeBatchInvalid)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

// requests returns how many requests the front has had for path.
func (o *olderServe) requests(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.asked[path]
}
