package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// TestDashboardSaysParkedAreHidden: a till drains 55 events the store cannot read, and all
// are parked. The dashboard lists the 50 most recently parked; it must say that 5 more are
// open, which it kept quiet, so that a manager who resolved the 50 shown took the store for
// clear while the terminal row still counted them. Real mosquitto, Redis, ledger and
// headless Chromium.
func TestDashboardSaysParkedAreHidden(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)
	const n = 55
	for seq := int64(1); seq <= n; seq++ {
		r.step(t, fmt.Sprintf("unreadable %d", seq), "T1", r.event(t, wire.KindSale, "T1", seq, `{"not":"a sale"}`),
			biWant{seq: seq, status: wire.AckRejected, anyCode: true})
	}
	if open := must[client.ParkedAnswer](t, "parked")(srv.manager().Parked(context.Background(), false)); open.Open != n {
		t.Errorf("/v1/parked says %d open, want %d", open.Open, n)
	}
	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#parked tbody", "wire_unknown_field")
	b.waitText("#parked-more", "50 most recently parked of 55")
}
