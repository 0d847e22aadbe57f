package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
)

// Sale returns a valid sale row of one line paid with one method (cash, card or qr), its
// payload a wire.SalePayload and its hash the wire content hash, as a store uploads it.
func Sale(store, terminal string, seq int64, date string, at time.Time, amount money.Fen, method string) hqwire.Row {
	pm := wire.Payment{Method: method, Amount: amount}
	if method != wire.MethodCash {
		pm.Reference = fmt.Sprintf("ref-%s-%d", terminal, seq)
	}
	p := wire.SalePayload{
		SaleID:   fmt.Sprintf("%s-%d", terminal, seq),
		OpenedAt: at.Add(-time.Minute),
		Lines:    []wire.Line{{Line: 1, SKU: "SKU-0001", Name: "Mineral water 550ml", Qty: 1, UnitPrice: amount, Amount: amount}},
		Total:    amount,
		Payments: []wire.Payment{pm},
	}
	return row(wire.KindSale, store, terminal, seq, date, at, seq, amount, map[string]money.Fen{method: amount}, p)
}

// Refund returns a valid refund row of amount by method of the sale saleSeq.
func Refund(store, terminal string, seq int64, date string, at time.Time, saleSeq int64, amount money.Fen, method string) hqwire.Row {
	p := wire.RefundPayload{
		RefundID: fmt.Sprintf("r-%s-%d", terminal, seq),
		SaleID:   fmt.Sprintf("%s-%d", terminal, saleSeq),
		SaleSeq:  saleSeq,
		Lines:    []wire.RefundLine{{Line: 1, SKU: "SKU-0001", Qty: 1, Amount: amount}},
		Amount:   amount,
		Method:   method,
	}
	if method != wire.MethodCash {
		p.Reference = fmt.Sprintf("ref-%s-%d", terminal, seq)
	}
	return row(wire.KindRefund, store, terminal, seq, date, at, seq, amount, map[string]money.Fen{method: amount}, p)
}

// DayClose returns a terminal's day-close row declaring totals of the sales and refunds
// among rows (those of its terminal and date).
func DayClose(store, terminal string, seq int64, date string, at time.Time, rows []hqwire.Row) hqwire.Row {
	p := wire.DayClosePayload{BusinessDate: date, Methods: []wire.MethodTotal{}}
	per := map[string]*wire.MethodTotal{}
	for _, r := range rows {
		if r.Terminal != terminal || r.BusinessDate != date {
			continue
		}
		for m, a := range r.ByMethod {
			mt := per[m]
			if mt == nil {
				mt = &wire.MethodTotal{Method: m}
				per[m] = mt
			}
			switch r.Kind {
			case hqwire.KindSale:
				mt.SaleCount++
				mt.SaleAmount += a
			case hqwire.KindRefund:
				mt.RefundCount++
				mt.RefundAmount += a
			}
		}
		switch r.Kind {
		case hqwire.KindSale:
			p.SaleCount++
			p.SaleAmount += r.Amount
		case hqwire.KindRefund:
			p.RefundCount++
			p.RefundAmount += r.Amount
		}
	}
	for _, m := range []string{wire.MethodCash, wire.MethodCard, wire.MethodQR} {
		if mt := per[m]; mt != nil {
			p.Methods = append(p.Methods, *mt)
		}
	}
	return row(wire.KindDayClose, store, terminal, seq, date, at, 0, 0, nil, p)
}

func row(kind wire.Kind, store, terminal string, seq int64, date string, at time.Time, flow int64,
	amount money.Fen, by map[string]money.Fen, payload any) hqwire.Row {
	js, err := json.Marshal(payload)
	if err != nil {
		panic(err) // the payload types always marshal
	}
	return hqwire.Row{
		Kind: string(kind), Terminal: terminal, Seq: seq, BusinessDate: date, FlowNo: flow, At: at,
		Hash:   wire.Hash(kind, store, terminal, seq, at, js),
		Amount: amount, ByMethod: by, Payload: js,
	}
}

// Day returns a store's declaration of a day listing the sales and refunds of rows dated
// date.
func Day(date string, revision int64, closedAt time.Time, rows []hqwire.Row) hqwire.StoreDay {
	d := hqwire.StoreDay{BusinessDate: date, Revision: revision, ClosedAt: closedAt, Txns: []hqwire.Txn{}}
	for _, r := range rows {
		if r.BusinessDate != date || (r.Kind != hqwire.KindSale && r.Kind != hqwire.KindRefund) {
			continue
		}
		d.Txns = append(d.Txns, hqwire.Txn{Terminal: r.Terminal, Seq: r.Seq, Kind: r.Kind, FlowNo: r.FlowNo,
			Amount: r.Amount, ByMethod: r.ByMethod})
	}
	return d
}

// Sales returns n sales of terminal from seq first on, at + seq seconds, amounts 1.00 to
// 99.99 and methods cycling through cash, card and qr. A row depends only on its store,
// terminal, seq, date and at: generating it again resends the same row.
func Sales(store, terminal string, first int64, n int, date string, at time.Time) []hqwire.Row {
	methods := []string{wire.MethodCash, wire.MethodCard, wire.MethodQR}
	rows := make([]hqwire.Row, n)
	for i := range rows {
		seq := first + int64(i)
		rows[i] = Sale(store, terminal, seq, date, at.Add(time.Duration(seq)*time.Second),
			money.Fen(100+seq*37%9900), methods[seq%3])
	}
	return rows
}

// NewBatch returns a batch of rows and days and its content hash (of its JSON encoding,
// as hq-sync serve hashes the request body).
func NewBatch(store, id string, rows []hqwire.Row, days ...hqwire.StoreDay) (*hqwire.Batch, string) {
	b := &hqwire.Batch{V: hqwire.Version, Store: store, ID: id, Rows: rows, Days: days,
		SentAt: time.Date(2025, 3, 2, 3, 0, 0, 0, time.UTC)}
	return b, BatchHash(b)
}

// ExceptionBatch returns a batch of rows and exceptions, without days, and its content hash.
func ExceptionBatch(store, id string, rows []hqwire.Row, xs ...hqwire.Exception) (*hqwire.Batch, string) {
	b, _ := NewBatch(store, id, rows)
	b.Exceptions = xs
	return b, BatchHash(b)
}

// BatchHash returns the content hash of b: of its JSON encoding, as hq-sync serve hashes
// the request body.
func BatchHash(b *hqwire.Batch) string {
	js, err := json.Marshal(b)
	if err != nil {
		panic(err)
	}
	return hqwire.ContentHash(js)
}

// Oversell returns the open oversell exception of the sale terminal/seq, which took sku
// short units below zero at at, as the store's ledger holds it after change.
func Oversell(terminal string, seq int64, sku, date string, at time.Time, short, change int64) hqwire.Exception {
	return hqwire.Exception{Change: change, Kind: hqwire.ExceptionOversell, Terminal: terminal, Seq: seq, SKU: sku,
		BusinessDate: date, Code: hqwire.CodeOversold, QtyShort: short, At: at}
}

// RefundException returns the open refund exception of the refund terminal/seq of at, as
// the store's ledger holds it after change.
func RefundException(terminal string, seq int64, date string, at time.Time, code, detail string, change int64) hqwire.Exception {
	return hqwire.Exception{Change: change, Kind: hqwire.ExceptionRefund, Terminal: terminal, Seq: seq,
		BusinessDate: date, Code: code, Detail: detail, At: at}
}

// Resolved returns x as its store's manager resolved it at at, explaining resolution: the
// ledger's state after change.
func Resolved(x hqwire.Exception, at time.Time, resolution string, change int64) hqwire.Exception {
	x.Change, x.Resolved, x.ResolvedAt, x.Resolution = change, true, at, resolution
	return x
}

// Withdrawn returns x withdrawn (the ledger no longer holds it) after change: its key,
// business date and change number, nothing else.
func Withdrawn(x hqwire.Exception, change int64) hqwire.Exception {
	return hqwire.Exception{Change: change, Kind: x.Kind, Terminal: x.Terminal, Seq: x.Seq, SKU: x.SKU,
		BusinessDate: x.BusinessDate, Withdrawn: true}
}

// Parts cuts declaration d into n parts as an uploader sends them: part k of n carries the
// k-th of n slices of its transactions, in order, as even as they go (the last ones may
// be empty), all with the split id "r{revision}-in-{n}" (see Resplit).
func Parts(d hqwire.StoreDay, n int) []hqwire.StoreDay {
	out := make([]hqwire.StoreDay, n)
	size := (len(d.Txns) + n - 1) / n
	for k := range out {
		p := d
		p.Part, p.Parts, p.Split = k+1, n, fmt.Sprintf("r%d-in-%d", d.Revision, n)
		lo, hi := min(k*size, len(d.Txns)), min((k+1)*size, len(d.Txns))
		p.Txns = d.Txns[lo:hi:hi]
		out[k] = p
	}
	return out
}

// Resplit returns parts with split id id instead of theirs: another split of the same list.
func Resplit(parts []hqwire.StoreDay, id string) []hqwire.StoreDay {
	out := slices.Clone(parts)
	for k := range out {
		out[k].Split = id
	}
	return out
}
