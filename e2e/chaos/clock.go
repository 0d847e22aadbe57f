package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/posgate/posgate/internal/clock"
	"github.com/posgate/posgate/internal/wire"
	storeclient "github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/terminal-agent/client"
)

// drawClockStep draws a till's clock step: minutes, or a day and more in hours and minutes,
// forward or back (so that a step crosses midnight as often as not).
func drawClockStep(r *rand.Rand) time.Duration {
	d := time.Duration(1+r.IntN(59)) * time.Minute
	if r.IntN(2) == 0 {
		d += time.Duration(1+r.IntN(30)) * time.Hour
	}
	if r.IntN(2) == 0 {
		d = -d
	}
	return d
}

// skewLimit is the store-server's --clock-skew-warn (its default).
const skewLimit = 2 * time.Minute

// clockStep steps one till's clock (its --clock-offset-file) while the cashiers sell, holds
// it, and sets it right. With the clock stepped, and again once it is set right, the till
// must sell a card sale (live: it never refuses to sell for its clock); a till stepped
// ahead past the store's limit must be flagged by the store at once (one stepped back is
// flagged only after the store's confirmation time, longer than the hold). The business
// dates its clock gave are added to those the checks read (Dates).
func (c *Cluster) clockStep(ctx context.Context, st Step) (string, error) {
	t := c.Terminals[st.Target%len(c.Terminals)]
	path := c.ClockFiles[t]
	before := c.Cashiers[t].Codes()
	if err := clock.WriteOffset(path, st.Clock); err != nil {
		return "", err
	}
	c.noteDate(st.Clock)
	sleep(ctx, clock.Reread+200*time.Millisecond) // the agent reads its file again within Reread
	if err := c.probeSale(ctx, t); err != nil {
		return "", fmt.Errorf("till %s with its clock stepped %s: %w", t, clock.FormatOffset(st.Clock), err)
	}
	flag := "not flagged (behind: the store confirms over 30s)"
	if st.Clock > skewLimit {
		flagged, err := c.waitClockOff(ctx, t, 5*time.Second)
		if !flagged {
			return "", fmt.Errorf("till %s stepped %s ahead: the store did not flag its clock within 5s (%v)",
				t, clock.FormatOffset(st.Clock), err)
		}
		flag = "flagged by the store"
	}
	sleep(ctx, st.Hold)
	c.noteDate(st.Clock)
	if err := clock.WriteOffset(path, 0); err != nil {
		return "", err
	}
	sleep(ctx, clock.Reread+200*time.Millisecond)
	c.noteDate(st.Clock) // the agent may have dated by the stepped clock up to Reread after
	if err := c.probeSale(ctx, t); err != nil {
		return "", fmt.Errorf("till %s with its clock set right after a step of %s: %w", t, clock.FormatOffset(st.Clock), err)
	}
	// Nor did the till refuse the cashiers' sales for its clock meanwhile.
	after := c.Cashiers[t].Codes()
	for _, code := range clockRefusals {
		if n := after[code] - before[code]; n > 0 {
			return "", fmt.Errorf("till %s answered %s %d times around a clock step of %s", t, code, n, clock.FormatOffset(st.Clock))
		}
	}
	return fmt.Sprintf("till %s clock stepped %s, %s, sold, set right, sold", t, clock.FormatOffset(st.Clock), flag), nil
}

// clockRefusals are the agent's refusals a clock could cause: a card payment offline for
// "too long" (a clock that leapt past --offline-max, or went back before the time offline
// began), a step on a business day the till has closed.
var clockRefusals = []string{"offline_too_long", "day_closed"}

// noteDate adds the business date now by a clock off by off to Dates.
func (c *Cluster) noteDate(off time.Duration) {
	loc, err := wire.LoadLocation(c.TZ)
	if err != nil {
		loc = time.UTC
	}
	if d := time.Now().Add(off).In(loc).Format(wire.BusinessDate); !slices.Contains(c.dates, d) {
		c.dates = append(c.dates, d)
	}
}

// Dates returns the business dates tills' stepped clocks gave their sales so far.
func (c *Cluster) Dates() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.dates)
}

// probeSale sells one card sale at till t through its cashier (whose 2xx answers the checks
// hold to the ledger). A live refusal for the store's limits is tried again; any other
// refusal is the till refusing to sell.
func (c *Cluster) probeSale(ctx context.Context, t string) error {
	cl := c.Cashiers[t].Client()
	var err error
	for range 10 {
		if err = sellCard(ctx, cl); err == nil {
			return nil
		}
		var e *client.Error
		if !errors.As(err, &e) || e.Code != "rate_limited" {
			return err
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return err
}

func sellCard(ctx context.Context, cl *client.Client) error {
	open, err := cl.OpenSale(ctx, client.NewKey())
	if err != nil {
		return fmt.Errorf("open sale: %w", err)
	}
	id := open.Sale.ID
	s, err := cl.AddLine(ctx, client.NewKey(), id, client.AddLineRequest{SKU: "MILK", Qty: 1})
	if err != nil {
		cl.Cancel(ctx, client.NewKey(), id)
		return fmt.Errorf("add line: %w", err)
	}
	_, err = cl.Pay(ctx, client.NewKey(), id, client.PayRequest{Method: wire.MethodCard, Amount: s.Sale.Total.String(),
		Reference: "CLOCK-" + id})
	if err != nil {
		cl.Cancel(ctx, client.NewKey(), id)
		return fmt.Errorf("pay by card: %w", err)
	}
	return nil
}

// waitClockOff waits at most within for the store to say till t's clock is off.
func (c *Cluster) waitClockOff(ctx context.Context, t string, within time.Duration) (bool, error) {
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		var ans storeclient.TerminalsAnswer
		if ans, err = c.Store.Manager().Terminals(ctx); err == nil {
			for _, row := range ans.Terminals {
				if row.Terminal == t && row.ClockOff {
					return true, nil
				}
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return false, err
}
