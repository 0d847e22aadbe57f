package uploadstate

import (
	"context"
	"fmt"

	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/store-server/ledger"
)

// Acked is what HQ has acknowledged of the store, as the uploader's state records it.
type Acked struct {
	// Days are the business days HQ holds whole: a declaration of the day HQ acknowledged,
	// no row of it sent since that declaration, and no row of it in the ledger after the
	// last row HQ acknowledged.
	Days map[string]bool
	// Through is the highest hq_outbox id HQ acknowledged (every row up to it is at HQ);
	// 0 while the ledger does not hold that row (restored from an older backup, or another
	// ledger): nothing is acknowledged then.
	Through int64
}

// ReadAcked reads, from the uploader's state at statePath (read-only, while an uploader
// runs) and the store's ledger l, which of dates HQ holds whole. A missing state is an
// error wrapping fs.ErrNotExist (no uploader has run: HQ holds nothing).
func ReadAcked(ctx context.Context, statePath string, l *ledger.Ledger, dates []string) (Acked, error) {
	out := Acked{Days: map[string]bool{}}
	state, err := sqlitedb.OpenQueryOnly(ctx, statePath, 1)
	if err != nil {
		return out, fmt.Errorf("acknowledged days: open state %s: %w", statePath, err)
	}
	defer state.Close()
	kv, err := ReadKV(ctx, state)
	if err != nil {
		return out, fmt.Errorf("acknowledged days: %w", err)
	}
	if err := CheckStore(kv, statePath, l.StoreID()); err != nil {
		return out, fmt.Errorf("acknowledged days: %w", err)
	}
	through := atoi(kv["sent_through"])
	declared := map[string]bool{}
	rows, err := state.QueryContext(ctx, `SELECT business_date FROM days WHERE revision > 0 AND declared_rows = sent_rows`)
	if err != nil {
		return out, fmt.Errorf("acknowledged days: %w", err)
	}
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			rows.Close()
			return out, fmt.Errorf("acknowledged days: %w", err)
		}
		declared[d] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("acknowledged days: %w", err)
	}
	err = l.ViewHQ(ctx, func(r *ledger.HQReader) error {
		if through > 0 {
			held, err := RowHeld(ctx, r, through, kv["sent_key"])
			if err != nil || !held {
				return err // the ledger is behind HQ: nothing is acknowledged of it
			}
		}
		out.Through = through
		for _, d := range dates {
			if !declared[d] {
				continue
			}
			later, err := r.HasOutboxAfter(ctx, d, through)
			if err != nil {
				return err
			}
			out.Days[d] = !later
		}
		return nil
	})
	if err != nil {
		return Acked{Days: map[string]bool{}}, fmt.Errorf("acknowledged days: %w", err)
	}
	if out.Through == 0 {
		clear(out.Days)
	}
	return out, nil
}
