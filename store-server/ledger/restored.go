package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
)

// RestoredOutbox returns the highest hq_outbox id the ledger held when it was restored from
// a backup (GET /v1/backup): its rows up to it are the lost ledger's, id for id, and rows
// after it were written since (the tills' replays among them). ok is false for a ledger
// never restored from a backup.
func (l *Ledger) RestoredOutbox(ctx context.Context) (id int64, ok bool, err error) {
	var v string
	err = l.db.R.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = 'restored_outbox'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("restored outbox: %w", err)
	}
	id, err = strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("restored outbox: %q: %w", v, err)
	}
	return id, true, nil
}
