package reconcile

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/posgate/posgate/internal/money"
)

// Figure names, as WriteTable and WriteCSV name a TotalsDiff's figures.
const (
	FigureSaleCount    = "sale_count"
	FigureSaleAmount   = "sale_amount"
	FigureRefundCount  = "refund_count"
	FigureRefundAmount = "refund_amount"
)

// CSVHeader is the first record WriteCSV writes.
var CSVHeader = []string{"section", "kind", "store", "terminal", "seq", "method", "figure", "declared", "ledger",
	"hq", "detail"}

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
	diffs := len(r.Txns) - r.Counts[Late] + len(r.Totals) + len(r.Missing)
	return fmt.Sprintf("reconcile %s (%s): %d stores, %d terminals, %d declared txns, %d HQ txns, %d day closes: "+
		"%d differences, %d late: %s", r.Date, scope, r.Stores, r.Terminals, r.LedgerTxns, r.HQTxns, r.DayCloses,
		diffs, r.Counts[Late], verdict)
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteTable writes the report as aligned text tables: the verdict, then the transaction
// differences, the totals that disagree and the missing declarations.
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
	return tw.Flush()
}

// WriteCSV writes the report as CSV: CSVHeader, then one record per transaction
// difference (section "txn"; ledger and hq hold the amounts), per disagreeing figure of a
// terminal's totals (section "totals"; declared, ledger and hq hold the figure, empty for an
// absent account) and per missing declaration (section "declaration"; detail holds its
// transaction count). Amounts are decimal yuan text ("12.30").
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for i := range r.Txns {
		d := &r.Txns[i]
		rec := []string{"txn", d.Kind, d.Store, d.Terminal, strconv.FormatInt(d.Seq, 10), "", "amount",
			"", amountOf(d.Ledger), amountOf(d.HQ), d.Detail}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	for i := range r.Totals {
		d := &r.Totals[i]
		for _, f := range d.figures() {
			if err := cw.Write([]string{"totals", KindTotals, d.Store, d.Terminal, "", d.Method, f.name,
				f.declared, f.ledger, f.hqv, ""}); err != nil {
				return err
			}
		}
	}
	for _, m := range r.Missing {
		if err := cw.Write([]string{"declaration", m.Kind, m.Store, m.Terminal, "", "", "", "", "", "",
			strconv.Itoa(m.Txns)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func amountOf(a *Amounts) string {
	if a == nil {
		return ""
	}
	return money.Fen(a.Amount).String()
}
