package hqview

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// Txns is the answer of GET /v1/view/txns: a store's transactions of a business date as
// HQ holds them, each beside the store's declaration of it.
type Txns struct {
	Store    string    `json:"store"`
	Date     string    `json:"date"`
	Revision int64     `json:"revision"` // of the declaration (0: none)
	Txns     []TxnView `json:"txns"`
	// DayCloses are the terminals' own day closes HQ holds.
	DayCloses []DayClose `json:"day_closes"`
}

// Status of a transaction on the drill-down page.
const (
	TxnMatches       = "matches"                   // HQ's row and the declaration agree
	TxnMissingAtHQ   = reconcile.MissingAtHQ       // declared, not at HQ
	TxnNotDeclared   = reconcile.ExtraAtHQ         // at HQ, not in the declaration
	TxnAmountDiffers = reconcile.AmountDiffers     // both, with other amounts
	TxnNoDeclaration = "no_declaration_of_the_day" // at HQ; the store has not declared the day
)

// TxnView is one transaction.
type TxnView struct {
	Terminal   string               `json:"terminal"`
	Seq        int64                `json:"seq"`
	Kind       string               `json:"kind"`
	FlowNo     int64                `json:"flow_no"`
	HQ         *money.Fen           `json:"hq,omitempty"`       // HQ's row's amount
	Declared   *money.Fen           `json:"declared,omitempty"` // the declaration's
	ByMethod   map[string]money.Fen `json:"by_method,omitempty"`
	ReceivedAt time.Time            `json:"received_at,omitzero"` // when HQ stored its row
	Status     string               `json:"status"`
}

// DayClose is a terminal's day close as HQ holds it.
type DayClose struct {
	Terminal   string    `json:"terminal"`
	Seq        int64     `json:"seq"`
	ReceivedAt time.Time `json:"received_at"`
	Totals     any       `json:"totals"` // its payload as the terminal declared it
}

func (h *Handler) txns(r *http.Request) (any, error) {
	q := r.URL.Query()
	store, date := q.Get("store"), q.Get("date")
	if !wire.ValidID(store) {
		return nil, perr.New(perr.Invalid, "store_invalid", "store %q is not a store id", store)
	}
	if err := checkDate(date); err != nil {
		return nil, err
	}
	return BuildTxns(r.Context(), h.st, store, date)
}

// BuildTxns reads a store's day: HQ's rows and the store's declaration, matched by
// (terminal, seq).
func BuildTxns(ctx context.Context, st hqstore.Storage, store, date string) (Txns, error) {
	out := Txns{Store: store, Date: date, Txns: []TxnView{}, DayCloses: []DayClose{}}
	rows, err := st.Rows(ctx, date, store)
	if err != nil {
		return out, perr.Wrap(err, perr.Unavailable, "hq_db_unavailable", "HQ's database cannot be read: %v", err)
	}
	days, err := st.Days(ctx, date, store)
	if err != nil {
		return out, perr.Wrap(err, perr.Unavailable, "hq_db_unavailable", "HQ's database cannot be read: %v", err)
	}
	type key struct {
		t string
		s int64
	}
	declared := map[key]*TxnView{}
	var list []*TxnView
	if len(days) == 1 {
		out.Revision = days[0].Day.Revision
		for _, t := range days[0].Day.Txns {
			amt := t.Amount
			v := &TxnView{Terminal: t.Terminal, Seq: t.Seq, Kind: t.Kind, FlowNo: t.FlowNo, Declared: &amt,
				ByMethod: t.ByMethod, Status: TxnMissingAtHQ}
			declared[key{t.Terminal, t.Seq}] = v
			list = append(list, v)
		}
	}
	for _, r := range rows {
		if r.Kind == string(wire.KindDayClose) {
			out.DayCloses = append(out.DayCloses, DayClose{Terminal: r.Terminal, Seq: r.Seq, ReceivedAt: r.ReceivedAt,
				Totals: r.Payload})
			continue
		}
		amt := r.Amount
		v := declared[key{r.Terminal, r.Seq}]
		switch {
		case v == nil:
			status := TxnNotDeclared
			if out.Revision == 0 {
				status = TxnNoDeclaration
			}
			v = &TxnView{Terminal: r.Terminal, Seq: r.Seq, Kind: r.Kind, FlowNo: r.FlowNo, ByMethod: r.ByMethod, Status: status}
			list = append(list, v)
		case *v.Declared == amt:
			v.Status = TxnMatches
		default:
			v.Status = TxnAmountDiffers
		}
		v.HQ, v.ReceivedAt = &amt, r.ReceivedAt
	}
	slices.SortFunc(list, func(a, b *TxnView) int {
		if c := strings.Compare(a.Terminal, b.Terminal); c != 0 {
			return c
		}
		return int(a.Seq - b.Seq)
	})
	for _, v := range list {
		out.Txns = append(out.Txns, *v)
	}
	slices.SortFunc(out.DayCloses, func(a, b DayClose) int { return strings.Compare(a.Terminal, b.Terminal) })
	return out, nil
}
