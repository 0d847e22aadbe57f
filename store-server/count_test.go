package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestShelfCountDuringSale: in the dashboard (a headless Chromium driven over the DevTools protocol) a
// manager opens the count of a SKU whose table says 12, and while the prompt is open a
// customer buys one at a till (the ledger: 11). The manager counts 10 on the shelf (one more
// is missing). The dashboard posts the count, not a difference from the 12 it showed, and
// the ledger books 10 − 11 = −1 at its own quantity: ledger and Redis say 10, what the shelf
// holds. A delta from the table (10 − 12) would count the sale twice and leave 9. Real
// mosquitto, Redis and ledger.
func TestShelfCountDuringSale(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.importCSV(t, []byte(biCatalogCSV))
	srv.adjust(t, "opening-A1", "A1", 12, ledger.ReasonOpening)
	r := biStartRun(t, srv)

	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#stock tbody", "A1 12 — 12 0")
	b.click("#stock tbody button")
	if msg := b.waitDialog(); !strings.Contains(msg, "A1 (the ledger says 12)") {
		t.Errorf("count prompt %q", msg)
	}

	// A live sale of one A1 while the manager counts.
	env := r.seal(wire.KindSale, "T1", 1, biMarshal(t, biSale("T1-1", []biLine{{"A1", 1}}, nil, 0)))
	env.Offline = false
	r.bus.publish(t, "T1", biMarshal(t, env))
	if d, ok := r.bus.next("T1", biAckWait); !ok || d.err != nil || len(d.acks.Acks) != 1 ||
		d.acks.Acks[0].Status != wire.AckAccepted {
		t.Fatalf("the sale during the count answered %s (%v)", d.raw, d.err)
	}
	if q := ledgerQty(t, srv, "A1"); q != 11 {
		t.Fatalf("ledger stock of A1 after the sale %d, want 11", q)
	}

	b.answerPrompt("10")
	// T_PROBE sent a heartbeat, but no status of it was heard (as after a restart of the
	// store's broker): it is named as not known to be online.
	if msg := b.acceptDialog(); !strings.Contains(msg, "10 × A1") || !strings.Contains(msg, "at that moment") ||
		!strings.Contains(msg, "Not known to be online: T_PROBE.") {
		t.Errorf("count confirmation %q", msg)
	}
	// The booking is in the ledger before the dashboard says what it booked.
	for deadline := time.Now().Add(10 * time.Second); ledgerQty(t, srv, "A1") == 11; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the count was not booked")
		}
	}
	if q := ledgerQty(t, srv, "A1"); q != 10 {
		t.Fatalf("ledger stock of A1 after counting 10 on the shelf: %d (the sale during the count counted twice?)", q)
	}
	if msg := b.acceptDialog(); !strings.Contains(msg, "booked -1") || !strings.Contains(msg, "now says 10") {
		t.Errorf("after the count %q", msg)
	}
	b.waitText("#stock tbody", "A1 10 — 10 0")
	if row := srv.stock(t)["A1"]; row.Ledger != 10 || row.Redis == nil || *row.Redis != 10 {
		t.Errorf("stock after the count: %+v", row)
	}
}

// ledgerQty reads the ledger's stock of a SKU from /v1/stock without the proof.
func ledgerQty(t *testing.T, srv *biServer, sku string) int64 {
	t.Helper()
	out := must[client.StockAnswer](t, "stock")(srv.manager().Stock(context.Background(), false))
	for _, r := range out.Stock {
		if r.SKU == sku {
			return r.Ledger
		}
	}
	return 0
}

// TestShelfCountWarnsOfOfflineTills: a till is offline (its status topic says so: the will
// the broker publishes when its connection drops). Sales it makes meanwhile have left the
// shelf but not the ledger, and will be taken off the stock again when they arrive; the
// dashboard's count confirmation names the till before the manager books. A till that
// comes back online (and sends what it holds) is not named any more.
func TestShelfCountWarnsOfOfflineTills(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.importCSV(t, []byte(biCatalogCSV))
	srv.adjust(t, "opening-A1", "A1", 12, ledger.ReasonOpening)
	t1 := dialTerminal(t, srv.Broker, "T1")
	presence := func(online bool) {
		p, _ := json.Marshal(wire.Presence{V: wire.Version, Terminal: "T1", Online: online, At: time.Now()})
		if tok := t1.c.Publish(wire.StatusTopic(biStoreID, "T1"), 1, true, p); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish presence: %v", tok.Error())
		}
	}
	presence(false)

	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#stock tbody", "A1 12 — 12 0")
	b.waitText("#terminals tbody", "offline since")
	b.click("#stock tbody button")
	b.answerPrompt("12")
	if msg := b.acceptDialog(); !strings.Contains(msg, "Not known to be online: T1.") {
		t.Errorf("count confirmation with T1 offline: %q", msg)
	}
	if msg := b.acceptDialog(); !strings.Contains(msg, "agreed and booked nothing") {
		t.Errorf("after the count %q", msg)
	}

	presence(true)
	b.waitText("#terminals tbody", "online")
	b.click("#stock tbody button")
	b.answerPrompt("12")
	if msg := b.acceptDialog(); strings.Contains(msg, "Not known to be online") {
		t.Errorf("count confirmation with T1 back online: %q", msg)
	}
	b.acceptDialog()
}
