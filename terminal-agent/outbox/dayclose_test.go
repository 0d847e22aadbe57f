package outbox

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// TestDayToCloseLookback: a close naming no day chooses among the open business days from
// the lookback's first day up to today; older open days are no candidates, are listed by
// OldOpenDays and named in the refusals, and two recent open days are still a question.
func TestDayToCloseLookback(t *testing.T) {
	today := time.Date(2026, 11, 29, 22, 0, 0, 0, time.UTC)
	day := func(n int) string { return today.AddDate(0, 0, -n).Format(wire.BusinessDate) }
	for _, c := range []struct {
		name     string
		lookback int
		sold     []int  // days before today with a sale
		close    string // the day a close naming no day closes, or the code of its refusal
		named    []int  // the days the refusal names as candidates
		old      []int  // OldOpenDays
	}{
		{"today and a day long past", 0, []int{9000, 0}, day(0), nil, []int{9000}},
		{"today and a day past the lookback", 0, []int{8, 0}, day(0), nil, []int{8}},
		{"today and the lookback's first day", 0, []int{7, 0}, CodeDayAmbiguous, []int{7, 0}, nil},
		{"yesterday, today and a day long past", 0, []int{9000, 1, 0}, CodeDayAmbiguous, []int{1, 0}, []int{9000}},
		{"only a day long past", 0, []int{9000}, CodeNothingToClose, nil, []int{9000}},
		{"a lookback of one day", 1, []int{2, 1}, day(1), nil, []int{2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			now := today
			s, err := Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), Config{Store: "S1", Terminal: "T1",
				Location: time.UTC, Now: func() time.Time { return now }, CloseLookbackDays: c.lookback})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.ReplaceCatalog(ctx, wire.Catalog{V: 1, Store: "S1", Version: 1,
				Items: []wire.CatalogItem{{SKU: "MILK", Name: "Milk", Price: 1250}}}); err != nil {
				t.Fatal(err)
			}
			for _, n := range c.sold {
				now = today.AddDate(0, 0, -n)
				_, _, _, err := s.Do(ctx, "", "", Mode{Disconnected: true}, func(tx *Tx) (string, error) {
					id, err := tx.OpenSale()
					if err == nil {
						_, err = tx.AddLine(id, "MILK", "", 1)
					}
					if err == nil {
						err = tx.Pay(id, wire.MethodCash, money.Fen(1250), "")
					}
					return id, err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			now = today
			got, err := s.DayToClose(ctx, now)
			if err != nil {
				got = perr.CodeOf(err)
			}
			if got != c.close {
				t.Fatalf("a close naming no day: %q (%v), want %q", got, err, c.close)
			}
			if err != nil {
				// The candidates come first; the old open days after them, apart.
				msg := perr.As(err).Message
				candidates, apart, _ := strings.Cut(msg, ";")
				for _, n := range c.named {
					if !strings.Contains(candidates, day(n)) {
						t.Errorf("the refusal does not name %s: %s", day(n), msg)
					}
				}
				for _, n := range c.old {
					if strings.Contains(candidates, day(n)) || !strings.Contains(apart, day(n)) {
						t.Errorf("the refusal does not name the old open day %s apart: %s", day(n), msg)
					}
				}
			}
			old, err := s.OldOpenDays(ctx, now)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, n := range c.old {
				want = append(want, day(n))
			}
			if strings.Join(old, " ") != strings.Join(want, " ") {
				t.Errorf("old open days %v, want %v", old, want)
			}
		})
	}
}
