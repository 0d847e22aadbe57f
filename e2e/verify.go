package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// Report is the outcome of Verify: one line per check, and whether all held.
type Report struct {
	Lines []string
	OK    bool
}

// Add adds a line to the report; a false ok fails it.
func (r *Report) Add(ok bool, format string, args ...any) {
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		r.OK = false
	}
	r.Lines = append(r.Lines, mark+" "+fmt.Sprintf(format, args...))
}

// String renders the report.
func (r Report) String() string {
	verdict := "PASS"
	if !r.OK {
		verdict = "FAIL"
	}
	return strings.Join(r.Lines, "\n") + "\n" + verdict + "\n"
}

// BusinessDays returns the business dates in the store's zone loc from that of from to
// today's: every date a run that began at from can have sold on (two, when it crossed the
// store's midnight). Verify them all: a run's sales of its first day are not in the totals
// of its last.
func BusinessDays(loc *time.Location, from time.Time) []string {
	last := time.Now().In(loc).Format(wire.BusinessDate)
	y, m, d := from.In(loc).Date()
	var out []string
	for day := time.Date(y, m, d, 12, 0, 0, 0, loc); ; day = day.AddDate(0, 0, 1) {
		out = append(out, day.Format(wire.BusinessDate))
		if out[len(out)-1] >= last { // YYYY-MM-DD orders as text
			return out
		}
	}
}

// notCompared names why a day's Redis counters were not compared, for a report line.
func notCompared(why string) string {
	if why == "" {
		return ""
	}
	return "; redis not compared: " + why
}

// Verify checks, once every agent has drained with nothing parked, that per terminal and
// business date the agent's own totals = the ledger's = Redis counters (invariant 3; Redis's
// for the dates the store keeps them for: not a day whose keys left Redis once HQ held it,
// nor one older than the rebuild's window), and,
// for a day the terminal has closed, that its declared close = the ledger's (the figure the
// store and headquarters reconcile against); and that per SKU the ledger's stock = its proof
// from the stock moves = Redis stock (invariant 4).
func Verify(ctx context.Context, s *StoreServer, cashiers map[string]*Cashier, dates []string) Report {
	rep := Report{OK: true}
	for term, c := range cashiers {
		st, err := c.WaitDrained(ctx)
		// A parked event is one the store refused to record: the till's totals hold it, the
		// ledger's do not.
		rep.Add(err == nil && st.Parked == 0, "terminal %s drained: backlog %d, parked %d", term, st.Backlog, st.Parked)
	}
	m := s.Manager()
	mode, err := m.Mode(ctx)
	if err != nil {
		rep.Add(false, "store mode: %v", err)
		return rep
	}
	rep.Add(mode.Mode == "redis", "store gate mode %s (%d accepted, %d rebuilds)", mode.Mode, mode.Stats.Accepted, mode.Stats.Rebuilds)
	terms := make([]string, 0, len(cashiers))
	for t := range cashiers {
		terms = append(terms, t)
	}
	sort.Strings(terms)
	var refunds int64 // the ledger's, over the dates
	for _, date := range dates {
		tot, err := m.Totals(ctx, date)
		if err != nil {
			rep.Add(false, "store totals %s: %v", date, err)
			continue
		}
		byTerm := map[string]client.TerminalTotals{}
		for _, t := range tot.Terminals {
			byTerm[t.Terminal] = t
		}
		for _, term := range terms {
			own, err := cashiers[term].DayTotals(date)
			if err != nil {
				rep.Add(false, "%s %s agent totals: %v", term, date, err)
				continue
			}
			agent := client.DeclaredCounters(own)
			led := byTerm[term].Ledger
			refunds += led.Refunds
			// A day whose keys left Redis once HQ held it, or one older than the dates a
			// rebuild keeps exact, has no counters in Redis to compare: the till and the
			// ledger must agree. Any other day's counters must be there and agree too.
			switch tot.RedisNotCompared {
			case client.NotComparedLeftRedis, client.NotComparedOld:
				rep.Add(agent.Equal(led), "%s %s sales %d/%d amount %s/%s refunds %s/%s (agent/ledger; redis: %s)",
					term, date, agent.Sales, led.Sales, agent.Amount, led.Amount, agent.RefundAmount, led.RefundAmount,
					tot.RedisNotCompared)
			default:
				var red client.Counters
				if r := byTerm[term].Redis; r != nil {
					red = *r
				}
				ok := tot.RedisNotCompared == "" && agent.Equal(led) && led.Equal(red)
				rep.Add(ok, "%s %s sales %d/%d/%d amount %s/%s/%s refunds %s/%s/%s (agent/ledger/redis)%s",
					term, date, agent.Sales, led.Sales, red.Sales, agent.Amount, led.Amount, red.Amount,
					agent.RefundAmount, led.RefundAmount, red.RefundAmount, notCompared(tot.RedisNotCompared))
			}
			if d := byTerm[term].Declared; d != nil {
				rep.Add(d.Equal(led), "%s %s day close declared sales %d amount %s refunds %s = ledger's",
					term, date, d.Sales, d.Amount, d.RefundAmount)
			}
		}
	}
	// The agents refund only what their own sales leave to refund; the ledger, which holds
	// each refund to its sale as well, must agree on every one.
	if rx, err := m.RefundExceptions(ctx, "", true); err != nil {
		rep.Add(false, "store refund exceptions: %v", err)
	} else {
		x := rx.RefundExceptions
		rep.Add(len(x) == 0, "refunds held to their sales by the ledger: %d refunds, %d refund exceptions%s",
			refunds, len(x), firstException(x))
	}
	stock, err := m.Stock(ctx, true)
	if err != nil {
		rep.Add(false, "store stock: %v", err)
		return rep
	}
	for _, row := range stock.Stock {
		red, proven := int64(0), int64(0)
		if row.Redis != nil {
			red = *row.Redis
		}
		if row.Proven != nil {
			proven = *row.Proven
		}
		ok := row.Redis != nil && red == row.Ledger && row.Proven != nil && proven == row.Ledger
		rep.Add(ok, "stock %-8s ledger %d = proven (opening + adjustments - sold + restocked) %d = redis %d",
			row.SKU, row.Ledger, proven, red)
	}
	return rep
}

func firstException(x []client.RefundException) string {
	if len(x) == 0 {
		return ""
	}
	return fmt.Sprintf(" (first: %s %s)", wire.Key(x[0].Terminal, x[0].Seq), x[0].Detail)
}
