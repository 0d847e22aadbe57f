package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/posgate/posgate/terminal-agent/client"
)

// A sale of two bottles of milk paid in cash, as a POS app runs it (docs/terminal-api.md,
// "Go client").
func Example() {
	token, err := client.ReadToken("/var/lib/posgate/api-token") // the agent's <data-dir>/api-token
	if err != nil {
		return // the POS app cannot reach the agent without it
	}
	c := &client.Client{BaseURL: client.DefaultBaseURL, HTTPClient: &http.Client{Timeout: 5 * time.Second}, Token: token}
	ctx := context.Background()
	open, err := c.OpenSale(ctx, client.NewKey())
	if err != nil {
		return // a POS app shows it, or sends the request again with the same key
	}
	id := open.Sale.ID
	if _, err := c.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{SKU: "MILK", Qty: 2}); err != nil {
		return
	}
	key := client.NewKey() // kept until the payment is answered
	paid, err := c.Pay(ctx, key, id, client.PayRequest{Method: "cash", Amount: "30.00"})
	var refused *client.Error
	switch {
	case errors.As(err, &refused):
		fmt.Println("refused:", refused.Code, refused.Message) // nothing was taken
	case err != nil:
		// No answer: the payment may have been taken. Send it again with the same key.
		paid, err = c.Pay(ctx, key, id, client.PayRequest{Method: "cash", Amount: "30.00"})
	}
	if err == nil {
		fmt.Println("change:", paid.Sale.Change)
	}
}
