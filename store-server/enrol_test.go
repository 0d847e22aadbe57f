package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ingest"
)

// metricLine returns the line of /metrics that starts with prefix, or "".
func (s *biServer) metricLine(t *testing.T, prefix string) (line, all string) {
	t.Helper()
	_, _, b := s.do(t, "GET", "/metrics", biToken, "", nil)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l, string(b)
		}
	}
	return "", string(b)
}

// TestUnknownTerminalRefused: with a terminals file, a terminal not on it is refused
// terminal_unknown — its up, status and backlog messages reach neither ingest nor the
// presence board: no ack, no ledger row, no seq gap, no terminal row, no metric label — and
// counted by code; enrolled later (the file changes), its events flow. An envelope naming
// another terminal than its topic's is refused wire_terminal_mismatch and counted too.
func TestUnknownTerminalRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "terminals")
	if err := os.WriteFile(path, []byte("T_PROBE\nT_OK\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := biRunServer(t, "--terminals", path)
	srv.openStore(t)
	r := biStartRun(t, srv)
	ctx := context.Background()

	msg, w := r.good(t, "T_OK", 1)
	r.step(t, "enrolled", "T_OK", msg, w)
	before := must[client.ModeAnswer](t, "mode")(srv.manager().Mode(ctx)).Stats

	const stranger = "T_STRANGER_9"
	for seq := int64(1); seq <= 3; seq++ {
		m, _ := r.good(t, stranger, seq+5) // a gap it would open
		r.bus.publish(t, stranger, m)
	}
	for _, topic := range []string{wire.StatusTopic(biStoreID, stranger), wire.BacklogTopic(biStoreID, stranger)} {
		if tok := r.bus.c.Publish(topic, 1, true, []byte(`{"v":1,"online":true}`)); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	if d, ok := r.bus.next(stranger, 1500*time.Millisecond); ok {
		t.Errorf("a terminal not enrolled was answered: %s", d.raw)
	}
	// A message naming another terminal than its topic's: refused, and now counted.
	m, _ := r.good(t, "T_PROBE", 2)
	r.step(t, "envelope of another terminal", "T_OK", m, biWant{seq: 2, status: wire.AckRejected, code: ingest.CodeTerminalMismatch, noPark: true})

	after := must[client.ModeAnswer](t, "mode")(srv.manager().Mode(ctx)).Stats
	if after.Messages != before.Messages+1 || after.SeqGaps != before.SeqGaps {
		t.Errorf("ingest saw the stranger: messages %d → %d, gaps %d → %d", before.Messages, after.Messages, before.SeqGaps, after.SeqGaps)
	}
	terms := must[client.TerminalsAnswer](t, "terminals")(srv.manager().Terminals(ctx))
	for _, row := range terms.Terminals {
		if row.Terminal == stranger {
			t.Errorf("the stranger has a terminal row: %+v", row)
		}
	}
	line, all := srv.metricLine(t, `posgate_store_refusals_total{code="terminal_unknown"}`)
	if line == "" || strings.HasSuffix(line, " 0") || strings.Contains(all, stranger) {
		t.Errorf("metrics: %q; the stranger named: %v", line, strings.Contains(all, stranger))
	}
	if line, _ := srv.metricLine(t, `posgate_store_refusals_total{code="wire_terminal_mismatch"} 1`); line == "" {
		t.Error("wire_terminal_mismatch not counted")
	}

	// Enrolled: its events flow (from seq 1: nothing of it was recorded before).
	if err := os.WriteFile(path, []byte("T_PROBE\nT_OK\n"+stranger+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the file is looked at once a second at most
	for {
		if _, ok := r.bus.next(stranger, 0); !ok {
			break
		}
	}
	m, w = r.good(t, stranger, 1)
	r.step(t, "enrolled later", stranger, m, w)
}
