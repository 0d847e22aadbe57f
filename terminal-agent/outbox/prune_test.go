package outbox

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/schema"
)

// TestPruneRequests: a request's record (Idempotency-Key) is deleted only once it is older
// than the retention by the clock and KeepRequests requests have been recorded after it; not
// by age while a record is dated after now (the clock went back); and, whatever the clock
// says, once ten times KeepRequests requests have been recorded after it.
func TestPruneRequests(t *testing.T) {
	const retention = 7 * 24 * time.Hour
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		// steps: "r" records a request, a duration moves the clock.
		steps []any
		kept  string // the tokens left after the prune, in order
	}{
		{"clock jumped, few requests since", []any{"r", "r", "r", 8 * 24 * time.Hour}, "r1 r2 r3"},
		{"old, enough requests since", []any{"r", "r", "r", "r", "r", 8 * 24 * time.Hour}, "r3 r4 r5"},
		{"young, enough requests since", []any{"r", "r", "r", "r", "r", 24 * time.Hour}, "r1 r2 r3 r4 r5"},
		{"clock went back", []any{"r", "r", "r", "r", "r", 10 * 24 * time.Hour, "r", -2 * 24 * time.Hour},
			"r1 r2 r3 r4 r5 r6"},
		{"clock caught up again", []any{"r", "r", "r", "r", "r", 10 * 24 * time.Hour, "r", -2 * 24 * time.Hour,
			2 * 24 * time.Hour}, "r4 r5 r6"},
		{"ten times as many requests since, young", slices.Repeat([]any{"r"}, 35),
			tokens(6, 35)},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			now := t0
			s, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"),
				Config{Store: "S1", Terminal: "T1", Location: time.UTC, Now: func() time.Time { return now }, KeepRequests: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			n := 0
			for _, st := range c.steps {
				switch st := st.(type) {
				case string:
					n++
					tok := "r" + strconv.Itoa(n)
					if _, _, _, err := s.Do(ctx, tok, Fingerprint("POST", "/v1/sales", nil), Mode{},
						func(tx *Tx) (string, error) { return tx.OpenSale() }); err != nil {
						t.Fatal(err)
					}
				case time.Duration:
					now = now.Add(st)
				}
			}
			if _, err := s.Prune(ctx, now.Add(-retention)); err != nil {
				t.Fatal(err)
			}
			if got := requestTokens(t, s); got != c.kept {
				t.Errorf("kept %q, want %q", got, c.kept)
			}
		})
	}
}

// tokens lists r{from} … r{to}.
func tokens(from, to int) string {
	var b []string
	for i := from; i <= to; i++ {
		b = append(b, "r"+strconv.Itoa(i))
	}
	return strings.Join(b, " ")
}

func requestTokens(t *testing.T, s *Store) string {
	t.Helper()
	rows, err := s.db.R.QueryContext(context.Background(), `SELECT token FROM requests ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var tok string
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
	}
	return strings.Join(out, " ")
}

// TestRequestsOrderMigration: an outbox made before requests had an order keeps its records
// across the migration, in the order they were recorded, and a retry still finds its own.
func TestRequestsOrderMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	first, err := fs.ReadFile(schema.Terminal(), "001_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	old, err := sqlitedb.Open(ctx, path, fstest.MapFS{"001_outbox.sql": {Data: first}})
	if err != nil {
		t.Fatal(err)
	}
	fp := Fingerprint("POST", "/v1/sales", nil)
	for i, tok := range []string{"zeta", "alpha", "mu"} { // recorded in this order, clock set back once
		if _, err := old.W.ExecContext(ctx, `INSERT INTO requests (token, fingerprint, status, body, ref, created_ms)
			VALUES (?, ?, 201, ?, 'sale', ?)`, tok, fp, `{"n":`+strconv.Itoa(i)+`}`, []int64{3000, 1000, 2000}[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path, Config{Store: "S1", Terminal: "T1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := requestTokens(t, s); got != "zeta alpha mu" {
		t.Fatalf("records after the migration, by n: %q, want %q", got, "zeta alpha mu")
	}
	_, _, prior, err := s.Do(ctx, "alpha", fp, Mode{}, func(tx *Tx) (string, error) { return tx.OpenSale() })
	if err != nil || prior == nil || prior.Status != 201 || string(prior.Body) != `{"n":1}` {
		t.Fatalf("a retry after the migration: prior %+v, %v; want the recorded answer", prior, err)
	}
}
