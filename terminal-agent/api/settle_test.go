//go:build unix

package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/storesim"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
)

// TestPaymentWaitsForAScanVerdict: the POS app takes the payment while the last scan still
// waits for the store's live verdict, and the store then refuses the scan. The payment waits
// for that verdict and is taken on the sale without the refused line: the sale the till shows
// is the sale the store records. The payment was taken at once on both lines, the refusal
// then removed a line from the completed sale, and the store recorded the sale with it:
// the till's day total and the store's differed by the line.
func TestPaymentWaitsForAScanVerdict(t *testing.T) {
	s, r := startStore(t, storesim.Options{AckDelay: 300 * time.Millisecond,
		Decide: func(env wire.Envelope, live bool) *wire.Ack {
			if env.Kind == wire.KindScan && live && bytes.Contains(env.Payload, []byte(`"qty":7`)) {
				return &wire.Ack{Status: wire.AckRejected, Code: "out_of_stock", Message: "only 3 left"}
			}
			return nil
		}})
	a, _, _ := startAgent(t, s.MQTTURL(), filepath.Join(t.TempDir(), "outbox.db"), agentOpts{verdictTimeout: 2 * time.Second})
	id := a.openSale()
	a.addLine(id, "MILK", 1)

	scanned := make(chan resp, 1)
	go func() { scanned <- a.do("POST", "/v1/sales/"+id+"/lines", `{"sku":"MILK","qty":7}`) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if seqs, err := a.store.Undecided(context.Background(), id); err == nil && len(seqs) == 1 {
			break // the scan is committed and waits for its verdict
		}
		if time.Now().After(deadline) {
			t.Fatal("the second scan never waited for its verdict")
		}
	}
	paid := a.do("POST", "/v1/sales/"+id+"/payments", `{"method":"cash","amount":"100.00"}`)
	scan := <-scanned
	if scan.Status != 409 || scan.code(t) != "out_of_stock" {
		t.Fatalf("the refused scan was answered %d %s", scan.Status, scan.Body)
	}
	if paid.Status != 200 {
		t.Fatalf("payment answered %d %s", paid.Status, paid.Body)
	}
	var till client.SaleAnswer
	paid.json(t, &till)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recorded *wire.SalePayload
	for recorded == nil {
		for _, env := range r.Accepted("T1") {
			if env.Kind == wire.KindSale {
				recorded = new(wire.SalePayload)
				if err := json.Unmarshal(env.Payload, recorded); err != nil {
					t.Fatal(err)
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("the store never recorded the sale")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if till.Sale.State != "completed" || till.Sale.Total != recorded.Total || len(recorded.Lines) != 1 {
		t.Fatalf("the till shows the sale %s with a total of %s; the store recorded %d lines, total %s",
			till.Sale.State, till.Sale.Total, len(recorded.Lines), recorded.Total)
	}
}
