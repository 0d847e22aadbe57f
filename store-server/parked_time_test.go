package main

import (
	"encoding/json"
	"net/http"
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

	get := func(path string, v any) {
		t.Helper()
		status, _, body := srv.do(t, "GET", path, biToken, "", nil)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %d, body %q: %v", path, status, body, err)
		}
	}
	var open struct {
		Parked []client.Parked `json:"parked"`
	}
	get("/v1/parked", &open)
	if len(open.Parked) != 1 || open.Parked[0].Seq != 2 || open.Parked[0].Code != wire.CodeTime {
		t.Fatalf("parked %+v", open.Parked)
	}
	var terms client.TerminalsAnswer
	get("/v1/terminals", &terms)
	i := slices.IndexFunc(terms.Terminals, func(row client.TerminalRow) bool { return row.Terminal == term })
	if i < 0 || terms.Terminals[i].Parked != 1 || terms.Terminals[i].LastSeq != 2 {
		t.Fatalf("terminals %+v", terms.Terminals)
	}

	body := biMarshal(t, client.ResolveParkedRequest{Terminal: term, Seq: 2, Note: "the till's clock was reset; sale entered again"})
	status, _, got := srv.do(t, "POST", "/v1/parked/resolve", biToken, "application/json", body)
	var res struct {
		Parked  client.Parked `json:"parked"`
		Applied bool          `json:"applied"`
	}
	if err := json.Unmarshal(got, &res); status != http.StatusOK || err != nil || !res.Applied || !res.Parked.Resolved {
		t.Fatalf("resolve: %d %q (%v)", status, got, err)
	}
}
