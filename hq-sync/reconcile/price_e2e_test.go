package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/serve"
	"github.com/posgate/posgate/hq-sync/upload"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestPriceExceptionListedEndToEnd: an offline sale the store booked at the till's price,
// 12.50 against the catalog's 13.80, goes to HQ with its price exception (store ledger,
// hq-sync upload, serve on the SQLite engine), which reconcile lists open; once the store's
// manager resolves it, the next upload carries the resolution and reconcile shows it.
func TestPriceExceptionListedEndToEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := ledger.Open(ctx, filepath.Join(dir, "ledger.db"), "S1", shanghai)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &e2eStore{tb: t, l: l, path: filepath.Join(dir, "ledger.db"), seq: map[string]int64{}}
	day := time.Date(2025, 3, 1, 9, 0, 0, 0, shanghai)
	p := &wire.SalePayload{SaleID: "T1-1", OpenedAt: day, Total: 1250, CatalogVersion: 1,
		Lines:    []wire.Line{{Line: 1, SKU: "MILK", Qty: 1, UnitPrice: 1250, Amount: 1250}},
		Payments: []wire.Payment{{Method: wire.MethodCash, Amount: 1250}}}
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	r := ledger.Record{Terminal: "T1", Seq: 1, Kind: wire.KindSale, At: day, Payload: body, Status: wire.AckAccepted,
		Final: true, Offline: true, Hash: wire.Hash(wire.KindSale, "S1", "T1", 1, day, body), FlowNo: 1, Sale: p,
		Prices: []ledger.PriceException{{SKU: "MILK", Code: ledger.CodePriceChanged, Qty: 1, SoldPrice: 1250,
			CatalogPrice: 1380, Difference: 130, SaleVersion: 1, StoreVersion: 2}}}
	if out, err := l.Commit(ctx, []ledger.Record{r}); err != nil || out[0].Status != wire.AckAccepted {
		t.Fatalf("commit the offline sale: %+v, %v", out, err)
	}
	s.seq["T1"], s.flow = 1, 1
	s.dayClose("T1", date, day.Add(10*time.Hour))

	st, _ := MustOpenHQ(t)
	srv := httptest.NewServer(serve.New(st, map[string][]byte{"S1": e2eSecret}, serve.Options{
		Now: func() time.Time { return time.Date(2025, 3, 2, 1, 0, 0, 0, time.UTC) }, MaxClockSkew: 24 * time.Hour}))
	defer srv.Close()
	u, err := upload.New(ctx, upload.Config{LedgerPath: s.path, StatePath: filepath.Join(dir, "upload.db"),
		Store: "S1", Location: shanghai, Secret: e2eSecret, HQURL: srv.URL + serve.BatchesPath,
		Now: func() time.Time { return time.Date(2025, 3, 2, 9, 0, 0, 0, shanghai) }})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	send := func() {
		t.Helper()
		for range 3 {
			if err := u.Once(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	listed := func(what string) (*StoreException, string) {
		t.Helper()
		rep := MustRun(t, st, "")
		var table bytes.Buffer
		rep.WriteTable(&table)
		for i := range rep.Exceptions {
			if rep.Exceptions[i].Kind == hqwire.ExceptionPrice {
				return &rep.Exceptions[i], table.String()
			}
		}
		t.Fatalf("%s: the reconciliation lists no price exception:\n%s", what, table.String())
		return nil, ""
	}

	send()
	x, table := listed("flagged")
	if x.Store != "S1" || x.Terminal != "T1" || x.Seq != 1 || x.SKU != "MILK" || x.Code != ledger.CodePriceChanged ||
		x.BusinessDate != date || x.Resolved || !strings.HasPrefix(x.Detail, "1 sold at 12.50, catalog 13.80 (difference 1.30)") {
		t.Errorf("the price exception listed: %+v", *x)
	}
	if !strings.Contains(squeeze(table), "price  S1  T1  1  MILK  price_changed  -  open  1 sold at 12.50") {
		t.Errorf("the table lacks the price exception:\n%s", table)
	}
	t.Logf("\n%s", table)

	if _, _, err := l.ResolvePrice(ctx, "T1", 1, "MILK", "price raised while T1 was offline"); err != nil {
		t.Fatal(err)
	}
	send()
	if x, table := listed("resolved"); !x.Resolved || x.Resolution != "price raised while T1 was offline" {
		t.Errorf("after the store's resolution: %+v\n%s", *x, table)
	}
}
