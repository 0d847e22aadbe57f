package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/e2e"
	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
	agentclient "github.com/posgate/posgate/terminal-agent/client"
)

// The prices a till charges, held to the store's catalog, end to end: real store-server,
// terminal-agents, mosquitto (anonymous: any client may publish) and a Redis Sentinel trio.

// sellMilk sells one MILK through the till's API, paid in cash exactly, and returns the
// sale's line price and total, or the error of the step that failed.
func sellMilk(ctx context.Context, c *e2e.Cashier) (unit, total money.Fen, err error) {
	api := c.Client()
	open, err := api.OpenSale(ctx, agentclient.NewKey())
	if err != nil {
		return 0, 0, err
	}
	id := open.Sale.ID
	if _, err := api.AddLine(ctx, agentclient.NewKey(), id, agentclient.AddLineRequest{SKU: "MILK", Qty: 1}); err != nil {
		api.Cancel(ctx, agentclient.NewKey(), id)
		return 0, 0, err
	}
	s, err := api.Sale(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	if _, err := api.Pay(ctx, agentclient.NewKey(), id, agentclient.PayRequest{Method: wire.MethodCash,
		Amount: s.Sale.Total.String()}); err != nil {
		return 0, 0, err
	}
	return s.Sale.Lines[0].UnitPrice, s.Sale.Total, nil
}

// metricsOf reads the store's /metrics.
func metricsOf(t *testing.T, srv *e2e.StoreServer) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.API+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+srv.Opts.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// newMilkPrice imports the e2e catalog with MILK at price.
func newMilkPrice(t *testing.T, srv *e2e.StoreServer, price string) client.ImportAnswer {
	t.Helper()
	csv := strings.Replace(e2eCatalog, "Milk 1L,12.50", "Milk 1L,"+price, 1)
	a, err := srv.Manager().ImportCatalogCSV(context.Background(), strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestOfflinePriceChange: the till is offline; the store raises MILK from 12.50 to 13.80;
// the till sells MILK offline at the 12.50 it holds; back online, the sale is booked as the
// customer paid it (12.50), with a price exception (price_changed, catalog versions 1 and 2)
// in the manager's API, the dashboard and /metrics, which the manager resolves like an oversell.
func TestOfflinePriceChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", []string{"T01"}, "T01")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, srv := e.cashiers["T01"], e.store
	e.proxies["T01"].Cut()
	for st, _ := c.Status(); st.Online; st, _ = c.Status() {
		if ctx.Err() != nil {
			t.Fatal("the till never went offline")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a := newMilkPrice(t, srv, "13.80"); a.Version != 2 {
		t.Fatalf("the new catalog is version %d, want 2", a.Version)
	}
	unit, total, err := sellMilk(ctx, c)
	if err != nil || unit != 1250 || total != 1250 {
		t.Fatalf("offline sale: MILK at %s, total %s, %v; want 12.50 from the till's catalog", unit, total, err)
	}
	e.proxies["T01"].Restore()
	if _, err := c.WaitDrained(ctx); err != nil {
		t.Fatal(err)
	}
	m := srv.Manager()
	xs, err := m.PriceExceptions(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(xs.Prices) != 1 {
		t.Fatalf("price exceptions: %+v, want one", xs.Prices)
	}
	x := xs.Prices[0]
	if x.Terminal != "T01" || x.SKU != "MILK" || x.Code != ledger.CodePriceChanged || x.Qty != 1 || x.SoldPrice != 1250 ||
		x.CatalogPrice != 1380 || x.Difference != 130 || x.SaleVersion != 1 || x.StoreVersion != 2 || x.Resolved {
		t.Fatalf("price exception: %+v; want MILK sold at 12.50 against 13.80, versions 1 and 2", x)
	}
	tot, err := m.Totals(ctx, x.BusinessDate) // the sale's date (the run may have crossed the store's midnight)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Store.Sales != 1 || tot.Store.Amount != 1250 {
		t.Fatalf("the store booked %d sales of %s, want 1 of 12.50 as paid", tot.Store.Sales, tot.Store.Amount)
	}
	if body := metricsOf(t, srv); !strings.Contains(body, `posgate_store_open_exceptions{kind="price"} 1`) {
		t.Errorf("/metrics does not count the open price exception:\n%s", strings.Join(grepLines(body, "open_exceptions"), "\n"))
	}
	dom := browse(t, "http://"+srv.API+"/#token="+srv.Opts.Token)
	if want := `<td>MILK</td><td class="bad">price_changed</td><td class="num">1</td><td class="num">¥12.50</td>` +
		`<td class="num">¥13.80</td><td class="num bad">¥1.30</td><td>1 / 2</td>`; !strings.Contains(dom, want) {
		t.Errorf("the dashboard does not show the price exception (want %s):\n%s", want, dom)
	}
	r, err := m.ResolvePrice(ctx, client.ResolvePriceRequest{Terminal: x.Terminal, Seq: x.Seq, SKU: x.SKU,
		Note: "price raised while T01 was offline"})
	if err != nil || !r.Applied || !r.Price.Resolved {
		t.Fatalf("resolve: %+v, %v", r, err)
	}
	if xs, _ := m.PriceExceptions(ctx, "", false); len(xs.Prices) != 0 {
		t.Errorf("open after the resolution: %+v", xs.Prices)
	}
	if body := metricsOf(t, srv); !strings.Contains(body, `posgate_store_open_exceptions{kind="price"} 0`) {
		t.Errorf("/metrics after the resolution:\n%s", strings.Join(grepLines(body, "open_exceptions"), "\n"))
	}
	e.verify()
}

// forge publishes, from a client of the broker's own (anonymous mosquitto lets anyone
// publish), a retained catalog of version, MILK at 0.01, signed by a key of the forger's.
func forge(t *testing.T, mqttURL string, version int64) {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	c := wire.Catalog{V: wire.Version, Store: "S1", Version: version, Items: []wire.CatalogItem{
		{SKU: "MILK", Barcode: "6901234567890", Name: "Milk 1L", Price: 1}}}
	if err := wire.SignCatalog(&c, key); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cl := paho.NewClient(paho.NewClientOptions().AddBroker(mqttURL).SetClientID("forger"))
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("the forger's connection: %v", tok.Error())
	}
	defer cl.Disconnect(100)
	if tok := cl.Publish(wire.CatalogTopic("S1"), 1, true, body); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("the forged catalog: %v", tok.Error())
	}
}

// startAgent starts a terminal-agent of store S1 with more flags and returns its cashier
// once it holds a catalog.
func startAgent(t *testing.T, e *env, term string, extra ...string) *e2e.Cashier {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "agent-"+term)
	os.MkdirAll(dir, 0o755) // the agent makes it private
	a, err := e2e.StartAgent(context.Background(), binaries(t).TerminalAgent, e2e.AgentOptions{Store: "S1", Terminal: term,
		Broker: e.stack.MQTTURL(), DataDir: dir, TZ: e.tz, Extra: extra})
	if err != nil {
		t.Fatal(err)
	}
	e.agents[term] = a
	c, err := e2e.ReadyCashier(context.Background(), a.API, a.Token, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e.cashiers[term] = c
	return c
}

// TestForgedCatalog: another client of the (anonymous) broker retains a catalog with MILK at
// 0.01 on the store's topic. Neither till takes it, the one given the store's key at
// enrolment (--store-key) nor the one that pinned it from the store's first catalog: each
// counts it, keeps catalog version 1 and sells MILK at 12.50, accepted live.
func TestForgedCatalog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "Asia/Shanghai", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pinned := startAgent(t, e, "T01", "--store-key", filepath.Join(e.store.Opts.DataDir, catalog.PubKeyFile))
	firstUse := startAgent(t, e, "T02")
	forge(t, e.stack.MQTTURL(), 99)
	for name, c := range map[string]*e2e.Cashier{"--store-key": pinned, "first use": firstUse} {
		st, _ := c.Status()
		for st.CatalogsRefused == 0 && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			st, _ = c.Status()
		}
		if st.CatalogsRefused != 1 || st.CatalogVersion != 1 {
			t.Fatalf("%s: %d catalogs refused, holding version %d; want the forgery refused and version 1", name,
				st.CatalogsRefused, st.CatalogVersion)
		}
		unit, total, err := sellMilk(ctx, c)
		if err != nil || unit != 1250 || total != 1250 {
			t.Fatalf("%s: MILK sold at %s (total %s), %v; want 12.50", name, unit, total, err)
		}
		if _, err := c.WaitDrained(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if xs, err := e.store.Manager().PriceExceptions(ctx, "", true); err != nil || len(xs.Prices) != 0 {
		t.Fatalf("price exceptions: %+v, %v; want none", xs.Prices, err)
	}
	e.verify()
}

// TestLiveUnderpricedSale: a till that took a forged catalog (it first met the store's topic
// when only the forgery was on it, and pinned the forger's key) scans MILK at 0.01 live: the
// store refuses it price_mismatch, the till undoes the step and the cashier is told; nothing
// is booked, the refusal is counted, and the store's own catalog (which that till refuses as
// not signed by the key it pinned) is counted as refused there.
func TestLiveUnderpricedSale(t *testing.T) {
	t.Parallel()
	b := binaries(t)
	st := stack.Run(t, stack.Options{Redis: true, Replicas: 2, Sentinels: 3, MQTT: true})
	sdir := filepath.Join(t.TempDir(), "store")
	os.MkdirAll(sdir, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	forge(t, st.MQTTURL(), 1) // before the store has a catalog
	start := time.Now()
	srv, err := e2e.StartStore(ctx, b.StoreServer, e2e.StoreOptions{Store: "S1", DataDir: sdir, TZ: "Asia/Shanghai",
		Sentinels: st.SentinelAddrs(), MasterName: st.MasterName, MQTTURL: st.MQTTURL()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, stack: st, store: srv, agents: map[string]*e2e.Agent{}, cashiers: map[string]*e2e.Cashier{},
		proxies: map[string]*e2e.Proxy{}, tz: "Asia/Shanghai", start: start}
	t.Cleanup(func() {
		for _, a := range e.agents {
			a.Kill()
		}
		srv.Kill()
		if t.Failed() {
			t.Logf("store-server log: %s", tail(srv.Log))
		}
	})
	c := startAgent(t, e, "T01")  // pins the forger's key from the catalog on the topic
	newMilkPrice(t, srv, "12.50") // the store's catalog, signed by its own key
	if _, err := srv.Manager().Adjust(ctx, client.AdjustRequest{ID: "opening-MILK", SKU: "MILK", Delta: 100,
		Reason: client.ReasonOpening}); err != nil {
		t.Fatal(err)
	}
	for s, _ := c.Status(); s.CatalogsRefused == 0; s, _ = c.Status() {
		if ctx.Err() != nil {
			t.Fatalf("the till did not refuse the store's catalog: %+v", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if it, err := c.Client().Status(ctx); err != nil || !it.Online || it.CatalogVersion != 1 {
		t.Fatalf("the till: %+v, %v; want online, holding the forged version 1", it, err)
	}
	_, _, err = sellMilk(ctx, c)
	var refused *agentclient.Error
	if !errors.As(err, &refused) || refused.Code != ledger.CodePriceMismatch {
		t.Fatalf("MILK at 0.01, live: %v; want refused %s", err, ledger.CodePriceMismatch)
	}
	t.Logf("the till answered: %v", err)
	mode, err := srv.Manager().Mode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if mode.Stats.PriceMismatch != 1 || mode.Stats.Accepted != 0 {
		t.Fatalf("store counters: %+v; want one price_mismatch and nothing accepted", mode.Stats)
	}
	if body := metricsOf(t, srv); !strings.Contains(body, "posgate_store_price_mismatch_total 1") {
		t.Errorf("/metrics does not count the refusal:\n%s", strings.Join(grepLines(body, "price_mismatch"), "\n"))
	}
	for _, date := range e.days() {
		tot, err := srv.Manager().Totals(ctx, date)
		if err != nil || tot.Store.Sales != 0 || tot.Store.Amount != 0 {
			t.Fatalf("the store booked %+v on %s (%v); want nothing", tot.Store, date, err)
		}
	}
}
