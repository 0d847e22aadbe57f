package main

import (
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// TestDashboardBusinessTimeInStoreZone: the dashboard's parked table shows an event's
// business date and its business time side by side; both are the store's (--tz, Shanghai
// here), as the API gives them. A back-office browser set to another zone (New York) showed
// the time in its own zone: a sale made at 07:30 on 2026-11-28 in the store was listed under
// business date 2026-11-28 at "11/27/2026, 6:30:00 PM". Real mosquitto, Redis, ledger and
// headless Chromium. Not parallel: the browser takes its zone from the environment.
func TestDashboardBusinessTimeInStoreZone(t *testing.T) {
	t.Setenv("TZ", "America/New_York")
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)

	shanghai, err := time.LoadLocation(biTZ)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 28, 7, 30, 0, 0, shanghai)
	env := wire.NewEnvelope(wire.KindSale, biStoreID, "T1", 1, at, []byte(`{"not":"a sale"}`))
	env.Offline = true
	r.step(t, "a sale the store cannot read", "T1", biMarshal(t, env),
		biWant{seq: 1, status: wire.AckRejected, anyCode: true})

	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#parked tbody", "2026-11-28")
	cells := strings.Split(b.text("#parked tbody tr"), " ")
	if got := b.text("#parked tbody tr td:nth-child(7)"); !strings.Contains(got, "2026-11-28") || !strings.Contains(got, "07:30") {
		t.Errorf("parked event of business date 2026-11-28 at 07:30 store time shown at %q (row %q)", got, cells)
	}
}
