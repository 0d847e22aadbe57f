package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/catalog"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestDelistedSKUCorrected: the manager removed a SKU from the catalog while a till was
// offline; the till's offline sale of it is recorded and flagged as an oversell, and the
// manager corrects the stock with an adjustment and a shelf count. Both were refused
// (unknown_sku): only a SKU the catalog sells now could be adjusted or counted, and the
// oversold stock stayed negative for good.
func TestDelistedSKUCorrected(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.importCSV(t, []byte(biCatalogCSV))
	srv.adjust(t, "opening-D4", "D4", 2, ledger.ReasonOpening)
	// The manager delists D4 (T1 is offline, it still has the old catalog).
	srv.importCSV(t, []byte("sku,name,price\nA1,Apple,3.50\nB2,Bread,12.00\nC3,Cola,2.75\n"))
	r := biStartRun(t, srv)
	// T1 comes back: five of D4 sold offline, two in stock.
	sellD4Offline(t, r, "offline sale of a delisted SKU")
	// The store's stock of D4 is -3; the three came from the back room. Adjust, as the docs say.
	c, ctx := srv.manager(), context.Background()
	if _, err := c.Adjust(ctx, client.AdjustRequest{ID: "found-D4", SKU: "D4", Delta: 3, Reason: client.ReasonAdjust}); err != nil {
		t.Errorf("adjust of the oversold, delisted D4: %v", err)
	}
	zero := int64(0)
	if _, err := c.Count(ctx, client.CountRequest{ID: "count-D4", SKU: "D4", Counted: &zero}); err != nil {
		t.Errorf("shelf count of the oversold, delisted D4: %v", err)
	}
	if row := srv.stock(t)["D4"]; row.Ledger != 0 {
		t.Errorf("D4 after the adjustment and the count of 0: ledger %d, want 0", row.Ledger)
	}
	_, err := c.Adjust(ctx, client.AdjustRequest{ID: "never", SKU: "Z9", Delta: 3, Reason: client.ReasonAdjust})
	if e := (*client.Error)(nil); !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Code != ingest.CodeUnknownSKU {
		t.Errorf("adjust of a SKU never in the catalog: %v, want 404 unknown_sku", err)
	}
}

// TestExceptionListsRefuseBadDate: an oversell exists for today, and a manager asks for the
// day's exceptions with a date that is not YYYY-MM-DD. The lists answer business_date_invalid,
// as /v1/totals does; they answered 200 with nothing, as if the day had no exceptions.
func TestExceptionListsRefuseBadDate(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.importCSV(t, []byte(biCatalogCSV))
	srv.adjust(t, "opening-D4", "D4", 2, ledger.ReasonOpening)
	r := biStartRun(t, srv)
	r.bus.publish(t, "T1", biMarshal(t, r.seal(wire.KindSale, "T1", 1, biMarshal(t, biGoodSale("T1-1", 2)))))
	if d, ok := r.bus.next("T1", biAckWait); !ok || d.err != nil {
		t.Fatalf("no ack")
	}
	// today's date with the month's first digit dropped (2026-1-30), with a trailing space, a word
	for _, bad := range []string{r.date[:5] + r.date[6:], r.date + " ", "today"} {
		srv.problem(t, "totals "+bad, "GET", "/v1/totals?date="+url.QueryEscape(bad), biToken, "", nil, http.StatusBadRequest, "business_date_invalid")
		srv.problem(t, "oversells "+bad, "GET", "/v1/oversells?date="+url.QueryEscape(bad), biToken, "", nil, http.StatusBadRequest, "business_date_invalid")
		srv.problem(t, "refund-exceptions "+bad, "GET", "/v1/refund-exceptions?date="+url.QueryEscape(bad), biToken, "", nil, http.StatusBadRequest, "business_date_invalid")
	}
}

// catalogHeartbeat has terminal T1 send its heartbeat seq reporting catalog version held,
// and waits for the store to accept it.
func catalogHeartbeat(t *testing.T, r *biRun, seq, held int64) {
	t.Helper()
	p := wire.HeartbeatPayload{CatalogVersion: held}
	r.bus.publish(t, "T1", biMarshal(t, r.seal(wire.KindHeartbeat, "T1", seq, biMarshal(t, p))))
	if d, ok := r.bus.next("T1", biAckWait); !ok || d.err != nil || d.acks.Acks[0].Status != wire.AckAccepted {
		t.Fatalf("heartbeat answered %s (%v)", d.raw, d.err)
	}
}

// TestCatalogVersionAboveTheTerminals: a terminal reports holding catalog version 7 while the
// store's is 1 (its data directory was restored from an older backup): /v1/terminals says
// the terminal is ahead, and the next import takes version 8. It took version 2, which every
// terminal ignored (they keep the highest version they have seen), selling on at old prices.
func TestCatalogVersionAboveTheTerminals(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	imp := srv.importCSV(t, []byte(biCatalogCSV))
	r := biStartRun(t, srv)
	catalogHeartbeat(t, r, 1, 7)
	var terms client.TerminalsAnswer
	srv.mustJSON(t, "GET", "/v1/terminals", nil, &terms)
	i := slices.IndexFunc(terms.Terminals, func(r client.TerminalRow) bool { return r.Terminal == "T1" })
	if i < 0 || !terms.Terminals[i].CatalogAhead || terms.Terminals[i].CatalogBehind {
		t.Fatalf("a terminal holding version 7 of a store at version %d: %+v", terms.CatalogVersion, terms.Terminals)
	}
	imp = srv.importCSV(t, []byte(biCatalogCSV+"E5,Eggs,1.20\n"))
	if imp.Version != 8 {
		t.Fatalf("import after a terminal reported version 7: version %d, want 8", imp.Version)
	}
}

// TestStartsWithACatalogFileItRefuses: a store has a catalog the manager imported through
// the API, and its store-server is started with --catalog items.json, one of whose items
// has no price. It refuses the file and starts on the store's catalog: it stopped, and the
// store had no store-server at all.
func TestStartsWithACatalogFileItRefuses(t *testing.T) {
	t.Parallel()
	s := stack.Run(t, stack.Options{Redis: true, MQTT: true})
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "items.json")
	if err := os.WriteFile(file, []byte(`[{"sku":"A1","name":"Apple","price":"3.50"},{"sku":"BAG","name":"Bag"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The manager's import, in the data directory.
	cat, err := catalog.Open(catalog.DefaultPath(dir), biStoreID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Replace([]wire.CatalogItem{{SKU: "A1", Name: "Apple", Price: 350}, {SKU: "BAG", Name: "Bag", Price: 20}}, nil); err != nil {
		t.Fatal(err)
	}
	startMain(t, "--store", biStoreID, "--data-dir", dir, "--redis-addr", s.Redis[0].Addr(),
		"--mqtt-url", s.MQTTURL(), "--api-listen", "127.0.0.1:0", "--api-token-file", secretFile(t, biToken), "--tz", biTZ,
		"--log-level", "error", "--catalog", file)
}

// TestCatalogAfterABrokerRestart: mosquitto restarts without persistence (its default) and
// loses the retained catalog. The store-server publishes it again when it reconnects, so a
// till that subscribes afterwards (a new one, or one reinstalled) still gets it. It was
// published only at the store-server's start and at an import.
func TestCatalogAfterABrokerRestart(t *testing.T) {
	t.Parallel()
	s := stack.Run(t, stack.Options{Redis: true, MQTT: true, MosquittoExtra: "persistence false\n"})
	dir := t.TempDir()
	file := filepath.Join(dir, "catalog.csv")
	if err := os.WriteFile(file, []byte(biCatalogCSV), 0o644); err != nil {
		t.Fatal(err)
	}
	startMain(t, "--store", biStoreID, "--data-dir", filepath.Join(dir, "data"),
		"--redis-addr", s.Redis[0].Addr(), "--mqtt-url", s.MQTTURL(), "--api-listen", "127.0.0.1:0",
		"--api-token-file", secretFile(t, biToken), "--tz", biTZ, "--log-level", "error", "--catalog", file)
	if err := s.Mosquitto.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Mosquitto.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan wire.Catalog, 1)
	sub := paho.NewClient(paho.NewClientOptions().AddBroker(s.MQTTURL()).SetClientID("new-till").
		SetConnectRetry(true).SetConnectRetryInterval(100 * time.Millisecond))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer sub.Disconnect(50)
	deadline := time.Now().Add(15 * time.Second)
	for {
		tok := sub.Subscribe(wire.CatalogTopic(biStoreID), 1, func(_ paho.Client, msg paho.Message) {
			if c, err := wire.DecodeCatalog(msg.Payload()); err == nil {
				select {
				case got <- c:
				default:
				}
			}
		})
		tok.WaitTimeout(5 * time.Second)
		select {
		case c := <-got:
			if c.Version != 1 || len(c.Items) == 0 {
				t.Fatalf("retained catalog after the broker's restart: %+v", c)
			}
			return
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no retained catalog on the broker 15 s after its restart")
		}
		sub.Unsubscribe(wire.CatalogTopic(biStoreID)).WaitTimeout(5 * time.Second)
	}
}

// TestCatalogFloorBogusHeartbeat: a heartbeat (a faulty or hostile terminal) reporting
// catalog version MaxInt64-1 does not lift the next import's version. It made the import take
// MaxInt64, and every import after it overflowed to a negative version and was refused.
func TestCatalogFloorBogusHeartbeat(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	imp := srv.importCSV(t, []byte(biCatalogCSV))
	r := biStartRun(t, srv)
	catalogHeartbeat(t, r, 1, math.MaxInt64-1)
	imp = srv.importCSV(t, []byte(biCatalogCSV+"E5,Eggs,1.20\n"))
	if imp.Version != 2 {
		t.Errorf("import after a heartbeat of MaxInt64-1: version %d, want 2", imp.Version)
	}
	// The terminal comes to its senses: an honest heartbeat.
	catalogHeartbeat(t, r, 2, imp.Version)
	status, _, b := srv.do(t, "POST", "/v1/catalog", biToken, "text/csv", []byte(biCatalogCSV+"E5,Eggs,1.30\n"))
	if status != 200 {
		t.Fatalf("the manager's next import (a price change) is refused for good: status %d: %s", status, b)
	}
}

// TestCatalogCaughtUpWithTheTerminals: a terminal reports holding catalog version 7 while the
// store's is 1 (its data directory restored from an older backup). The store issues its own
// catalog again, above 7, without anyone importing: the terminals ignored the store's
// catalog, and sold at the old prices, until the manager imported again.
func TestCatalogCaughtUpWithTheTerminals(t *testing.T) {
	t.Parallel()
	srv := biRunTuned(t, func(m *Main) { m.catalogCheckEvery = 100 * time.Millisecond })
	srv.importCSV(t, []byte(biCatalogCSV))
	r := biStartRun(t, srv)
	catalogHeartbeat(t, r, 1, 7)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var c wire.Catalog
		srv.mustJSON(t, "GET", "/v1/catalog", nil, &c)
		if c.Version == 8 && len(c.Items) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store's catalog is version %d 10 s after a terminal reported holding 7", c.Version)
		}
	}
}

// TestCatchUpDuringAnImport: while terminals report a catalog version above the store's,
// the manager imports, and the catching up runs meanwhile: the manager's import stands. The
// catching up read the current catalog before taking the import lock, and an import running
// between the read and its issue was overwritten with the items it replaced (the terminals
// took the old prices). Timing-dependent: it failed at the 9th round once, not at all once,
// before the fix.
func TestCatchUpDuringAnImport(t *testing.T) {
	t.Parallel()
	srv := biRunTuned(t, func(m *Main) { m.catalogCheckEvery, m.catalogCatchUpGap = time.Millisecond, 0 })
	csv := func(price int) []byte {
		var b strings.Builder
		b.WriteString("sku,name,price\n")
		fmt.Fprintf(&b, "A1,Apple,3.%02d\n", price)
		for i := 0; i < 10000; i++ { // a store-sized catalog: the import takes a while
			fmt.Fprintf(&b, "X%05d,Item number %d with a long enough name,1.00\n", i, i)
		}
		return []byte(b.String())
	}
	srv.importCSV(t, csv(0))
	r := biStartRun(t, srv)
	for i := 1; i <= 10; i++ {
		var c wire.Catalog
		srv.mustJSON(t, "GET", "/v1/catalog", nil, &c)
		done := make(chan client.ImportAnswer, 1)
		go func() { done <- srv.importCSV(t, csv(i)) }()
		time.Sleep(time.Duration(i%10) * 3 * time.Millisecond)
		// A terminal reports a version above the store's (its data restored from a backup).
		catalogHeartbeat(t, r, int64(i), c.Version+100)
		imp := <-done
		time.Sleep(300 * time.Millisecond) // the catch-up settles
		srv.mustJSON(t, "GET", "/v1/catalog", nil, &c)
		var apple int64 = -1
		for _, it := range c.Items {
			if it.SKU == "A1" {
				apple = int64(it.Price)
			}
		}
		if want := int64(300 + i); apple != want {
			t.Fatalf("iteration %d: the manager imported Apple at %d fen (answered version %d); "+
				"the store's catalog is now version %d with Apple at %d fen: the import was reverted",
				i, want, imp.Version, c.Version, apple)
		}
	}
}
