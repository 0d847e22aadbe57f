package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// TestParkedOfTheLastYearShown: a till whose clock says 9999-12-31T20:00Z sends a sale.
// The wire refuses the year (1970-9998) and the store parks the sale, keeping its time; in
// the store's zone (Shanghai) that time is 10000-01-01, which JSON cannot write. The manager
// still gets the parked list, its resolution and the terminals, each a whole JSON answer:
// one such event emptied them under a 200.
func TestParkedOfTheLastYearShown(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)

	const term = "T_YEAR"
	e1, w1 := r.good(t, term, 1)
	r.step(t, "a sale", term, e1, w1)
	far := time.Date(9999, 12, 31, 20, 0, 0, 0, time.UTC)
	env := wire.NewEnvelope(wire.KindSale, biStoreID, term, 2, far, biMarshal(t, biGoodSale("far", 0)))
	env.Offline = true
	r.step(t, "a sale dated 9999-12-31T20:00Z", term, biMarshal(t, env), biRejected(2, wire.CodeTime))

	// The client fails on an answer other than 200 and on one that is not whole JSON.
	c, ctx := srv.manager(), context.Background()
	open := must[client.ParkedAnswer](t, "parked")(c.Parked(ctx, false))
	if len(open.Parked) != 1 || open.Parked[0].Seq != 2 || open.Parked[0].Code != wire.CodeTime {
		t.Fatalf("parked %+v", open.Parked)
	}
	terms := must[client.TerminalsAnswer](t, "terminals")(c.Terminals(ctx))
	i := slices.IndexFunc(terms.Terminals, func(row client.TerminalRow) bool { return row.Terminal == term })
	if i < 0 || terms.Terminals[i].Parked != 1 || terms.Terminals[i].LastSeq != 2 {
		t.Fatalf("terminals %+v", terms.Terminals)
	}

	res := must[client.ResolveParkedAnswer](t, "resolve")(c.ResolveParked(ctx, client.ResolveParkedRequest{
		Terminal: term, Seq: 2, Note: "the till's clock was reset; sale entered again"}))
	if !res.Applied || !res.Parked.Resolved {
		t.Fatalf("resolve: %+v", res)
	}
}
