package ledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/sqlitedb"
)

// Minute is the store's sales of one minute of store time.
type Minute struct {
	Sales   int64
	Takings money.Fen // the sales' totals
}

// SalesByMinute returns the accepted sales of a business date by minute of the day in the
// store's zone (0 for 00:00 … 1439 for 23:59), from each sale's own time. A sale whose time
// falls on another calendar day (a till's clock off; the date is still the sale's) counts in
// the minute of its clock time.
func (l *Ledger) SalesByMinute(ctx context.Context, date string) (map[int]Minute, error) {
	out := map[int]Minute{}
	err := sqlitedb.Each(ctx, l.db.R, `SELECT at, total FROM sales WHERE business_date = ?`, []any{date},
		func(rows *sql.Rows) error {
			var at string
			var total money.Fen
			if err := rows.Scan(&at, &total); err != nil {
				return err
			}
			t := l.parseTime(at)
			if t.IsZero() {
				return nil
			}
			t = t.In(l.loc)
			m := out[t.Hour()*60+t.Minute()]
			m.Sales++
			m.Takings += total
			out[t.Hour()*60+t.Minute()] = m
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("sales by minute of %s: %w", date, err)
	}
	return out, nil
}

// TradingDayBefore returns the last business date before date with an accepted sale ("":
// none).
func (l *Ledger) TradingDayBefore(ctx context.Context, date string) (string, error) {
	var d sql.NullString
	if err := l.db.R.QueryRowContext(ctx, `SELECT max(business_date) FROM sales WHERE business_date < ?`, date).Scan(&d); err != nil {
		return "", fmt.Errorf("trading day before %s: %w", date, err)
	}
	return d.String, nil
}
