package main

import (
	"context"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
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
	// The till restored once more: a third content under the key, kept by its till too.
	third := r.seal(wire.KindSale, "T1", 1, biMarshal(t, biGoodSale("T1-1-third", 1)))
	r.step(t, "a third sale under its key", "T1", biMarshal(t, third), biConflict(1))
	r.step(t, "the third sale again", "T1", biMarshal(t, third), biConflict(1))

	c, ctx := srv.manager(), context.Background()
	open := must[client.ParkedAnswer](t, "parked")(c.Parked(ctx, false))
	if len(open.Parked) != 2 {
		t.Fatalf("open parked events: %+v, want the second and the third content of T1:1", open.Parked)
	}
	hashes := map[string]bool{}
	for _, p := range open.Parked {
		hashes[p.Hash] = true
		if p.Terminal != "T1" || p.Seq != 1 || p.Code != ledger.CodeIdempotencyConflict || p.Kind != wire.KindSale ||
			p.BusinessDate == "" || p.Resolved {
			t.Fatalf("open parked events: %+v", open.Parked)
		}
	}
	if !hashes[other.Hash] || !hashes[third.Hash] {
		t.Fatalf("open parked events: %+v, want contents %s and %s", open.Parked, other.Hash, third.Hash)
	}
	// Two contents under one key: a resolution names its content.
	if status, _, body := srv.do(t, "POST", "/v1/parked/resolve", biToken, "application/json",
		[]byte(`{"terminal": "T1", "seq": 1, "note": "x"}`)); status != 400 ||
		!strings.Contains(string(body), ledger.CodeParkedHashRequired) {
		t.Errorf("resolve without a hash: %d %s", status, body)
	}
	metric := func(want string) {
		t.Helper()
		_, _, body := srv.do(t, "GET", "/metrics", biToken, "", nil)
		if w := `posgate_store_open_exceptions{kind="parked"} ` + want + "\n"; !strings.Contains(string(body), w) {
			t.Errorf("metrics: no %q", w)
		}
	}
	metric("2")

	const note = "rung up twice after the till was reinstalled; the customer paid once"
	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#parked tbody", "idempotency_conflict")
	b.click("#parked tbody button")
	if msg := b.answerPrompt(note); !strings.Contains(msg, "Parked sale T1 #1") {
		t.Errorf("prompt %q", msg)
	}
	b.until("one parked event left", func() bool {
		return strings.Count(b.text("#parked tbody"), "idempotency_conflict") == 1
	})
	metric("1")
	b.click("#parked tbody button")
	b.answerPrompt(note)
	b.waitText("#parked tbody", "None.")
	metric("0")
	all := must[client.ParkedAnswer](t, "all parked")(c.Parked(ctx, true))
	if len(all.Parked) != 2 || !all.Parked[0].Resolved || all.Parked[0].Resolution != note || !all.Parked[1].Resolved {
		t.Fatalf("all parked events: %+v", all.Parked)
	}
}
