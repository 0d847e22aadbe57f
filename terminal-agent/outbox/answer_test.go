package outbox

import (
	"context"
	"path/filepath"
	"testing"
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
	if err := s.execUnsynced(ctx, "UPDATE no_such_table SET x = 1"); err == nil {
		t.Fatal("a bad statement succeeded")
	}
	if v := synchronous(); v != 2 {
		t.Fatalf("writer at synchronous=%d after a failed unsynced statement, want 2 (FULL)", v)
	}
}
