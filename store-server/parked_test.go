package main

import (
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestParkedResolution: a key used again with other content is answered conflict, the
// original stands, and the other content, which the till kept, is parked; in the dashboard
// (headless Chromium) the manager resolves it with what explained it, after which it leaves
// the open list and the open-exception gauge, and keeps its note. Real mosquitto, Redis and
// ledger.
func TestParkedResolution(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)

	e1, w1 := r.good(t, "T1", 1)
	r.step(t, "a sale", "T1", e1, w1)
	other := r.seal(wire.KindSale, "T1", 1, biMarshal(t, biGoodSale("T1-1-again", 1)))
	r.step(t, "another sale under its key", "T1", biMarshal(t, other), biConflict(1))

	type list struct {
		Parked []ledger.Parked `json:"parked"`
	}
	var open list
	srv.mustJSON(t, "GET", "/v1/parked", nil, &open)
	if len(open.Parked) != 1 || open.Parked[0].Terminal != "T1" || open.Parked[0].Seq != 1 ||
		open.Parked[0].Code != ledger.CodeIdempotencyConflict || open.Parked[0].Kind != wire.KindSale ||
		open.Parked[0].BusinessDate == "" || open.Parked[0].Resolved {
		t.Fatalf("open parked events: %+v", open.Parked)
	}
	metric := func(want string) {
		t.Helper()
		_, _, body := srv.do(t, "GET", "/metrics", biToken, "", nil)
		if w := `posgate_store_open_exceptions{kind="parked"} ` + want + "\n"; !strings.Contains(string(body), w) {
			t.Errorf("metrics: no %q", w)
		}
	}
	metric("1")

	const note = "rung up twice after the till was reinstalled; the customer paid once"
	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#parked tbody", "idempotency_conflict")
	b.click("#parked tbody button")
	if msg := b.answerPrompt(note); !strings.Contains(msg, "Parked sale T1 #1") {
		t.Errorf("prompt %q", msg)
	}
	b.waitText("#parked tbody", "None.")
	metric("0")
	var all list
	srv.mustJSON(t, "GET", "/v1/parked?all=1", nil, &all)
	if len(all.Parked) != 1 || !all.Parked[0].Resolved || all.Parked[0].Resolution != note {
		t.Fatalf("all parked events: %+v", all.Parked)
	}
}
