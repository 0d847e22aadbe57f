package ledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/posgate/posgate/internal/sqlitedb"
)

// OutboxDays returns the business days before before that the ledger holds rows for HQ of,
// oldest first: the days HQ is to hold (read by index, one seek per day).
func (l *Ledger) OutboxDays(ctx context.Context, before string) ([]string, error) {
	var out []string
	err := sqlitedb.Each(ctx, l.db.R, `WITH RECURSIVE d(day) AS (
			SELECT min(business_date) FROM hq_outbox
			UNION ALL
			SELECT (SELECT min(business_date) FROM hq_outbox WHERE business_date > d.day) FROM d WHERE d.day IS NOT NULL)
		SELECT day FROM d WHERE day IS NOT NULL AND day < ?`, []any{before},
		func(rows *sql.Rows) error {
			var d string
			if err := rows.Scan(&d); err != nil {
				return err
			}
			out = append(out, d)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("days for hq: %w", err)
	}
	return out, nil
}
