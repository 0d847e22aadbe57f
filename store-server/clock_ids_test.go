package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// TestClockOnlyOfTerminalIDs: up messages on topics whose terminal is no terminal id (too
// long, or with characters an id does not have) are refused by ingest, as their status and
// backlog messages are by the presence board. They must not give the store a till clock
// either: each one became a row of /v1/terminals and a label of the clock series in
// /metrics, for as long as the store-server runs, so that whoever can publish on the broker
// could grow both without bound.
func TestClockOnlyOfTerminalIDs(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)

	var bad []string
	for i := range 20 {
		bad = append(bad, fmt.Sprintf("junk%02d-%s", i, strings.Repeat("x", wire.MaxIDLen)))
	}
	bad = append(bad, "T.01", "T<b>1")
	for _, term := range bad {
		p := biMarshal(t, wire.HeartbeatPayload{Backlog: 0, CatalogVersion: 1})
		env := wire.NewEnvelope(wire.KindHeartbeat, biStoreID, term, 1, time.Now(), p)
		r.bus.publish(t, term, biMarshal(t, env))
	}
	// A good event after them: once it is answered, the store has heard them all.
	e1, w1 := r.good(t, "T1", 1)
	r.step(t, "a sale", "T1", e1, w1)

	terms := must[client.TerminalsAnswer](t, "terminals")(srv.manager().Terminals(context.Background()))
	for _, row := range terms.Terminals {
		if !wire.ValidID(row.Terminal) && row.ClockSkewMs != nil {
			t.Errorf("/v1/terminals has a clock for %q, no terminal id (clock_skew_ms %d)", row.Terminal, *row.ClockSkewMs)
		}
	}
	_, _, body := srv.do(t, "GET", "/metrics", biToken, "", nil)
	for _, term := range bad {
		for _, series := range []string{"posgate_store_terminal_clock_skew_seconds", "posgate_store_terminal_clock_off"} {
			if l := series + `{terminal="` + term + `"}`; strings.Contains(string(body), l) {
				t.Errorf("/metrics has %s", grepLines(string(body), l))
			}
		}
	}
}

// grepLines returns the lines of s that hold sub.
func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// TestUpTopicOfNoTerminalID: an up message on a topic whose terminal is no terminal id
// cannot be answered as any terminal's, and the ledger must not file it under that name: it
// became a row of /v1/terminals and a label of terminal_last_event_timestamp_seconds in
// /metrics for good, one per name whoever can publish on the broker chose.
func TestUpTopicOfNoTerminalID(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)

	bad := []string{"T.01", "T<b>1", "junk-" + strings.Repeat("x", wire.MaxIDLen)}
	for _, term := range bad {
		r.bus.publish(t, term, r.event(t, wire.KindSale, term, 1, `{"not":"a sale"}`))
	}
	e1, w1 := r.good(t, "T1", 1)
	r.step(t, "a sale", "T1", e1, w1)

	terms := must[client.TerminalsAnswer](t, "terminals")(srv.manager().Terminals(context.Background()))
	for _, row := range terms.Terminals {
		if !wire.ValidID(row.Terminal) {
			t.Errorf("/v1/terminals has a row for %q, no terminal id (last %s #%d %s)", row.Terminal,
				row.LastKind, row.LastSeq, row.LastStatus)
		}
	}
	_, _, body := srv.do(t, "GET", "/metrics", biToken, "", nil)
	for _, term := range bad {
		if l := grepLines(string(body), `terminal="`+term+`"`); len(l) > 0 {
			t.Errorf("/metrics has %s", l)
		}
	}
}
