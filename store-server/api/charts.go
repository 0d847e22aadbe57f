package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/history"
)

// salesChart answers GET /v1/charts/sales: sales and takings per minute of a business date,
// from the ledger, beside the same minutes of the last trading day before it.
func (s *Server) salesChart(r *http.Request) (any, error) {
	ctx := r.Context()
	now := s.Now()
	today := s.Ledger.BusinessDate(now)
	date := r.URL.Query().Get("date")
	if date == "" {
		date = today
	}
	if err := checkDate(date); err != nil {
		return nil, err
	}
	day, err := s.Ledger.SalesByMinute(ctx, date)
	if err != nil {
		return nil, err
	}
	prev, err := s.Ledger.TradingDayBefore(ctx, date)
	if err != nil {
		return nil, err
	}
	var cmp map[int]ledgerMinutes
	if prev != "" {
		m, err := s.Ledger.SalesByMinute(ctx, prev)
		if err != nil {
			return nil, err
		}
		cmp = map[int]ledgerMinutes{}
		for k, v := range m {
			cmp[k] = ledgerMinutes{v.Sales, v.Takings}
		}
	}
	from, to, any := 24*60, -1, false
	for m := range day {
		from, to, any = min(from, m), max(to, m), true
	}
	if !any && len(cmp) == 0 {
		return client.SalesChart{BusinessDate: date, CompareDate: prev, Minutes: []client.SalesMinute{}}, nil
	}
	for m := range cmp {
		from = min(from, m)
	}
	if date == today {
		local := now.In(s.Ledger.Location())
		to = max(to, local.Hour()*60+local.Minute())
	} else if !any {
		for m := range cmp {
			to = max(to, m)
		}
	}
	out := client.SalesChart{BusinessDate: date, CompareDate: prev, Minutes: make([]client.SalesMinute, 0, to-from+1)}
	for m := from; m <= to; m++ {
		c := cmp[m]
		out.Minutes = append(out.Minutes, client.SalesMinute{Minute: fmt.Sprintf("%02d:%02d", m/60, m%60),
			Sales: day[m].Sales, Takings: day[m].Takings, CompareSales: c.sales, CompareTakings: c.takings})
	}
	return out, nil
}

type ledgerMinutes struct {
	sales   int64
	takings money.Fen
}

// history answers GET /v1/charts/history: the recorder's samples as columns.
func (s *Server) history(r *http.Request) (any, error) {
	a := client.HistoryAnswer{Times: []time.Time{}, Modes: []client.Mode{}, Acks: []int64{}, AckP50Ms: []*float64{},
		AckP99Ms: []*float64{}, Tills: []client.TillHistory{}}
	if s.History == nil {
		return a, nil
	}
	a.EveryMs = s.History.Every().Milliseconds()
	samples := s.History.Samples()
	index := map[string]int{}
	for i, sm := range samples {
		a.Times = append(a.Times, s.inStore(sm.At))
		a.Modes = append(a.Modes, sm.Mode)
		a.Acks = append(a.Acks, sm.Acks)
		var p50, p99 *float64
		if sm.Acks > 0 {
			v50, v99 := sm.AckP50Ms, sm.AckP99Ms
			p50, p99 = &v50, &v99
		}
		a.AckP50Ms, a.AckP99Ms = append(a.AckP50Ms, p50), append(a.AckP99Ms, p99)
		for t, f := range sm.Tills {
			j, ok := index[t]
			if !ok {
				j = len(a.Tills)
				index[t] = j
				a.Tills = append(a.Tills, client.TillHistory{Terminal: t, Events: make([]*int64, len(samples)),
					OldestMs: make([]*int64, len(samples))})
			}
			if f.Known {
				ev, old := f.Events, f.OldestMs
				a.Tills[j].Events[i], a.Tills[j].OldestMs[i] = &ev, &old
			}
		}
	}
	sortTills(a.Tills)
	return a, nil
}

// Probe reads what a history sample holds: the gate mode, and each till's backlog and
// oldest unsent event as GET /v1/terminals gives them (unknown while the till is not known
// to be online).
func (s *Server) Probe(ctx context.Context) (client.Mode, map[string]history.Till, error) {
	mode := s.Ingest.Mode()
	if s.Now == nil {
		s.Now = time.Now
	}
	a, err := s.terminalsAnswer(ctx)
	if err != nil {
		return mode, nil, err
	}
	tills := make(map[string]history.Till, len(a.Terminals))
	for _, t := range a.Terminals {
		f := history.Till{}
		switch {
		case t.BacklogUnknownSince != nil:
		case t.Backlog != nil:
			f = history.Till{Known: true, Events: t.Backlog.Events, OldestMs: t.Backlog.OldestNowMs}
		case t.Heartbeat != nil:
			f = history.Till{Known: true, Events: t.Heartbeat.Backlog, OldestMs: t.Heartbeat.OldestAgeMs}
		case t.Online != nil && *t.Online:
			f = history.Till{Known: true} // online, nothing reported yet
		}
		tills[t.Terminal] = f
	}
	return mode, tills, nil
}

func sortTills(t []client.TillHistory) {
	slices.SortFunc(t, func(a, b client.TillHistory) int { return strings.Compare(a.Terminal, b.Terminal) })
}
