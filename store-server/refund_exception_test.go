package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestRefundExceptionResolution: a refund that returns more than its sale sold is accepted
// (the ack does not change) and listed as a refund exception, while a refund the sale covers
// is not; in the dashboard (a headless Chromium driven over the DevTools protocol) the manager resolves
// it with what explained it, after which it leaves the open list, keeps its note, and a
// retried request through the API changes nothing. Real mosquitto, Redis and ledger.
func TestRefundExceptionResolution(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)

	sale := biGoodSale("T1-1", 0)                        // A1 × 2, 7.00 cash
	refund := func(seq, qty int64) *wire.RefundPayload { // of line 1, in cash
		amt := biPrices["A1"] * money.Fen(qty)
		return &wire.RefundPayload{RefundID: fmt.Sprintf("T1-refund-%d", seq), SaleID: sale.SaleID, SaleSeq: 1,
			Lines: []wire.RefundLine{{Line: 1, SKU: "A1", Qty: qty, Amount: amt}}, Amount: amt, Method: wire.MethodCash}
	}
	for _, ev := range []struct {
		seq     int64
		kind    wire.Kind
		payload any
	}{
		{1, wire.KindSale, sale},
		{2, wire.KindRefund, refund(2, 1)}, // one of the two: covered
		{3, wire.KindRefund, refund(3, 2)}, // two more: one beyond the sale
	} {
		r.bus.publish(t, "T1", biMarshal(t, r.seal(ev.kind, "T1", ev.seq, biMarshal(t, ev.payload))))
		d, ok := r.bus.next("T1", biAckWait)
		if !ok || d.err != nil || len(d.acks.Acks) != 1 || d.acks.Acks[0].Status != wire.AckAccepted {
			t.Fatalf("T1:%d answered %s (%v)", ev.seq, d.raw, d.err)
		}
	}
	c, ctx := srv.manager(), context.Background()
	open := must[client.RefundExceptionsAnswer](t, "refund exceptions")(c.RefundExceptions(ctx, "", false))
	if len(open.RefundExceptions) != 1 || open.RefundExceptions[0].Terminal != "T1" || open.RefundExceptions[0].Seq != 3 ||
		open.RefundExceptions[0].Code != ledger.CodeRefundExceedsSale || open.RefundExceptions[0].BusinessDate != r.date ||
		open.RefundExceptions[0].Resolved {
		t.Fatalf("open refund exceptions: %+v", open.RefundExceptions)
	}
	detail := open.RefundExceptions[0].Detail
	if dom := browse(t, srv.Base+"/#token="+biToken); !strings.Contains(dom, `<td class="bad">refund_exceeds_sale</td>`) ||
		!strings.Contains(dom, `<td class="wrap">`+detail+`</td>`) {
		t.Errorf("the dashboard does not show the refund exception:\n%s", dom)
	}

	srv.problem(t, "no note", "POST", "/v1/refund-exceptions/resolve", biToken, "application/json",
		[]byte(`{"terminal":"T1","seq":3,"note":"  "}`), http.StatusBadRequest, ledger.CodeRefundExceptionResolutionRequired)
	srv.problem(t, "a covered refund", "POST", "/v1/refund-exceptions/resolve", biToken, "application/json",
		[]byte(`{"terminal":"T1","seq":2,"note":"x"}`), http.StatusNotFound, ledger.CodeRefundExceptionNotFound)
	srv.problem(t, "all=yes", "GET", "/v1/refund-exceptions?all=yes", biToken, "", nil, http.StatusBadRequest, "all_invalid")

	// The manager resolves the exception in the dashboard.
	const note = "one A1 came back twice: the till's refund was repeated; cash recovered"
	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#refund-exceptions tbody", "refund_exceeds_sale")
	b.click("#refund-exceptions tbody button")
	if msg := b.answerPrompt(note); !strings.Contains(msg, "Refund T1 #3: "+detail) {
		t.Errorf("prompt %q", msg)
	}
	b.waitText("#refund-exceptions tbody", "None.")

	again := must[client.ResolveRefundAnswer](t, "resolve again")(c.ResolveRefundException(ctx,
		client.ResolveRefundRequest{Terminal: "T1", Seq: 3, Note: "again"}))
	if again.Applied || !again.RefundException.Resolved || again.RefundException.Resolution != note ||
		again.RefundException.ResolvedAt.IsZero() {
		t.Fatalf("resolving again: %+v, want the dashboard's resolution unchanged", again)
	}
	open = must[client.RefundExceptionsAnswer](t, "refund exceptions")(c.RefundExceptions(ctx, "", false))
	if len(open.RefundExceptions) != 0 {
		t.Fatalf("open refund exceptions after resolving: %+v", open.RefundExceptions)
	}
	all := must[client.RefundExceptionsAnswer](t, "all refund exceptions")(c.RefundExceptions(ctx, r.date, true))
	if len(all.RefundExceptions) != 1 || all.RefundExceptions[0].Resolution != note {
		t.Fatalf("all refund exceptions of %s: %+v", r.date, all.RefundExceptions)
	}
}
