package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// TestAnswerLeavesWriterDurable records an answer (committed without its own fsync) and
// checks that the writer connection is back at synchronous=FULL for the next request's
// commit, and that a retry of the request gets the recorded answer.
func TestAnswerLeavesWriterDurable(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), Config{Store: "S1", Terminal: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	synchronous := func() int {
		t.Helper()
		var v int
		if err := s.db.W.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := synchronous(); v != 2 {
		t.Fatalf("writer at synchronous=%d before, want 2 (FULL)", v)
	}
	open := func(tx *Tx) (string, error) { return tx.OpenSale() }
	fp := Fingerprint("POST", "/v1/sales", nil)
	ref, _, prior, err := s.Do(ctx, "k1", fp, Mode{Disconnected: true}, open)
	if err != nil || prior != nil {
		t.Fatalf("do: %v, prior %+v", err, prior)
	}
	if err := s.Answer(ctx, "k1", 201, []byte(`{"id":"`+ref+`"}`)); err != nil {
		t.Fatal(err)
	}
	if v := synchronous(); v != 2 {
		t.Fatalf("writer at synchronous=%d after recording an answer, want 2 (FULL)", v)
	}
	_, _, prior, err = s.Do(ctx, "k1", fp, Mode{Disconnected: true}, open)
	if err != nil || prior == nil || prior.Status != 201 || string(prior.Body) != `{"id":"`+ref+`"}` {
		t.Fatalf("retry: %v, prior %+v", err, prior)
	}

	// A statement that fails leaves the writer at FULL too.
	err = s.unsynced(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE no_such_table SET x = 1")
		return err
	})
	if err == nil {
		t.Fatal("a bad statement succeeded")
	}
	if v := synchronous(); v != 2 {
		t.Fatalf("writer at synchronous=%d after a failed unsynced statement, want 2 (FULL)", v)
	}
}

// TestApplyLeavesWriterDurable applies an ack-only batch (committed without its own fsync)
// and a refusal (durable), and checks each event's state and that the writer connection is
// at synchronous=FULL after each.
func TestApplyLeavesWriterDurable(t *testing.T) {
	ctx := context.Background()
	s, scanOnce := openSale(t)
	scan := func() int64 {
		t.Helper()
		seq, err := scanOnce()
		if err != nil || seq == 0 {
			t.Fatalf("scan: seq %d, %v", seq, err)
		}
		return seq
	}
	check := func(seq int64, state string) {
		t.Helper()
		var got string
		if err := s.db.R.QueryRowContext(ctx, `SELECT state FROM events WHERE seq = ?`, seq).Scan(&got); err != nil || got != state {
			t.Fatalf("event %d: state %q (%v), want %q", seq, got, err, state)
		}
		var v int
		if err := s.db.W.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&v); err != nil || v != 2 {
			t.Fatalf("writer at synchronous=%d (%v), want 2 (FULL)", v, err)
		}
	}
	a, b := scan(), scan()
	done, err := s.Apply(ctx, []Transition{{Seq: a, Action: Ack, Ack: wire.Ack{Seq: a, Status: wire.AckAccepted}}})
	if err != nil || len(done) != 1 {
		t.Fatalf("apply ack: %v, %d changed", err, len(done))
	}
	check(a, "acked")
	done, err = s.Apply(ctx, []Transition{{Seq: b, Action: Refuse,
		Ack: wire.Ack{Seq: b, Status: wire.AckRejected, Code: "out_of_stock", Live: true}}})
	if err != nil || len(done) != 1 {
		t.Fatalf("apply refusal: %v, %d changed", err, len(done))
	}
	check(b, "refused")
}

// TestStorageFull fills the outbox up to a page limit (SQLite answers SQLITE_FULL, as for a
// full disk): the request that does not fit fails with perr.Unavailable "storage_full" and
// leaves nothing behind, and once there is room again the next one is recorded.
func TestStorageFull(t *testing.T) {
	ctx := context.Background()
	s, scanOnce := openSale(t)
	var logged bytes.Buffer
	s.cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	scan := func() error {
		_, err := scanOnce()
		return err
	}
	events := func() int {
		var n int
		if err := s.db.R.QueryRowContext(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var pages int
	if err := s.db.W.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.W.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages)); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		before := events()
		err := scan()
		if err == nil {
			if i > 10_000 {
				t.Fatal("the outbox never filled up")
			}
			continue
		}
		if perr.KindOf(err) != perr.Unavailable || perr.CodeOf(err) != CodeStorageFull {
			t.Fatalf("scan into a full outbox: %v (kind %s, code %s), want unavailable/%s", err,
				perr.KindOf(err), perr.CodeOf(err), CodeStorageFull)
		}
		if after := events(); after != before {
			t.Fatalf("the failed scan left %d events, %d before", after, before)
		}
		// Refused and counted, and logged once however often the till tries.
		for range 3 {
			if err := scan(); perr.CodeOf(err) != CodeStorageFull {
				t.Fatalf("scan again into a full outbox: %v", err)
			}
		}
		if n := s.StorageRefusals()[CodeStorageFull]; n != 4 {
			t.Errorf("storage_full counted %d times, want 4", n)
		}
		if got := strings.Count(logged.String(), "code=storage_full"); got != 1 {
			t.Errorf("storage_full logged %d times, want once:\n%s", got, logged.String())
		}
		break
	}
	if _, err := s.db.W.ExecContext(ctx, "PRAGMA max_page_count = 1000000"); err != nil {
		t.Fatal(err)
	}
	if err := scan(); err != nil {
		t.Fatalf("scan once there is room again: %v", err)
	}
}

// openSale opens a fresh outbox (closed when the test ends) with one SKU and an open sale,
// and returns it with a function that scans that SKU into the sale offline and returns the
// scan event's seq.
// openWithMilk opens an outbox of store S1, terminal T1, whose catalog sells MILK at 12.50.
func openWithMilk(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), Config{Store: "S1", Terminal: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 1,
		Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func openSale(t *testing.T) (*Store, func() (int64, error)) {
	t.Helper()
	ctx := context.Background()
	s := openWithMilk(t)
	sale, _, _, err := s.Do(ctx, "", "", Mode{Disconnected: true}, func(tx *Tx) (string, error) { return tx.OpenSale() })
	if err != nil {
		t.Fatal(err)
	}
	return s, func() (int64, error) {
		_, seq, _, err := s.Do(ctx, "", "", Mode{Disconnected: true}, func(tx *Tx) (string, error) {
			_, err := tx.AddLine(sale, "MILK", "", 1)
			return sale, err
		})
		return seq, err
	}
}
