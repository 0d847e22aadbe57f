package reconcile

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/posgate/posgate/internal/money"
)

// Figure names, as WriteTable and WriteCSV name a TotalsDiff's figures.
const (
	FigureSaleCount    = "sale_count"
	FigureSaleAmount   = "sale_amount"
	FigureRefundCount  = "refund_count"
	FigureRefundAmount = "refund_amount"
)

// CSVHeader is the first record WriteCSV writes. The columns after detail are an
// exception's; the other sections leave them empty.
var CSVHeader = []string{"section", "kind", "store", "terminal", "seq", "method", "figure", "declared", "ledger",
	"hq", "detail", "sku", "code", "qty_short", "resolved", "resolution"}

// Summary is the report's one-line verdict.
func (r *Report) Summary() string {
	scope := "all stores"
	if r.Store != "" {
		scope = "store " + r.Store
	}
	verdict := "OK"
	if !r.OK() {
		verdict = "NOT OK"
	}
	diffs := r.Differences()
	return fmt.Sprintf("reconcile %s (%s): %d stores, %d terminals, %d declared txns, %d HQ txns, %d day closes: "+
		"%d differences, %d late, %d exceptions (%d open): %s", r.Date, scope, r.Stores, r.Terminals, r.LedgerTxns,
		r.HQTxns, r.DayCloses, diffs, r.Counts[Late], len(r.Exceptions), r.OpenExceptions(), verdict)
}

// figureRow is one figure of a TotalsDiff that the accounts disagree on.
type figureRow struct {
	name                  string
	declared, ledger, hqv string
}

// figures returns the figures of d that disagree, as text ("" for an absent account).
func (d *TotalsDiff) figures() []figureRow {
	get := []struct {
		name string
		text func(f *Figures) string
	}{
		{FigureSaleCount, func(f *Figures) string { return strconv.FormatInt(f.SaleCount, 10) }},
		{FigureSaleAmount, func(f *Figures) string { return f.SaleAmount.String() }},
		{FigureRefundCount, func(f *Figures) string { return strconv.FormatInt(f.RefundCount, 10) }},
		{FigureRefundAmount, func(f *Figures) string { return f.RefundAmount.String() }},
	}
	var out []figureRow
	for _, g := range get {
		fr := figureRow{name: g.name, hqv: g.text(&d.HQ)}
		same := true
		if d.Declared != nil {
			fr.declared = g.text(d.Declared)
			same = same && fr.declared == fr.hqv
		}
		if d.Ledger != nil {
			fr.ledger = g.text(d.Ledger)
			same = same && fr.ledger == fr.hqv
		}
		if !same {
			out = append(out, fr)
		}
	}
	return out
}

// FigureText is one figure of a TotalsDiff that the accounts disagree on, as text ("" for
// an account that is absent).
type FigureText struct {
	Name                 string // FigureSaleCount, …
	Declared, Ledger, HQ string
}

// Figures returns the figures of d that disagree, as the table writes them.
func (d *TotalsDiff) Figures() []FigureText {
	var out []FigureText
	for _, f := range d.figures() {
		out = append(out, FigureText{Name: f.name, Declared: f.declared, Ledger: f.ledger, HQ: f.hqv})
	}
	return out
}

// Differences returns how many differences the report lists: transactions (late ones
// aside), totals and missing declarations.
func (r *Report) Differences() int {
	return len(r.Txns) - r.Counts[Late] + len(r.Totals) + len(r.Missing)
}

// amountsText is a transaction's amount and by-method split: "12.30 (cash 2.30, card 10.00)".
func amountsText(a *Amounts) string {
	if a == nil {
		return ""
	}
	ms := make([]string, 0, len(a.ByMethod))
	for m := range a.ByMethod {
		ms = append(ms, m)
	}
	sortMethods(ms)
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m + " " + a.ByMethod[m].String()
	}
	return fmt.Sprintf("%s %s (%s)", a.Kind, a.Amount, strings.Join(parts, ", "))
}

// exceptionState is an exception's state as WriteTable shows it.
func exceptionState(x *StoreException) string {
	if x.Resolved {
		return "resolved"
	}
	return "open"
}

// exceptionNote is an exception's detail and, once resolved, its resolution, on one line.
func exceptionNote(x *StoreException) string {
	note := oneLine(x.Detail)
	if x.Resolution != "" {
		if note != "" {
			note += "; "
		}
		note += "resolution: " + oneLine(x.Resolution)
	}
	return note
}

// oneLine returns a store's text with its control characters (tabs, line breaks) as
// spaces, so that it keeps to its cell of a table.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// qtyText is an oversell's qty_short as text, "" for none.
func qtyText(n int64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteTable writes the report as aligned text tables: the verdict, then the transaction
// differences, the totals that disagree, the missing declarations and the exceptions.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, r.Summary())
	if len(r.Txns) > 0 {
		fmt.Fprintf(tw, "\nTRANSACTIONS (%d)\n", len(r.Txns))
		fmt.Fprintln(tw, "KIND\tSTORE\tTERMINAL\tSEQ\tLEDGER\tHQ\tDETAIL")
		for i := range r.Txns {
			d := &r.Txns[i]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Kind, d.Store, d.Terminal, d.Seq,
				orDash(amountsText(d.Ledger)), orDash(amountsText(d.HQ)), d.Detail)
		}
	}
	if len(r.Totals) > 0 {
		fmt.Fprintf(tw, "\nTOTALS THAT DISAGREE (%d): terminal declared / store ledger / HQ rows\n", len(r.Totals))
		fmt.Fprintln(tw, "STORE\tTERMINAL\tMETHOD\tFIGURE\tDECLARED\tLEDGER\tHQ")
		for i := range r.Totals {
			d := &r.Totals[i]
			for _, f := range d.figures() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Store, d.Terminal, d.Method, f.name,
					orDash(f.declared), orDash(f.ledger), f.hqv)
			}
		}
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(tw, "\nMISSING DECLARATIONS (%d)\n", len(r.Missing))
		fmt.Fprintln(tw, "KIND\tSTORE\tTERMINAL\tTXNS")
		for _, m := range r.Missing {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", m.Kind, m.Store, orDash(m.Terminal), m.Txns)
		}
	}
	if len(r.Exceptions) > 0 {
		fmt.Fprintf(tw, "\nEXCEPTIONS (%d, %d open): flagged by the stores' ledgers, not differences\n",
			len(r.Exceptions), r.OpenExceptions())
		fmt.Fprintln(tw, "KIND\tSTORE\tTERMINAL\tSEQ\tSKU\tCODE\tQTY_SHORT\tSTATE\tDETAIL")
		for i := range r.Exceptions {
			x := &r.Exceptions[i]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", x.Kind, x.Store, x.Terminal, x.Seq,
				orDash(oneLine(x.SKU)), x.Code, orDash(qtyText(x.QtyShort)), exceptionState(x), orDash(exceptionNote(x)))
		}
	}
	return tw.Flush()
}

// WriteTable writes the open exceptions as a table, oldest business date first.
func (o *Open) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "OPEN EXCEPTIONS (%d): flagged by the stores' ledgers, not resolved by their managers\n", len(o.Exceptions))
	if len(o.Exceptions) > 0 {
		fmt.Fprintln(tw, "DATE\tKIND\tSTORE\tTERMINAL\tSEQ\tSKU\tCODE\tQTY_SHORT\tDETAIL")
	}
	for i := range o.Exceptions {
		x := &o.Exceptions[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", x.BusinessDate, x.Kind, x.Store, x.Terminal, x.Seq,
			orDash(oneLine(x.SKU)), x.Code, orDash(qtyText(x.QtyShort)), orDash(exceptionNote(x)))
	}
	return tw.Flush()
}

// WriteCSV writes the report as CSV: CSVHeader, then one record per transaction
// difference (section "txn"; ledger and hq hold the amounts), per disagreeing figure of a
// terminal's totals (section "totals"; declared, ledger and hq hold the figure, empty for an
// absent account), per missing declaration (section "declaration"; detail holds its
// transaction count) and per exception (section "exception"; kind is oversell, price, refund, parked, seq_gap or flow,
// detail its detail, and sku, code, qty_short, resolved ("true" or "false") and resolution
// its own columns, which the other sections leave empty). Amounts are decimal yuan text
// ("12.30"). A text cell a spreadsheet would take for a formula (it starts with =, +, -, @,
// a tab or a carriage return: a manager's resolution, an exception's detail, a SKU, an id)
// is written with a ' in front (cellText); amounts and counts are written as they are.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	write := func(rec ...string) error { // every record has every column
		return cw.Write(append(rec, make([]string, len(CSVHeader)-len(rec))...))
	}
	for i := range r.Txns {
		d := &r.Txns[i]
		if err := write("txn", d.Kind, cellText(d.Store), cellText(d.Terminal), strconv.FormatInt(d.Seq, 10), "", "amount",
			"", amountOf(d.Ledger), amountOf(d.HQ), cellText(d.Detail)); err != nil {
			return err
		}
	}
	for i := range r.Totals {
		d := &r.Totals[i]
		for _, f := range d.figures() {
			if err := write("totals", KindTotals, cellText(d.Store), cellText(d.Terminal), "", cellText(d.Method), f.name,
				f.declared, f.ledger, f.hqv, ""); err != nil {
				return err
			}
		}
	}
	for _, m := range r.Missing {
		if err := write("declaration", m.Kind, cellText(m.Store), cellText(m.Terminal), "", "", "", "", "", "",
			strconv.Itoa(m.Txns)); err != nil {
			return err
		}
	}
	for i := range r.Exceptions {
		x := &r.Exceptions[i]
		if err := write("exception", x.Kind, cellText(x.Store), cellText(x.Terminal), strconv.FormatInt(x.Seq, 10),
			"", "", "", "", "", cellText(x.Detail), cellText(x.SKU), x.Code, qtyText(x.QtyShort), strconv.FormatBool(x.Resolved),
			cellText(x.Resolution)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// cellText is s as a CSV text cell: with a ' in front when a spreadsheet would read it as a
// formula (a store's or a manager's text may start with "=HYPERLINK(…"), as OWASP advises.
func cellText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

func amountOf(a *Amounts) string {
	if a == nil {
		return ""
	}
	return money.Fen(a.Amount).String()
}
