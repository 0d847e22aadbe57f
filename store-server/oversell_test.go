package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestOversellResolution: an offline sale beyond stock is recorded and listed as an oversell
// exception; in the dashboard (a headless Chromium driven over the DevTools protocol) the manager
// proves the stock from its moves, books the shelf count (the ledger books the difference),
// and resolves the exception with what explained it,
// after which it leaves the open list, keeps its note, and a retried request through the
// API changes nothing. Real mosquitto, Redis and ledger.
func TestOversellResolution(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.importCSV(t, []byte(biCatalogCSV))
	srv.adjust(t, "opening-D4", "D4", 2, ledger.ReasonOpening)
	r := biStartRun(t, srv)

	// Five of D4 sold offline with two in stock: recorded, flagged, three short.
	sellD4Offline(t, r, "offline sale beyond stock")
	c, ctx := srv.manager(), context.Background()
	open := must[client.OversellsAnswer](t, "oversells")(c.Oversells(ctx, "", false))
	if len(open.Oversells) != 1 || open.Oversells[0].Terminal != "T1" || open.Oversells[0].Seq != 1 ||
		open.Oversells[0].SKU != "D4" || open.Oversells[0].Short != 3 || open.Oversells[0].Resolved {
		t.Fatalf("open oversells: %+v", open.Oversells)
	}
	if dom := browse(t, srv.Base+"/#token="+biToken); !strings.Contains(dom, `<td>D4</td><td class="num bad">3</td>`) ||
		!strings.Contains(dom, `<button class="write">Resolve…</button>`) {
		t.Errorf("the dashboard does not offer the oversell for resolution:\n%s", dom)
	}

	srv.problem(t, "no note", "POST", "/v1/oversells/resolve", biToken, "application/json",
		[]byte(`{"terminal":"T1","seq":1,"sku":"D4","note":"  "}`), http.StatusBadRequest, ledger.CodeResolutionRequired)
	srv.problem(t, "no such oversell", "POST", "/v1/oversells/resolve", biToken, "application/json",
		[]byte(`{"terminal":"T1","seq":1,"sku":"A1","note":"x"}`), http.StatusNotFound, ledger.CodeOversellNotFound)
	srv.problem(t, "all=yes", "GET", "/v1/oversells?all=yes", biToken, "", nil, http.StatusBadRequest, "all_invalid")

	// The manager proves the stock and resolves the exception in the dashboard.
	const note = "3 found in the back room; stock adjusted"
	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#oversells tbody", "D4")
	if got := b.text("#stock tbody"); !strings.Contains(got, "D4 -3 — -3 0") {
		t.Errorf("stock before the proof: %q", got)
	}
	b.click("#prove")
	b.waitText("#proof-at", "as of")
	b.waitText("#stock tbody", "D4 -3 -3 -3 0")
	// The shelf is empty: the count books +3, and ledger and Redis follow.
	b.click("#stock tbody button")
	if msg := b.answerPrompt("0"); !strings.Contains(msg, "D4 (the ledger says -3)") {
		t.Errorf("count prompt %q", msg)
	}
	if msg := b.acceptDialog(); !strings.Contains(msg, "Book 0 × D4") {
		t.Errorf("count confirmation %q", msg)
	}
	if msg := b.acceptDialog(); !strings.Contains(msg, "booked +3 and now says 0") {
		t.Errorf("after the count %q", msg)
	}
	b.waitText("#stock tbody", "D4 0 — 0 0") // the proof taken before the count is dropped
	if row := srv.stock(t)["D4"]; row.Ledger != 0 || row.Redis == nil || *row.Redis != 0 {
		t.Errorf("stock after the count: %+v", row)
	}
	b.click("#oversells tbody button")
	if msg := b.answerPrompt(note); !strings.Contains(msg, "Oversell of 3 × D4 by T1 #1") {
		t.Errorf("prompt %q", msg)
	}
	b.waitText("#oversells tbody", "None.")

	again := must[client.ResolveOversellAnswer](t, "resolve again")(c.ResolveOversell(ctx,
		client.ResolveOversellRequest{Terminal: "T1", Seq: 1, SKU: "D4", Note: "again"}))
	if again.Applied || !again.Oversell.Resolved || again.Oversell.Resolution != note || again.Oversell.ResolvedAt.IsZero() {
		t.Fatalf("resolving again: %+v, want the dashboard's resolution unchanged", again)
	}
	if open = must[client.OversellsAnswer](t, "oversells")(c.Oversells(ctx, "", false)); len(open.Oversells) != 0 {
		t.Fatalf("open oversells after resolving: %+v", open.Oversells)
	}
	all := must[client.OversellsAnswer](t, "all oversells")(c.Oversells(ctx, r.date, true))
	if len(all.Oversells) != 1 || all.Oversells[0].Resolution != note {
		t.Fatalf("all oversells of %s: %+v", r.date, all.Oversells)
	}
}

// sellD4Offline has T1 send, as its seq 1, a sale made offline of five D4 (biGoodSale 2),
// and requires the store to accept it flagged as an oversell; what names the sale in a failure.
func sellD4Offline(t *testing.T, r *biRun, what string) {
	t.Helper()
	r.bus.publish(t, "T1", biMarshal(t, r.seal(wire.KindSale, "T1", 1, biMarshal(t, biGoodSale("T1-1", 2)))))
	d, ok := r.bus.next("T1", biAckWait)
	if !ok || d.err != nil || len(d.acks.Acks) != 1 || d.acks.Acks[0].Status != wire.AckAccepted ||
		d.acks.Acks[0].Result == nil || !d.acks.Acks[0].Result.Oversold {
		t.Fatalf("%s answered %s (%v)", what, d.raw, d.err)
	}
}
