// Package reconcile is hq-sync's nightly check of a business date at HQ: per store,
// terminal and payment method it compares three accounts of the day — what each terminal
// declared (its day_close row), what the store's ledger declared (the store's StoreDay), and
// the rows HQ holds — and lists every difference by transaction, not only totals. Beside
// them it lists the exceptions the stores' ledgers flagged on the date (oversells, refunds
// a store's records do not cover, events a store refused for good that a till kept), open
// or resolved: the stores' own flags, which do not decide whether the date reconciles. A
// parked sale explains a terminal's declared totals above its store's.
//
// It reads hqstore.Storage one store at a time (Run), so that its memory holds a store's
// day and the differences found, not the chain's, and never writes it (the reconcile
// command records the run). Money is compared in int64 fen, exactly.
package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// Kinds of transaction differences.
const (
	// MissingAtHQ: the store's declaration lists the transaction; HQ has no row of it.
	MissingAtHQ = "missing_at_hq"
	// ExtraAtHQ: HQ has a sale or refund row the store's declaration does not list.
	ExtraAtHQ = "extra_at_hq"
	// AmountDiffers: both have the transaction, with another amount, amount by method,
	// kind or flow number.
	AmountDiffers = "amount_differs"
	// ListedTwice: the store's declaration lists the same transaction more than once.
	ListedTwice = "listed_twice"
	// Late: HQ received the row after the store first declared the day closed (a late
	// offline sale, or an upload that lagged). Informational: it does not make the day fail
	// to reconcile by itself, because the store declares the day again with the late
	// transaction (a higher revision) and the comparison is against the latest declaration.
	// A late row the latest declaration does not list is also ExtraAtHQ.
	Late = "late"
)

// Kinds of missing declarations.
const (
	// NoStoreDay: HQ has rows of a store for the date but no declaration of the day: the
	// store's upload has not ended the day (it is behind, or the day is not over there).
	// With the stores HQ expects (Run's expect), also one of them HQ has nothing of: its
	// upload is stuck or it did not trade (its declaration of an empty day says which).
	NoStoreDay = "no_store_day"
	// NoDayClose: a terminal has transactions on the date but HQ has no day close of it.
	NoDayClose = "no_day_close"
)

// MethodAll names a terminal's figures over all payment methods in a TotalsDiff.
const MethodAll = "all"

// Figures are one account of a terminal's day for one payment method (or all): sales and
// refunds, counted and summed. A sale counts for every method it was paid with; its amount
// by method is net of change, as the terminal, the ledger and HQ all count it.
type Figures struct {
	SaleCount    int64     `json:"sale_count"`
	SaleAmount   money.Fen `json:"sale_amount"`
	RefundCount  int64     `json:"refund_count"`
	RefundAmount money.Fen `json:"refund_amount"`
}

// Amounts are a transaction as one side holds it.
type Amounts struct {
	Kind     string               `json:"kind"`
	FlowNo   int64                `json:"flow_no"`
	Amount   money.Fen            `json:"amount"`
	ByMethod map[string]money.Fen `json:"by_method"`
}

// TxnDiff is a difference about one transaction (store, terminal, seq).
type TxnDiff struct {
	Kind     string   `json:"kind"` // MissingAtHQ, ExtraAtHQ, AmountDiffers, ListedTwice or Late
	Store    string   `json:"store"`
	Terminal string   `json:"terminal"`
	Seq      int64    `json:"seq"`
	Ledger   *Amounts `json:"ledger,omitempty"` // as the store's declaration lists it
	HQ       *Amounts `json:"hq,omitempty"`     // as HQ holds it
	// ReceivedAt (when HQ received the row) and DeclaredAt (when HQ received the store's
	// first declaration of the day) are set for Late.
	ReceivedAt time.Time `json:"received_at,omitzero"`
	DeclaredAt time.Time `json:"declared_at,omitzero"`
	Detail     string    `json:"detail"`
}

// TotalsDiff is a terminal's figures for one method (or MethodAll) that the three accounts
// do not agree on. Declared is nil when HQ has no day close of the terminal, Ledger when it
// has no declaration of the store; those accounts are then not compared.
type TotalsDiff struct {
	Store    string   `json:"store"`
	Terminal string   `json:"terminal"`
	Method   string   `json:"method"`
	Declared *Figures `json:"declared,omitempty"` // the terminal's own day close
	Ledger   *Figures `json:"ledger,omitempty"`   // the store's declaration
	HQ       Figures  `json:"hq"`                 // HQ's rows
}

// MissingDeclaration is a store without a declaration of the day, or a terminal without a
// day close, that has transactions on the date.
type MissingDeclaration struct {
	Kind     string `json:"kind"` // NoStoreDay or NoDayClose
	Store    string `json:"store"`
	Terminal string `json:"terminal,omitempty"`
	Txns     int    `json:"txns"` // its transactions at HQ and in the store's declaration
}

// StoreException is an exception a store's ledger flagged on a transaction of the date, in
// the latest state HQ holds of it: an oversell (a sale took a SKU below zero), a refund
// the store's records of its sale do not cover, an event the store refused for good
// (parked), events of a till the store's ledger lost (seq_gap, never resolved in this
// release), or a replayed transaction whose receipt's flow number another transaction holds
// (flow: ExceptionFlow), open or resolved by the store's manager.
type StoreException struct {
	Kind         string `json:"kind"` // an hqwire.Exception kind (oversell, price, refund, parked or seq_gap) or flow
	Store        string `json:"store"`
	BusinessDate string `json:"business_date"`
	Terminal     string `json:"terminal"`
	Seq          int64  `json:"seq"`           // the sale's (oversell), the refund's, the parked event or a seq gap's first
	SKU          string `json:"sku,omitempty"` // oversell: the SKU taken below zero; parked: a later content's hash
	Code         string `json:"code"`
	Detail       string `json:"detail,omitempty"`
	QtyShort     int64  `json:"qty_short,omitempty"` // oversell: units below zero
	// FlowGiven, FlowBooked and HeldBy are a flow exception's (ExceptionFlow): the number
	// the customer's receipt prints, the one the store booked the transaction under, and the
	// transaction (terminal:seq) that holds FlowGiven, if the store named one.
	FlowGiven  int64  `json:"flow_given,omitempty"`
	FlowBooked int64  `json:"flow_booked,omitempty"`
	HeldBy     string `json:"held_by,omitempty"`
	Resolved   bool   `json:"resolved"`
	Resolution string `json:"resolution,omitempty"`
}

// Report is the reconciliation of one business date (of one store, or of all).
type Report struct {
	Date       string `json:"date"`
	Store      string `json:"store,omitempty"` // "" for all stores
	Stores     int    `json:"stores"`          // stores with rows or a declaration
	Terminals  int    `json:"terminals"`       // terminals with transactions or a day close
	HQTxns     int    `json:"hq_txns"`         // sale and refund rows at HQ
	LedgerTxns int    `json:"ledger_txns"`     // transactions the stores declared
	DayCloses  int    `json:"day_closes"`      // terminals' day closes at HQ
	// Txns lists the transaction differences by store, terminal and seq.
	Txns []TxnDiff `json:"txns"`
	// Totals lists the figures that disagree, by store, terminal and method.
	Totals []TotalsDiff `json:"totals"`
	// Missing lists the missing declarations.
	Missing []MissingDeclaration `json:"missing"`
	// Counts counts the entries above by kind (TotalsDiff as "totals_differ").
	Counts map[string]int `json:"counts"`
	// Exceptions lists the exceptions the stores flagged on the date, withdrawn ones left
	// out, by store, kind, terminal, seq and SKU. They are not differences and do not
	// count in OK or Counts.
	Exceptions []StoreException `json:"exceptions"`
}

// KindTotals is the Counts key of TotalsDiff entries.
const KindTotals = "totals_differ"

// OK reports whether the date reconciles exactly: no transaction difference other than
// Late, no totals difference and no missing declaration. Exceptions do not count:
// reconciliation proves that the accounts agree, and an exception is the store's own flag
// on a transaction they all hold.
func (r *Report) OK() bool {
	return len(r.Totals) == 0 && len(r.Missing) == 0 && len(r.Txns) == r.Counts[Late]
}

// OpenExceptions returns how many of the report's exceptions are not resolved.
func (r *Report) OpenExceptions() int {
	n := 0
	for i := range r.Exceptions {
		if !r.Exceptions[i].Resolved {
			n++
		}
	}
	return n
}

// method indexes of the fixed methods; others go to a terminal's map.
const (
	mCash = iota
	mCard
	mQR
	nMethods
)

var methodNames = [nMethods]string{wire.MethodCash, wire.MethodCard, wire.MethodQR}

func methodIndex(m string) int {
	switch m {
	case wire.MethodCash:
		return mCash
	case wire.MethodCard:
		return mCard
	case wire.MethodQR:
		return mQR
	}
	return -1
}

// account is one account of a terminal's day.
type account struct {
	all    Figures
	method [nMethods]Figures
	other  map[string]*Figures // methods outside cash, card and qr (never in valid data)
}

func (a *account) byMethod(m string) *Figures {
	if i := methodIndex(m); i >= 0 {
		return &a.method[i]
	}
	if a.other == nil {
		a.other = map[string]*Figures{}
	}
	f := a.other[m]
	if f == nil {
		f = &Figures{}
		a.other[m] = f
	}
	return f
}

// methods is a by-method map split into the amounts of cash, card and qr, a mask of the
// ones it names, and whether it names any other method.
type methods struct {
	v     [nMethods]money.Fen
	mask  uint8
	other bool
}

// split splits a by-method map.
func split(by map[string]money.Fen) methods {
	var s methods
	for name, a := range by {
		switch name {
		case wire.MethodCash:
			s.v[mCash], s.mask = a, s.mask|1<<mCash
		case wire.MethodCard:
			s.v[mCard], s.mask = a, s.mask|1<<mCard
		case wire.MethodQR:
			s.v[mQR], s.mask = a, s.mask|1<<mQR
		default:
			s.other = true
		}
	}
	return s
}

// add counts one transaction; s is split(by).
func (a *account) add(kind string, amount money.Fen, by map[string]money.Fen, s *methods) {
	v, mask := &s.v, s.mask
	switch kind {
	case hqwire.KindSale:
		a.all.SaleCount++
		a.all.SaleAmount += amount
		for i := range nMethods {
			if mask&(1<<i) != 0 {
				a.method[i].SaleCount++
				a.method[i].SaleAmount += v[i]
			}
		}
	case hqwire.KindRefund:
		a.all.RefundCount++
		a.all.RefundAmount += amount
		for i := range nMethods {
			if mask&(1<<i) != 0 {
				a.method[i].RefundCount++
				a.method[i].RefundAmount += v[i]
			}
		}
	default:
		return
	}
	if !s.other {
		return
	}
	for m, amt := range by {
		if methodIndex(m) >= 0 {
			continue
		}
		f := a.byMethod(m)
		if kind == hqwire.KindSale {
			f.SaleCount++
			f.SaleAmount += amt
		} else {
			f.RefundCount++
			f.RefundAmount += amt
		}
	}
}

// Sources of the three accounts.
const (
	srcDeclared = iota // the terminal's day close
	srcLedger          // the store's declaration
	srcHQ              // HQ's rows
)

// terminal is one terminal of one store on the date.
type terminal struct {
	store, name string
	acct        [3]account
	txns        int   // transactions at HQ or declared
	closeRow    int   // index of its latest day-close row, -1 if none
	closeSeq    int64 // seq of that row
	// hq indexes the terminal's sale and refund rows at HQ by seq. One small map per
	// terminal (a few hundred to a few thousand entries) stays in cache, where one map of a
	// million (store, terminal, seq) keys would miss on nearly every lookup.
	hq     map[int64]int32
	hqRows int // rows of the terminal at HQ (sizes hq)
}

type storeState struct {
	day  *hqstore.StoredDay
	txns int
}

// reconciler holds one run's indexes: transactions are keyed by (store, terminal) — a
// terminal's index — and then by seq. Rows from Storage come grouped by store and terminal,
// so the terminal of the previous row is tried before the map.
type reconciler struct {
	terms    []*terminal
	byName   map[[2]string]int32
	last     int32
	stores   map[string]*storeState
	rows     []hqstore.StoredRow
	split    []methods // per row: its ByMethod split
	matched  []bool    // per row: listed by its store's declaration
	report   *Report
	declared map[int32]bool // terminals whose day close decoded
}

func (rc *reconciler) term(store, name string) int32 {
	if rc.last >= 0 {
		t := rc.terms[rc.last]
		if t.name == name && t.store == store {
			return rc.last
		}
	}
	k := [2]string{store, name}
	i, ok := rc.byName[k]
	if !ok {
		i = int32(len(rc.terms))
		rc.terms = append(rc.terms, &terminal{store: store, name: name, closeRow: -1})
		rc.byName[k] = i
	}
	rc.last = i
	return i
}

func (rc *reconciler) store(name string) *storeState {
	s := rc.stores[name]
	if s == nil {
		s = &storeState{}
		rc.stores[name] = s
	}
	return s
}

// storeExceptions returns the report's list of the exceptions HQ holds, in the order
// hqstore.Storage.Exceptions returns them: by store, kind, terminal, seq and SKU.
func storeExceptions(xs []hqstore.StoredException) []StoreException {
	out := make([]StoreException, len(xs))
	for i := range xs {
		x := &xs[i]
		out[i] = StoreException{Kind: x.Kind, Store: x.Store, BusinessDate: x.BusinessDate, Terminal: x.Terminal, Seq: x.Seq, SKU: x.SKU,
			Code: x.Code, Detail: x.Detail, QtyShort: x.QtyShort, Resolved: x.Resolved, Resolution: x.Resolution}
	}
	return out
}

// Open is the list of the exceptions the stores flagged that no store manager has resolved,
// of every business date: what headquarters follows up, whatever night they were flagged on.
type Open struct {
	Store      string           `json:"store,omitempty"` // "" for all stores
	Exceptions []StoreException `json:"exceptions"`
}

// RunOpen lists the open exceptions of one store, or of all ("").
func RunOpen(ctx context.Context, st hqstore.Storage, store string) (Open, error) {
	xs, err := openExceptions(ctx, st, store)
	if err != nil {
		return Open{}, err
	}
	return Open{Store: store, Exceptions: xs}, nil
}

// sameDeclarations reports whether a and b hold the same revisions of the same days.
func sameDeclarations(a, b []hqstore.StoredDay) bool {
	return slices.EqualFunc(a, b, func(x, y hqstore.StoredDay) bool {
		return x.Store == y.Store && x.Day.BusinessDate == y.Day.BusinessDate && x.Day.Revision == y.Day.Revision
	})
}

// reconcile compares a date's declarations (days) with HQ's rows of it: each transaction,
// then each terminal's totals, then the declarations missing.
func reconcile(date, store string, rows []hqstore.StoredRow, days []hqstore.StoredDay, expect ...string) Report {
	r := Report{Date: date, Store: store, Txns: []TxnDiff{}, Totals: []TotalsDiff{},
		Missing: []MissingDeclaration{}, Counts: map[string]int{}, Exceptions: []StoreException{}}
	rc := &reconciler{byName: map[[2]string]int32{}, last: -1, stores: map[string]*storeState{}, rows: rows,
		split: make([]methods, len(rows)), matched: make([]bool, len(rows)), report: &r}
	for _, name := range expect {
		if store == "" || name == store {
			rc.store(name) // a store HQ has nothing of is missing its declaration
		}
	}
	rc.indexRows()
	rc.declarations(days)
	rc.unlisted()
	rc.dayCloses()
	rc.compareTotals()
	rc.noStoreDays()
	r.Stores = len(rc.stores)
	r.Terminals = len(rc.terms)
	r.sort()
	r.Counts[KindTotals] = len(r.Totals)
	return r
}

// indexRows reads HQ's rows: it finds each row's terminal and sizes each terminal's index,
// then indexes the transactions, counts them and finds each terminal's latest day close.
func (rc *reconciler) indexRows() {
	rows := rc.rows
	rowTerm := make([]int32, len(rows))
	for i := range rows {
		t := rc.term(rows[i].Store, rows[i].Terminal)
		rowTerm[i] = t
		rc.terms[t].hqRows++
	}
	for _, tm := range rc.terms {
		tm.hq = make(map[int64]int32, tm.hqRows)
	}
	var cur *storeState
	curName := ""
	for i := range rows {
		row := &rows[i]
		if cur == nil || row.Store != curName {
			cur, curName = rc.store(row.Store), row.Store
		}
		tm := rc.terms[rowTerm[i]]
		switch row.Kind {
		case hqwire.KindSale, hqwire.KindRefund:
			tm.hq[row.Seq] = int32(i)
			rc.split[i] = split(row.ByMethod)
			tm.acct[srcHQ].add(row.Kind, row.Amount, row.ByMethod, &rc.split[i])
			tm.txns++
			cur.txns++
			rc.report.HQTxns++
		case hqwire.KindDayClose:
			if tm.closeRow < 0 || row.Seq > tm.closeSeq {
				tm.closeRow, tm.closeSeq = i, row.Seq
			}
		}
	}
}

// declarations compares the stores' declarations with HQ's rows.
func (rc *reconciler) declarations(days []hqstore.StoredDay) {
	for d := range days {
		day := &days[d]
		s := rc.store(day.Store)
		s.day = day
		rc.last = -1
		for j := range day.Day.Txns {
			rc.declaredTxn(day, &day.Day.Txns[j])
		}
	}
}

// unlisted reports HQ's rows the declarations do not list, and rows received after the
// first declaration.
func (rc *reconciler) unlisted() {
	var cur *storeState
	curName := ""
	for i := range rc.rows {
		row := &rc.rows[i]
		if row.Kind != hqwire.KindSale && row.Kind != hqwire.KindRefund {
			continue
		}
		if cur == nil || row.Store != curName {
			cur, curName = rc.stores[row.Store], row.Store
		}
		s := cur
		if s.day == nil {
			continue // reported once as NoStoreDay
		}
		if row.ReceivedAt.After(s.day.FirstAt) {
			rc.diff(TxnDiff{Kind: Late, Store: row.Store, Terminal: row.Terminal, Seq: row.Seq,
				HQ: rowAmounts(row), ReceivedAt: row.ReceivedAt, DeclaredAt: s.day.FirstAt,
				Detail: fmt.Sprintf("received %s after the store's declaration of %s",
					row.ReceivedAt.Sub(s.day.FirstAt).Round(time.Second), s.day.FirstAt.Format(time.RFC3339))})
		}
		if !rc.matched[i] {
			rc.diff(TxnDiff{Kind: ExtraAtHQ, Store: row.Store, Terminal: row.Terminal, Seq: row.Seq,
				HQ: rowAmounts(row), Detail: "HQ has the row; the store's declaration does not list it"})
		}
	}
}

// noStoreDays lists the stores without a declaration of the date, by name.
func (rc *reconciler) noStoreDays() {
	r := rc.report
	names := make([]string, 0, len(rc.stores))
	for name := range rc.stores {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if s := rc.stores[name]; s.day == nil {
			r.Missing = append(r.Missing, MissingDeclaration{Kind: NoStoreDay, Store: name, Txns: s.txns})
			r.Counts[NoStoreDay]++
		}
	}
}

func (rc *reconciler) diff(d TxnDiff) {
	rc.report.Txns = append(rc.report.Txns, d)
	rc.report.Counts[d.Kind]++
}

// declaredTxn compares one transaction of a store's declaration with HQ's row of it.
func (rc *reconciler) declaredTxn(day *hqstore.StoredDay, tx *hqwire.Txn) {
	rc.report.LedgerTxns++
	s := rc.stores[day.Store]
	t := rc.term(day.Store, tx.Terminal)
	tm := rc.terms[t]
	sp := split(tx.ByMethod)
	tm.acct[srcLedger].add(tx.Kind, tx.Amount, tx.ByMethod, &sp)
	i, ok := tm.hq[tx.Seq]
	if !ok {
		tm.txns++
		s.txns++
		rc.diff(TxnDiff{Kind: MissingAtHQ, Store: day.Store, Terminal: tx.Terminal, Seq: tx.Seq,
			Ledger: txnAmounts(tx), Detail: "the store declared it; HQ has no row of it"})
		return
	}
	if rc.matched[i] {
		rc.diff(TxnDiff{Kind: ListedTwice, Store: day.Store, Terminal: tx.Terminal, Seq: tx.Seq,
			Ledger: txnAmounts(tx), Detail: "the store's declaration lists it more than once"})
		return
	}
	rc.matched[i] = true
	row := &rc.rows[i]
	if tx.Kind == row.Kind && tx.Amount == row.Amount && tx.FlowNo == row.FlowNo &&
		sameMethods(tx.ByMethod, row.ByMethod, &sp, &rc.split[i]) {
		return
	}
	if detail := differences(tx, row); detail != "" {
		rc.diff(TxnDiff{Kind: AmountDiffers, Store: day.Store, Terminal: tx.Terminal, Seq: tx.Seq,
			Ledger: txnAmounts(tx), HQ: rowAmounts(row), Detail: detail})
	}
}

// differences describes how a declared transaction and HQ's row of it differ ("" if not).
func differences(tx *hqwire.Txn, row *hqstore.StoredRow) string {
	var b []byte
	add := func(format string, args ...any) {
		if len(b) > 0 {
			b = append(b, "; "...)
		}
		b = fmt.Appendf(b, format, args...)
	}
	if tx.Kind != row.Kind {
		add("kind %s ≠ %s", tx.Kind, row.Kind)
	}
	if tx.Amount != row.Amount {
		add("amount %s ≠ %s", tx.Amount, row.Amount)
	}
	for _, m := range unionMethods(tx.ByMethod, row.ByMethod) {
		lv, lok := tx.ByMethod[m]
		hv, hok := row.ByMethod[m]
		if lv != hv || lok != hok {
			add("%s %s ≠ %s", m, methodText(lv, lok), methodText(hv, hok))
		}
	}
	if tx.FlowNo != row.FlowNo {
		add("flow_no %d ≠ %d", tx.FlowNo, row.FlowNo)
	}
	return string(b) + " (ledger ≠ HQ)"
}

func methodText(v money.Fen, ok bool) string {
	if !ok {
		return "none"
	}
	return v.String()
}

// sameMethods reports whether two by-method maps (and their splits) name the same methods
// with the same amounts (a method named with 0.00 differs from one not named: it counts a
// sale).
func sameMethods(a, b map[string]money.Fen, sa, sb *methods) bool {
	if len(a) != len(b) || sa.mask != sb.mask || sa.v != sb.v {
		return false
	}
	if sa.other || sb.other {
		for k, v := range a {
			if w, ok := b[k]; !ok || w != v {
				return false
			}
		}
	}
	return true
}

func unionMethods(a, b map[string]money.Fen) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	sortMethods(out)
	return out
}

// sortMethods orders methods cash, card, qr, then others by name.
func sortMethods(ms []string) {
	sort.Slice(ms, func(i, j int) bool {
		a, b := methodRank(ms[i]), methodRank(ms[j])
		if a != b {
			return a < b
		}
		return ms[i] < ms[j]
	})
}

func methodRank(m string) int {
	if m == MethodAll {
		return -1
	}
	if i := methodIndex(m); i >= 0 {
		return i
	}
	return nMethods
}

func txnAmounts(tx *hqwire.Txn) *Amounts {
	return &Amounts{Kind: tx.Kind, FlowNo: tx.FlowNo, Amount: tx.Amount, ByMethod: tx.ByMethod}
}

func rowAmounts(row *hqstore.StoredRow) *Amounts {
	return &Amounts{Kind: row.Kind, FlowNo: row.FlowNo, Amount: row.Amount, ByMethod: row.ByMethod}
}

// dayCloses reads each terminal's latest day close into its declared account. A day close
// that cannot be read counts as missing (its detail says why).
func (rc *reconciler) dayCloses() {
	rc.declared = map[int32]bool{}
	for t, tm := range rc.terms {
		if tm.closeRow < 0 {
			continue
		}
		var p wire.DayClosePayload
		if err := json.Unmarshal(rc.rows[tm.closeRow].Payload, &p); err != nil {
			continue
		}
		rc.report.DayCloses++
		rc.declared[int32(t)] = true
		a := &tm.acct[srcDeclared]
		a.all = Figures{SaleCount: p.SaleCount, SaleAmount: p.SaleAmount, RefundCount: p.RefundCount,
			RefundAmount: p.RefundAmount}
		for _, m := range p.Methods {
			*a.byMethod(m.Method) = Figures{SaleCount: m.SaleCount, SaleAmount: m.SaleAmount,
				RefundCount: m.RefundCount, RefundAmount: m.RefundAmount}
		}
	}
}

// compareTotals compares each terminal's three accounts per method and overall.
func (rc *reconciler) compareTotals() {
	r := rc.report
	for t, tm := range rc.terms {
		declared := rc.declared[int32(t)]
		ledger := rc.stores[tm.store].day != nil
		if !declared && tm.txns > 0 {
			r.Missing = append(r.Missing, MissingDeclaration{Kind: NoDayClose, Store: tm.store, Terminal: tm.name,
				Txns: tm.txns})
			r.Counts[NoDayClose]++
		}
		check := func(method string, d, l, h *Figures) {
			bad := ledger && *l != *h
			if declared && (*d != *h || (ledger && *d != *l)) {
				bad = true
			}
			if !bad {
				return
			}
			td := TotalsDiff{Store: tm.store, Terminal: tm.name, Method: method, HQ: *h}
			if declared {
				dc := *d
				td.Declared = &dc
			}
			if ledger {
				lc := *l
				td.Ledger = &lc
			}
			r.Totals = append(r.Totals, td)
		}
		a := &tm.acct
		check(MethodAll, &a[srcDeclared].all, &a[srcLedger].all, &a[srcHQ].all)
		for m := range nMethods {
			check(methodNames[m], &a[srcDeclared].method[m], &a[srcLedger].method[m], &a[srcHQ].method[m])
		}
		if a[0].other != nil || a[1].other != nil || a[2].other != nil {
			seen := map[string]bool{}
			for s := range a {
				for m := range a[s].other {
					seen[m] = true
				}
			}
			for m := range seen {
				check(m, a[srcDeclared].byMethod(m), a[srcLedger].byMethod(m), a[srcHQ].byMethod(m))
			}
		}
	}
}

// sort orders the lists by store, terminal, then seq (transactions) or method (totals).
func (r *Report) sort() {
	kindRank := map[string]int{MissingAtHQ: 0, ExtraAtHQ: 1, AmountDiffers: 2, ListedTwice: 3, Late: 4}
	sort.Slice(r.Txns, func(i, j int) bool {
		a, b := &r.Txns[i], &r.Txns[j]
		switch {
		case a.Store != b.Store:
			return a.Store < b.Store
		case a.Terminal != b.Terminal:
			return a.Terminal < b.Terminal
		case a.Seq != b.Seq:
			return a.Seq < b.Seq
		}
		return kindRank[a.Kind] < kindRank[b.Kind]
	})
	sort.Slice(r.Totals, func(i, j int) bool {
		a, b := &r.Totals[i], &r.Totals[j]
		switch {
		case a.Store != b.Store:
			return a.Store < b.Store
		case a.Terminal != b.Terminal:
			return a.Terminal < b.Terminal
		}
		if ra, rb := methodRank(a.Method), methodRank(b.Method); ra != rb {
			return ra < rb
		}
		return a.Method < b.Method
	})
	sort.Slice(r.Missing, func(i, j int) bool {
		a, b := &r.Missing[i], &r.Missing[j]
		switch {
		case a.Store != b.Store:
			return a.Store < b.Store
		case a.Terminal != b.Terminal:
			return a.Terminal < b.Terminal
		}
		return a.Kind < b.Kind
	})
}
