package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/posgate/posgate/store-server/client"
)

// A delivery of milk booked, then the day's totals checked against what each till declared,
// as a back-office program runs it (docs/store-server.md, "Go client").
func Example() {
	c := &client.Client{BaseURL: client.DefaultBaseURL, Token: "manager-token",
		HTTPClient: &http.Client{Timeout: 10 * time.Second}}
	ctx := context.Background()
	adj, err := c.Adjust(ctx, client.AdjustRequest{ID: "delivery-2026-11-29-MILK", SKU: "MILK", Delta: 24})
	var refused *client.Error
	switch {
	case errors.As(err, &refused):
		fmt.Println("refused:", refused.Code, refused.Message) // nothing was booked
		return
	case err != nil:
		// No answer: the delivery may have been booked. Send it again with the same ID.
		return
	}
	fmt.Println("MILK in stock:", adj.Qty)
	tot, err := c.Totals(ctx, "2026-11-29")
	if err != nil {
		return
	}
	for _, t := range tot.Terminals {
		if t.DeclaredOK != nil && !*t.DeclaredOK {
			fmt.Println("till", t.Terminal, "declared", t.Declared.Amount, "the ledger has", t.Ledger.Amount)
		}
	}
}
