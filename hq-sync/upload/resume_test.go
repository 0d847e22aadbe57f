package upload

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/posgate/posgate/hq-sync/reconcile"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// TestResumesOnceTheTillsRefilledTheLedger: HQ acknowledged T1's sales 1..8; the store's
// ledger is restored from a backup (Ledger.Backup) holding 1..5 and T2 sells on. The
// uploader refuses the ledger (ledger_behind_hq) while it lacks HQ's last row; once T1 has
// replayed 6..8 (catch-up: the flow numbers they were given), it goes on by itself, with
// its state as it was: every row of the ledger is at HQ, and HQ's reconcile finds none
// missing.
func TestResumesOnceTheTillsRefilledTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, st, _, clk, cfg := restoreFixture(t)
	s.Sales(5, day0, "T1") // ids 1..5
	u := MustNew(t, cfg)
	MustOnce(t, u)
	backup := filepath.Join(t.TempDir(), "ledger.bak")
	if err := s.l.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	s.Sales(3, day0.Add(time.Hour), "T1") // ids 6..8, lost with the disk
	MustOnce(t, u)
	if status, err := u.Status(ctx); err != nil || status.SentThrough != 8 {
		t.Fatalf("HQ acknowledged through %d (%v), want 8", status.SentThrough, err)
	}
	lost := lostEvents(t, s.path, "T1", 6)
	u.Close()

	restoreLedger(t, s, backup)
	s.Sales(2, day0.Add(2*time.Hour), "T2") // ids 6, 7 again: T2 seq 1, 2
	_, err := New(ctx, cfg)
	if perr.As(err).Code != CodeLedgerBehind {
		t.Fatalf("the uploader on a ledger without HQ's last row: %v, want %s", err, CodeLedgerBehind)
	}

	// The till replays what the ledger lacks, with the flow numbers it was given.
	out, err := s.l.Commit(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if o.Err != nil || o.Status != wire.AckAccepted || o.FlowNo != lost[i].FlowNo {
			t.Fatalf("replay of T1:%d: %+v, want accepted with flow %d", lost[i].Seq, o, lost[i].FlowNo)
		}
	}
	u2, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("the uploader on the refilled ledger: %v", err)
	}
	defer u2.Close()
	MustOnce(t, u2)
	s.DayClose(date0, day0.Add(10*time.Hour), "T1", "T2")
	MustOnce(t, u2)
	clk.Set(day1.Add(time.Hour)) // the day is over: the store declares it
	MustOnce(t, u2)
	if status, err := u2.Status(ctx); err != nil || status.LedgerBehindHQ || status.Backlog != 0 {
		t.Fatalf("status %+v (%v), want caught up", status, err)
	}
	everyRowAtHQ(t, s, st)
	rep, err := reconcile.Run(ctx, st, date0, testStore)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.Txns {
		t.Errorf("reconcile: %s %s/%s seq %d: %s", d.Kind, d.Store, d.Terminal, d.Seq, d.Detail)
	}
}

// lostEvents reads, from the ledger file at path, terminal's accepted events from seq from
// on as the till would replay them: their content and the flow numbers they were given.
func lostEvents(t *testing.T, path, terminal string, from int64) []ledger.Record {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT seq, kind, at, payload, hash, offline, coalesce(flow_no, 0) FROM events
		WHERE terminal = ? AND seq >= ? AND status = 'accepted' ORDER BY seq`, terminal, from)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []ledger.Record
	for rows.Next() {
		r := ledger.Record{Terminal: terminal, Status: wire.AckAccepted, Final: true, Replayed: true}
		var at string
		if err := rows.Scan(&r.Seq, &r.Kind, &at, &r.Payload, &r.Hash, &r.Offline, &r.FlowNo); err != nil {
			t.Fatal(err)
		}
		if r.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		t.Fatalf("no event of %s from %d", terminal, from)
	}
	return out
}
