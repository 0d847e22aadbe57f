package hqview

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"

	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/internal/money"
)

// Languages are the languages of the page and the report, each with its message catalog
// (page/i18n/<lang>.json); the first is the default.
var Languages = []string{"en", "zh-CN"}

// Catalog is one language's messages, by key.
type Catalog map[string]string

// LoadCatalog returns the embedded catalog of lang (one of Languages).
func LoadCatalog(lang string) (Catalog, error) {
	b, err := page.ReadFile("page/i18n/" + lang + ".json")
	if err != nil {
		return nil, fmt.Errorf("no messages in %q (have %s)", lang, strings.Join(Languages, ", "))
	}
	var c Catalog
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("catalog %s: %w", lang, err)
	}
	return c, nil
}

// T returns the message key with {name} replaced by each of args, given as name, value
// pairs. A key the catalog lacks reads as itself, so that a gap shows instead of hiding.
func (c Catalog) T(key string, args ...any) string {
	s, ok := c[key]
	if !ok {
		return key
	}
	for i := 0; i+1 < len(args); i += 2 {
		s = strings.ReplaceAll(s, "{"+fmt.Sprint(args[i])+"}", fmt.Sprint(args[i+1]))
	}
	return s
}

// GroupAmount writes an amount in yuan from its exact decimal text, with a thousands
// separator every three digits of the whole part: "-1234567.80" → "¥-1,234,567.80". Both
// languages group by three with "," and mark the decimals with "."; the text is never
// turned into a number.
func GroupAmount(text string) string {
	sign, rest := "", text
	if strings.HasPrefix(rest, "-") {
		sign, rest = "-", rest[1:]
	}
	whole, frac, hasFrac := strings.Cut(rest, ".")
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if hasFrac {
		b.WriteString("." + frac)
	}
	return "¥" + sign + b.String()
}

// Ago says how long a duration is, in the catalog's words ("3 min").
func (c Catalog) Ago(d time.Duration) string {
	s := int64(d.Seconds())
	switch {
	case s < 60:
		return c.T("dur.s", "n", s)
	case s < 3600:
		return c.T("dur.min", "n", s/60)
	case s < 86400:
		return c.T("dur.h", "n", s/3600)
	}
	return c.T("dur.d", "n", s/86400)
}

// WriteHTML writes the overview as one self-contained HTML page in lang: the reconcile of
// o.Date, the stores with their days and upload lag, and the open exceptions. Its style is
// inline and it loads nothing (for a morning email).
func WriteHTML(w io.Writer, o Overview, lang string) error {
	c, err := LoadCatalog(lang)
	if err != nil {
		return err
	}
	css, err := page.ReadFile("page/hq.css")
	if err != nil {
		return err
	}
	funcs := template.FuncMap{
		"t":      c.T,
		"amount": func(f money.Fen) string { return GroupAmount(f.String()) },
		"amountp": func(f *money.Fen) string {
			if f == nil {
				return "—"
			}
			return GroupAmount(f.String())
		},
		"lag": func(s *int64) string {
			if s == nil {
				return c.T("never")
			}
			return c.Ago(time.Duration(*s) * time.Second)
		},
		"when": func(t *time.Time) string {
			if t == nil {
				return c.T("never")
			}
			return t.Format("2006-01-02 15:04:05")
		},
		"figures": func(d reconcile.TotalsDiff) []reconcile.FigureText { return d.Figures() },
		"diffs":   func(r *reconcile.Report) int { return r.Differences() },
		"detail": func(d reconcile.TxnDiff) string {
			if d.Kind == reconcile.Late && !d.ReceivedAt.IsZero() && !d.DeclaredAt.IsZero() {
				return c.T("late.detail", "d", c.Ago(max(0, d.ReceivedAt.Sub(d.DeclaredAt))), "at", d.DeclaredAt.Format("2006-01-02 15:04:05"))
			}
			return d.Detail
		},
	}
	tpl, err := template.New("report").Funcs(funcs).Parse(reportHTML)
	if err != nil {
		return err
	}
	return tpl.Execute(w, struct {
		O       Overview
		Lang    string
		CSS     template.CSS
		Days    int
		Written string
	}{o, lang, template.CSS(css), DaysShown, o.Now.Format("2006-01-02 15:04:05 MST")})
}

// reportHTML is the report's template: the page's layout, drawn on the server.
const reportHTML = `<!doctype html>
<html lang="{{.Lang}}">
<head><meta charset="utf-8"><title>{{t "report.title" "date" .O.Date}}</title>
<style>{{.CSS}}</style></head>
<body class="report">
<header><h1>{{t "title"}} · {{t "report.title" "date" .O.Date}}</h1></header>
<p class="muted">{{t "report.generated" "time" .Written}}</p>
{{with .O.Reconcile}}
<p id="verdict" class="verdict {{if .OK}}good{{else}}bad{{end}}">{{if .OK}}{{t "verdict.ok"}}{{else}}{{t "verdict.notok" "n" (diffs .)}}{{end}}</p>
<div class="figures">
<div><b>{{.Stores}}</b>{{t "summary.stores"}}</div><div><b>{{.Terminals}}</b>{{t "summary.terminals"}}</div>
<div><b>{{.LedgerTxns}}</b>{{t "summary.declared"}}</div><div><b>{{.HQTxns}}</b>{{t "summary.hq"}}</div>
<div><b>{{.DayCloses}}</b>{{t "summary.closes"}}</div><div><b>{{len .Exceptions}}</b>{{t "summary.exceptions"}}</div>
</div>
{{else}}<p class="muted">{{t "report.none"}}</p>{{end}}
<h2>{{t "stores.title"}}</h2>
<table id="stores"><thead><tr><th>{{t "col.store"}}</th><th>{{t "col.lastBatch"}}</th><th>{{t "col.lag"}}</th>
<th>{{t "col.days"}}</th><th class="num">{{t "col.differences"}}</th><th class="num">{{t "col.exceptions"}}</th>
<th class="num">{{t "col.open"}}</th><th>{{t "col.reconciles"}}</th></tr></thead><tbody>
{{range .O.Stores}}<tr><td>{{.Store}}</td><td>{{when .LastBatchAt}}</td><td>{{lag .LagSeconds}}</td>
<td class="wrap">{{range .Days}}<span class="chip">{{t "day.chip" "date" .Date "rev" .Revision "n" .Txns "amount" (amount .Amount)}}</span> {{else}}<span class="muted">{{t "day.none" "n" $.Days}}</span>{{end}}</td>
<td class="num{{if .Differences}} bad{{end}}">{{.Differences}}</td><td class="num">{{.Exceptions}}</td>
<td class="num{{if .Open}} warn{{end}}">{{.Open}}</td><td class="{{if .Reconciled}}good{{else}}bad{{end}}">{{if .Reconciled}}{{t "yes"}}{{else}}{{t "no"}}{{end}}</td></tr>
{{end}}</tbody></table>
{{with .O.Reconcile}}
<h2>{{t "diffs.title"}}</h2>
<table id="diffs"><thead><tr><th>{{t "col.kind"}}</th><th>{{t "col.store"}}</th><th>{{t "col.terminal"}}</th><th class="num">{{t "col.seq"}}</th>
<th class="num">{{t "col.declared"}}</th><th class="num">{{t "col.hq"}}</th><th>{{t "col.detail"}}</th></tr></thead><tbody>
{{range .Txns}}{{if ne .Kind "late"}}<tr><td class="bad">{{t (print "kind." .Kind)}}</td><td>{{.Store}}</td><td>{{.Terminal}}</td><td class="num">{{.Seq}}</td>
<td class="num">{{with .Ledger}}{{amount .Amount}}{{else}}—{{end}}</td><td class="num">{{with .HQ}}{{amount .Amount}}{{else}}—{{end}}</td><td class="wrap">{{detail .}}</td></tr>
{{end}}{{end}}{{if eq (diffs .) 0}}<tr><td colspan="7" class="muted">{{t "none"}}</td></tr>{{end}}</tbody></table>
{{with index .Counts "late"}}<details><summary>{{t "late.summary" "n" .}}</summary>
<table><thead><tr><th>{{t "col.store"}}</th><th>{{t "col.terminal"}}</th><th class="num">{{t "col.seq"}}</th><th class="num">{{t "col.hq"}}</th><th>{{t "col.detail"}}</th></tr></thead><tbody>
{{range $.O.Reconcile.Txns}}{{if eq .Kind "late"}}<tr><td>{{.Store}}</td><td>{{.Terminal}}</td><td class="num">{{.Seq}}</td><td class="num">{{with .HQ}}{{amount .Amount}}{{end}}</td><td class="wrap">{{detail .}}</td></tr>{{end}}{{end}}
</tbody></table></details>{{end}}
{{if .Totals}}<h2>{{t "totals.title"}}</h2>
<table><thead><tr><th>{{t "col.store"}}</th><th>{{t "col.terminal"}}</th><th>{{t "col.method"}}</th><th>{{t "col.figure"}}</th>
<th class="num">{{t "col.tills"}}</th><th class="num">{{t "col.declared"}}</th><th class="num">{{t "col.hq"}}</th></tr></thead><tbody>
{{range $d := .Totals}}{{range figures $d}}<tr><td>{{$d.Store}}</td><td>{{$d.Terminal}}</td><td>{{t (print "method." $d.Method)}}</td>
<td>{{t (print "figure." .Name)}}</td><td class="num">{{.Declared}}</td><td class="num">{{.Ledger}}</td><td class="num">{{.HQ}}</td></tr>{{end}}{{end}}
</tbody></table>{{end}}
{{if .Missing}}<h2>{{t "missing.title"}}</h2>
<table><thead><tr><th>{{t "col.kind"}}</th><th>{{t "col.store"}}</th><th>{{t "col.terminal"}}</th></tr></thead><tbody>
{{range .Missing}}<tr><td class="bad">{{t (print "kind." .Kind)}}</td><td>{{.Store}}</td><td>{{.Terminal}}</td></tr>{{end}}
</tbody></table>{{end}}
<h2>{{t "exceptions.title" "date" .Date}}</h2>
<table id="exceptions"><thead><tr><th>{{t "col.kind"}}</th><th>{{t "col.store"}}</th><th>{{t "col.terminal"}}</th><th class="num">{{t "col.seq"}}</th>
<th>{{t "col.sku"}}</th><th class="num">{{t "col.short"}}</th><th>{{t "col.detail"}}</th><th>{{t "col.status"}}</th></tr></thead><tbody>
{{range .Exceptions}}<tr><td class="warn">{{t (print "exkind." .Kind)}}</td><td>{{.Store}}</td><td>{{.Terminal}}</td><td class="num">{{.Seq}}</td>
<td>{{.SKU}}</td><td class="num">{{if .QtyShort}}{{.QtyShort}}{{end}}</td><td class="wrap">{{.Detail}}</td>
<td>{{if .Resolved}}{{t "resolved" "note" .Resolution}}{{else}}{{t "open"}}{{end}}</td></tr>
{{else}}<tr><td colspan="8" class="muted">{{t "none"}}</td></tr>{{end}}</tbody></table>
{{end}}
<h2>{{t "open.title"}}</h2>
<table id="open"><thead><tr><th>{{t "col.date"}}</th><th>{{t "col.kind"}}</th><th>{{t "col.store"}}</th><th>{{t "col.terminal"}}</th>
<th class="num">{{t "col.seq"}}</th><th>{{t "col.sku"}}</th><th class="num">{{t "col.short"}}</th><th>{{t "col.detail"}}</th></tr></thead><tbody>
{{range .O.Open}}<tr><td>{{.BusinessDate}}</td><td class="warn">{{t (print "exkind." .Kind)}}</td><td>{{.Store}}</td><td>{{.Terminal}}</td>
<td class="num">{{.Seq}}</td><td>{{.SKU}}</td><td class="num">{{if .QtyShort}}{{.QtyShort}}{{end}}</td><td class="wrap">{{.Detail}}</td></tr>
{{else}}<tr><td colspan="8" class="muted">{{t "none"}}</td></tr>{{end}}</tbody></table>
</body></html>
`
