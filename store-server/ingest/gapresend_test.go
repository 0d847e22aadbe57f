package ingest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestJumpNotStoredCarriesItsGapAgain: the event that jumped a gap is not stored (its
// record fails in the ledger) and not acked; resent, it is below the next seq the store
// expects and not in the ledger, so it is decided again, and it records the gap then.
func TestJumpNotStoredCarriesItsGapAgain(t *testing.T) {
	s := stack.Run(t, stack.Options{Redis: true})
	path := filepath.Join(t.TempDir(), "ledger.db")
	led := openLedgerAt(t, path)
	t.Cleanup(func() { led.Close() })
	if _, _, err := led.Adjust(context.Background(), "open-A", "A", 100, "opening"); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`CREATE TRIGGER fail_t2 BEFORE INSERT ON events WHEN NEW.terminal = 'T2'
		AND (SELECT v FROM meta WHERE k = 'test_fail') = '1' BEGIN SELECT RAISE(ABORT, 'disk says no'); END;
		INSERT INTO meta (k, v) VALUES ('test_fail', '1')`); err != nil {
		t.Fatal(err)
	}
	r := startGapRun(t, s, led)
	r.in.Handle(wire.UpTopic(testStore, "T2"), testSale("T2", 5, time.Now(), true))
	select {
	case <-r.out.got:
		t.Fatalf("acked although its record failed: %+v", r.out.msgs)
	case <-time.After(500 * time.Millisecond):
	}
	if g := gapsOf(t, led, "T2"); len(g) != 0 {
		t.Fatalf("gap recorded without its event: %+v", g)
	}
	if _, err := raw.Exec(`DELETE FROM meta WHERE k = 'test_fail'`); err != nil {
		t.Fatal(err)
	}
	waitMode(t, r.in, client.ModeRedis)
	wantAck(t, r.send(t, "T2", 5), wire.AckAccepted, 0)
	if g := gapsOf(t, led, "T2"); len(g) != 1 || g[0].From != 1 || g[0].To != 4 || g[0].Reason != ledger.GapNewLedger {
		t.Fatalf("T2's gaps: %+v, want 1..4 new_ledger", g)
	}
	if st := r.in.Stats(); st.SeqGaps != 1 {
		t.Fatalf("stats %+v, want 1 seq gap", st)
	}
	wantAck(t, r.send(t, "T2", 6), wire.AckAccepted, 0)
	wantAck(t, r.send(t, "T2", 8), wire.AckOutOfOrder, 7)
}
