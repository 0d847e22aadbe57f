package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/store-server/ledger"
)

// errExportInvalid is wrapped in the error of a page HQ refused as a query it does not take
// (400 export_invalid): from a serve from before the part asked, when the part is one of
// the additions (hqwire.PartExceptions, hqwire.PartFlows).
var errExportInvalid = errors.New(hqwire.CodeExportInvalid)

// exportInvalid reports whether HQ's answer status, body is its refusal of a query it does
// not take (the problem document's code export_invalid).
func exportInvalid(status int, body []byte) bool {
	var p struct {
		Code string `json:"code"`
	}
	return status == 400 && json.Unmarshal(body, &p) == nil && p.Code == hqwire.CodeExportInvalid
}

// bookExceptions books, after the rows, the exceptions and flow exceptions HQ holds of the
// store as HQ holds them (ledger.RestoreExceptions, ledger.RestoreFlowExceptions), page by
// page, then has the ledger number its next changes above every change HQ held of them
// (ledger.NumberChangesAbove), so that a manager's resolution at the store reaches HQ over
// the state HQ holds. An HQ whose serve answers a part 400 export_invalid (one from before
// the part) does not fail the refill: it goes on without that part and says so (a warning
// logged, NotExported and Warnings in the summary).
func (r *refill) bookExceptions(ctx context.Context, l *ledger.Ledger, sum *RefillSummary) error {
	var topExceptions, topFlows int64
	err := r.exportPages(ctx, sum, hqwire.PartExceptions,
		"exceptions (oversells, price and refund exceptions, parked events, seq gaps)",
		func(p *hqwire.ExportPage, q url.Values) (bool, error) {
			got, err := l.RestoreExceptions(ctx, p.Exceptions)
			if err != nil || len(p.Exceptions) == 0 {
				return false, err
			}
			sum.Exceptions.Add(got)
			for _, x := range p.Exceptions {
				topExceptions = max(topExceptions, x.Change)
			}
			last := p.Exceptions[len(p.Exceptions)-1]
			q.Set("after_kind", last.Kind)
			q.Set("after_terminal", last.Terminal)
			q.Set("after_seq", strconv.FormatInt(last.Seq, 10))
			q.Set("after_sku", last.SKU)
			return true, nil
		})
	if err != nil {
		return err
	}
	err = r.exportPages(ctx, sum, hqwire.PartFlows, "flow exceptions", func(p *hqwire.ExportPage, q url.Values) (bool, error) {
		got, err := l.RestoreFlowExceptions(ctx, p.Flows)
		if err != nil || len(p.Flows) == 0 {
			return false, err
		}
		sum.Exceptions.Add(got)
		for _, x := range p.Flows {
			topFlows = max(topFlows, x.Change)
		}
		last := p.Flows[len(p.Flows)-1]
		q.Set("after_terminal", last.Terminal)
		q.Set("after_seq", strconv.FormatInt(last.Seq, 10))
		return true, nil
	})
	if err != nil {
		return err
	}
	if n := len(sum.Exceptions.NotBooked); n > 0 {
		r.log.Warn("exceptions HQ holds that this release cannot book: they stay at HQ as they are", "count", n,
			"first", sum.Exceptions.NotBooked[0])
	}
	return l.NumberChangesAbove(ctx, topExceptions, topFlows)
}

// exportPages asks HQ for the pages of export part (what, in words) one after the other:
// book books each and sets in q where the next one starts, or says there is none to start
// after. A serve that refuses the part (errExportInvalid) ends it without an error
// (notExported).
func (r *refill) exportPages(ctx context.Context, sum *RefillSummary, part, what string,
	book func(p *hqwire.ExportPage, q url.Values) (next bool, err error)) error {
	q := url.Values{"part": {part}}
	for {
		p, err := r.page(ctx, q)
		if errors.Is(err, errExportInvalid) {
			r.notExported(sum, part, what, err)
			return nil
		}
		if err != nil {
			return err
		}
		next, err := book(p, q)
		if err != nil || !next || !p.More {
			return err
		}
	}
}

// notExported records that HQ refused the export part (a serve from before it): the
// store's what (the part's items, in words) are not booked, and those open stay open at HQ.
func (r *refill) notExported(sum *RefillSummary, part, what string, err error) {
	warning := "HQ does not give back the store's " + what + ": its hq-sync serve is from before export part " +
		strconv.Quote(part) + "; the refilled ledger does not list them, and those open at HQ stay open there"
	r.log.Warn(warning, "part", part, "answer", err)
	sum.NotExported = append(sum.NotExported, part)
	sum.Warnings = append(sum.Warnings, warning)
}
