package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestReplayedFlowNumberTaken: a till replays (catch-up) a sale the store had given a flow
// number that another till's sale holds in the ledger now: the store books the replay under
// the day's next number and records a flow exception, listed by the API, counted in
// /metrics and shown on the dashboard, where the manager resolves it with a note (a headless
// Chromium). Real mosquitto, Redis and ledger.
func TestReplayedFlowNumberTaken(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.importCSV(t, []byte(biCatalogCSV))
	srv.adjust(t, "opening-A1", "A1", 100, ledger.ReasonOpening)
	r := biStartRun(t, srv)
	sell := func(terminal string, replay *wire.Replay) wire.Ack {
		t.Helper()
		env := r.seal(wire.KindSale, terminal, 1, biMarshal(t, biGoodSale(terminal+"-1", 0)))
		env.Replay = replay
		r.bus.publish(t, terminal, biMarshal(t, env))
		d, ok := r.bus.next(terminal, biAckWait)
		if !ok || d.err != nil || len(d.acks.Acks) != 1 || d.acks.Acks[0].Status != wire.AckAccepted ||
			d.acks.Acks[0].Result == nil || d.acks.Acks[0].Result.FlowNo <= 0 {
			t.Fatalf("%s's sale answered %s (%v)", terminal, d.raw, d.err)
		}
		return d.acks.Acks[0]
	}
	flow := sell("T1", nil).Result.FlowNo
	// T2's sale had the same number from the store before it lost it (degrade mode after a
	// restore): its receipt prints it.
	booked := sell("T2", &wire.Replay{Status: wire.ReplayAccepted, FlowNo: flow, BusinessDate: r.date}).Result.FlowNo
	if booked == flow {
		t.Fatalf("the replay was booked under flow number %d, which T1:1 holds", flow)
	}
	c, ctx := srv.manager(), context.Background()
	open := must[client.FlowExceptionsAnswer](t, "flow exceptions")(c.FlowExceptions(ctx, "", false))
	if len(open.Flows) != 1 || open.Flows[0].Terminal != "T2" || open.Flows[0].Seq != 1 || open.Flows[0].FlowGiven != flow ||
		open.Flows[0].FlowBooked != booked || open.Flows[0].HeldBy != "T1:1" || open.Flows[0].BusinessDate != r.date {
		t.Fatalf("open flow exceptions: %+v (T1:1 holds %d, the replay booked %d)", open.Flows, flow, booked)
	}
	if l, _ := srv.metricLine(t, `posgate_store_open_exceptions{kind="flow"}`); l != `posgate_store_open_exceptions{kind="flow"} 1` {
		t.Errorf("/metrics counts the open flow exceptions as %q, want 1", l)
	}

	const note = "T2 receipt reprinted with its booked number"
	b := startBrowser(t)
	b.open(srv.Base + "/#token=" + biToken)
	b.waitText("#flows tbody", "T2")
	b.click("#flows tbody button")
	if msg := b.answerPrompt(note); !strings.Contains(msg, fmt.Sprintf("prints flow number %d, which T1:1 holds; booked as %d", flow, booked)) {
		t.Errorf("prompt %q", msg)
	}
	b.waitText("#flows tbody", "None.")
	all := must[client.FlowExceptionsAnswer](t, "all flow exceptions")(c.FlowExceptions(ctx, r.date, true))
	if len(all.Flows) != 1 || !all.Flows[0].Resolved || all.Flows[0].Resolution != note {
		t.Fatalf("flow exceptions of %s after the dashboard resolved it: %+v", r.date, all.Flows)
	}
	if l, _ := srv.metricLine(t, `posgate_store_open_exceptions{kind="flow"}`); l != `posgate_store_open_exceptions{kind="flow"} 0` {
		t.Errorf("/metrics counts the open flow exceptions as %q after resolving, want 0", l)
	}
}
