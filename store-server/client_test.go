package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestClient drives every method of store-server/client against a real store-server (Redis
// behind Sentinel, its embedded broker, its ledger): a catalog imported both ways, opening
// stock and a shelf count, limits and a promo; a terminal's offline sale beyond stock, a
// refund of a sale the store never had and a sale sent again with other content, each
// listed and resolved; the terminals, the day's totals and a backup. Requests the store
// refuses are *client.Error with its status and code.
func TestClient(t *testing.T) {
	t.Parallel()
	s := stack.Run(t, stack.Options{Redis: true, Replicas: 1, Sentinels: 3})
	addrs, _ := startMain(t, "--store", biStoreID, "--data-dir", t.TempDir(),
		"--redis-sentinels", strings.Join(s.SentinelAddrs(), ","), "--redis-master", s.MasterName,
		"--mqtt-listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0", "--api-token-file", secretFile(t, biToken), "--tz", biTZ,
		"--log-level", "error")
	srv := &biServer{Base: "http://" + addrs.API, Broker: addrs.Broker, Client: &http.Client{Timeout: 10 * time.Second}}
	srv.waitMode(t, client.ModeRedis, 20*time.Second)
	c := srv.manager()
	ctx := context.Background()

	if h := must[client.HealthAnswer](t, "health")(c.Health(ctx)); !h.OK || h.Mode != client.ModeRedis {
		t.Fatalf("health: %+v", h)
	}
	imp := must[client.ImportAnswer](t, "import a CSV catalog")(c.ImportCatalogCSV(ctx, strings.NewReader(biCatalogCSV)))
	if imp.Version != 1 || imp.Items != 4 || !imp.Published {
		t.Fatalf("CSV import: %+v", imp)
	}
	items := []wire.CatalogItem{{SKU: "A1", Barcode: "690001", Name: "Apple", Price: 350}, {SKU: "B2", Name: "Bread", Price: 1200},
		{SKU: "C3", Name: "Cola", Price: 275}, {SKU: "D4", Name: "Dates", Price: 99}}
	if imp = must[client.ImportAnswer](t, "import items")(c.ImportCatalog(ctx, items)); imp.Version != 2 || imp.Items != 4 {
		t.Fatalf("items import: %+v", imp)
	}
	cat := must[wire.Catalog](t, "catalog")(c.Catalog(ctx))
	if cat.Version != 2 || cat.Store != biStoreID || !reflect.DeepEqual(cat.Items, items) {
		t.Fatalf("catalog: %+v", cat)
	}

	for _, a := range []client.AdjustRequest{
		{ID: "opening-A1", SKU: "A1", Delta: 100, Reason: client.ReasonOpening},
		{ID: "opening-D4", SKU: "D4", Delta: 2, Reason: client.ReasonOpening},
	} {
		if got := must[client.AdjustAnswer](t, "adjust")(c.Adjust(ctx, a)); got.SKU != a.SKU || got.Qty != a.Delta || !got.Applied {
			t.Fatalf("adjust %+v: %+v", a, got)
		}
	}
	five := int64(5)
	cnt := must[client.CountAnswer](t, "count")(c.Count(ctx, client.CountRequest{ID: "count-C3", SKU: "C3", Counted: &five}))
	if cnt.Delta != 5 || cnt.Qty != 5 || !cnt.Applied {
		t.Fatalf("count of 5 C3 on an empty shelf: %+v", cnt)
	}
	st := must[client.StockAnswer](t, "stock")(c.Stock(ctx, true))
	if st.Mode != client.ModeRedis || len(st.Stock) != 3 || st.Stock[0].SKU != "A1" || st.Stock[0].Ledger != 100 ||
		st.Stock[0].Proven == nil || *st.Stock[0].Proven != 100 || st.Stock[0].Redis == nil || *st.Stock[0].Redis != 100 {
		t.Fatalf("stock: %+v", st)
	}
	quick := must[client.StockAnswer](t, "stock without proof")(c.Stock(ctx, false))
	if len(quick.Stock) != 3 || quick.Stock[0].Proven != nil {
		t.Fatalf("stock without proof: %+v", quick)
	}

	if l := must[client.LimitsAnswer](t, "limits")(c.Limits(ctx)); l.Limits.WindowMs != 1000 || l.PromoPercent != 100 {
		t.Fatalf("limits of a new store: %+v", l)
	}
	set := client.Limits{WindowMs: 2000, Store: 500, Terminal: 50, Scan: 10, Pay: 4, Refund: 2}
	if l := must[client.LimitsAnswer](t, "set limits")(c.SetLimits(ctx, set)); l.Limits != set {
		t.Fatalf("set limits: %+v, want %+v", l, set)
	}
	promo := must[client.LimitsAnswer](t, "promo")(c.SetPromo(ctx, client.PromoRequest{Percent: 200, For: "1h"}))
	if promo.PromoPercent != 200 || promo.PromoExpiresInMs <= 0 || promo.Limits != set {
		t.Fatalf("promo: %+v", promo)
	}

	// A terminal's events: T1:1 five D4 sold offline with two in stock, T1:2 a refund of a
	// sale the store never had, and T1:1 again with other content, which is parked.
	r := biStartRun(t, srv)
	sellD4Offline(t, r, "an offline sale beyond stock")
	unknown := &wire.RefundPayload{RefundID: "T1-refund-2", SaleID: "T9-77", SaleSeq: 77,
		Lines: []wire.RefundLine{{Line: 1, SKU: "A1", Qty: 1, Amount: 350}}, Amount: 350, Method: wire.MethodCash}
	for _, ev := range []struct {
		seq     int64
		kind    wire.Kind
		payload any
		status  wire.AckStatus
	}{
		{2, wire.KindRefund, unknown, wire.AckAccepted},
		{1, wire.KindSale, biGoodSale("T1-1-again", 0), wire.AckConflict},
	} {
		r.bus.publish(t, "T1", biMarshal(t, r.seal(ev.kind, "T1", ev.seq, biMarshal(t, ev.payload))))
		if d, ok := r.bus.next("T1", biAckWait); !ok || d.err != nil || len(d.acks.Acks) != 1 || d.acks.Acks[0].Status != ev.status {
			t.Fatalf("T1:%d answered %s (%v), want %s", ev.seq, d.raw, d.err, ev.status)
		}
	}

	ov := must[client.OversellsAnswer](t, "oversells")(c.Oversells(ctx, "", false))
	if len(ov.Oversells) != 1 || ov.Oversells[0].Terminal != "T1" || ov.Oversells[0].Seq != 1 || ov.Oversells[0].SKU != "D4" ||
		ov.Oversells[0].Short != 3 {
		t.Fatalf("oversells: %+v", ov)
	}
	ro := must[client.ResolveOversellAnswer](t, "resolve the oversell")(c.ResolveOversell(ctx,
		client.ResolveOversellRequest{Terminal: "T1", Seq: 1, SKU: "D4", Note: "3 found in the back room"}))
	if !ro.Applied || !ro.Oversell.Resolved || ro.Oversell.Resolution != "3 found in the back room" {
		t.Fatalf("resolve the oversell: %+v", ro)
	}
	ov = must[client.OversellsAnswer](t, "all oversells")(c.Oversells(ctx, r.date, true))
	if len(ov.Oversells) != 1 || !ov.Oversells[0].Resolved {
		t.Fatalf("all oversells of %s: %+v", r.date, ov)
	}

	rx := must[client.RefundExceptionsAnswer](t, "refund exceptions")(c.RefundExceptions(ctx, "", false))
	if len(rx.RefundExceptions) != 1 || rx.RefundExceptions[0].Seq != 2 ||
		rx.RefundExceptions[0].Code != ledger.CodeRefundSaleUnknown {
		t.Fatalf("refund exceptions: %+v", rx)
	}
	rr := must[client.ResolveRefundAnswer](t, "resolve the refund exception")(c.ResolveRefundException(ctx,
		client.ResolveRefundRequest{Terminal: "T1", Seq: 2, Note: "refund of another store's sale"}))
	if !rr.Applied || !rr.RefundException.Resolved {
		t.Fatalf("resolve the refund exception: %+v", rr)
	}
	rx = must[client.RefundExceptionsAnswer](t, "all refund exceptions")(c.RefundExceptions(ctx, r.date, true))
	if len(rx.RefundExceptions) != 1 || !rx.RefundExceptions[0].Resolved {
		t.Fatalf("all refund exceptions of %s: %+v", r.date, rx)
	}

	pk := must[client.ParkedAnswer](t, "parked")(c.Parked(ctx, false))
	if pk.Open != 1 || len(pk.Parked) != 1 || pk.Parked[0].Terminal != "T1" || pk.Parked[0].Seq != 1 ||
		pk.Parked[0].Code != ledger.CodeIdempotencyConflict || pk.Parked[0].Kind != wire.KindSale {
		t.Fatalf("parked: %+v", pk)
	}
	rp := must[client.ResolveParkedAnswer](t, "resolve the parked event")(c.ResolveParked(ctx, client.ResolveParkedRequest{
		Terminal: "T1", Seq: 1, Hash: pk.Parked[0].Hash, Note: "rung up twice; the customer paid once"}))
	if !rp.Applied || !rp.Parked.Resolved {
		t.Fatalf("resolve the parked event: %+v", rp)
	}
	pk = must[client.ParkedAnswer](t, "all parked")(c.Parked(ctx, true))
	if pk.Open != 0 || len(pk.Parked) != 1 || !pk.Parked[0].Resolved {
		t.Fatalf("all parked: %+v", pk)
	}

	terms := must[client.TerminalsAnswer](t, "terminals")(c.Terminals(ctx))
	if hq := must[client.HQAnswer](t, "hq")(c.HQ(ctx)); hq.Found || hq.State == "" {
		t.Errorf("GET /v1/hq before any upload: %+v, want the state file named and not found", hq)
	}
	var t1 *client.TerminalRow
	for i := range terms.Terminals {
		if terms.Terminals[i].Terminal == "T1" {
			t1 = &terms.Terminals[i]
		}
	}
	if terms.CatalogVersion != 2 || t1 == nil || t1.LastSeq != 2 || t1.LastKind != wire.KindRefund || t1.Parked != 0 {
		t.Fatalf("terminals: %+v", terms)
	}
	tot := must[client.TotalsAnswer](t, "totals")(c.Totals(ctx, r.date))
	if tot.BusinessDate != r.date || tot.Store.Sales != 1 || tot.Store.Amount != 495 || tot.Store.Refunds != 1 ||
		len(tot.Terminals) < 1 || tot.Terminals[0].Terminal != "T1" || tot.Terminals[0].Redis == nil || tot.Terminals[0].RedisDiff {
		t.Fatalf("totals of %s: %+v", r.date, tot)
	}
	if m := must[client.ModeAnswer](t, "mode")(c.Mode(ctx)); m.Store != biStoreID || m.Mode != client.ModeRedis ||
		m.Stats.Accepted < 2 || m.Disk == nil || m.Disk.LedgerBytes <= 0 {
		t.Fatalf("mode: %+v", m)
	}

	backup := must[io.ReadCloser](t, "backup")(c.Backup(ctx))
	tr := tar.NewReader(backup)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("backup: %v", err)
		}
		names = append(names, h.Name)
	}
	backup.Close()
	if len(names) == 0 || names[0] != ledger.FileName {
		t.Fatalf("backup holds %v, want the ledger first", names)
	}

	for _, x := range []struct {
		name   string
		call   func() error
		status int
		code   string
	}{
		{"unknown sku", func() error {
			_, err := c.Adjust(ctx, client.AdjustRequest{ID: "x-1", SKU: "ZZ", Delta: 1})
			return err
		}, http.StatusNotFound, ingest.CodeUnknownSKU},
		{"same id, other delta", func() error {
			_, err := c.Adjust(ctx, client.AdjustRequest{ID: "opening-A1", SKU: "A1", Delta: 99, Reason: client.ReasonOpening})
			return err
		}, http.StatusUnprocessableEntity, ledger.CodeAdjustmentConflict},
		{"resolution without a note", func() error {
			_, err := c.ResolveOversell(ctx, client.ResolveOversellRequest{Terminal: "T1", Seq: 1, SKU: "D4"})
			return err
		}, http.StatusBadRequest, ledger.CodeResolutionRequired},
		{"bad date", func() error { _, err := c.Totals(ctx, "29.11.2026"); return err }, http.StatusBadRequest, "business_date_invalid"},
		{"promo too high", func() error {
			_, err := c.SetPromo(ctx, client.PromoRequest{Percent: 5000})
			return err
		}, http.StatusBadRequest, "promo_percent_invalid"},
		{"wrong token", func() error {
			_, err := (&client.Client{BaseURL: srv.Base, Token: "nope"}).Stock(ctx, false)
			return err
		}, http.StatusUnauthorized, "unauthorized"},
		{"wrong token, backup", func() error {
			_, err := (&client.Client{BaseURL: srv.Base}).Backup(ctx)
			return err
		}, http.StatusUnauthorized, "unauthorized"},
	} {
		t.Run(x.name, func(t *testing.T) {
			err := x.call()
			var e *client.Error
			if !errors.As(err, &e) || e.Status != x.status || e.Code != x.code || e.Message == "" {
				t.Fatalf("%v (%T), want a *client.Error %d %s with a message", err, err, x.status, x.code)
			}
		})
	}
	if a := must[client.AdjustAnswer](t, "adjust after the refusals")(c.Adjust(ctx, client.AdjustRequest{ID: "opening-A1",
		SKU: "A1", Delta: 100, Reason: client.ReasonOpening})); a.Applied || a.Qty != 100 {
		t.Fatalf("the refusals changed A1: %+v", a)
	}
}
