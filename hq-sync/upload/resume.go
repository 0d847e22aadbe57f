package upload

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// resumeCaughtUp lets the uploader go on from a ledger that lost rows HQ acknowledged
// (restored from a backup, or started empty) once the store's tills have refilled it: the
// ledger holds again the event of the last row HQ acknowledged, with its content. The
// watermark goes back to the last row the lost ledger and this one share (the backup's
// highest id, ledger.RestoredOutbox; 0 for a ledger not restored from one), and every row
// after it goes again: HQ keeps one of each (row key and content hash), and the days they
// are of are declared again. It reports whether it moved the watermark; a ledger that holds
// the last row HQ acknowledged, or has not caught up yet, is left as it is (build refuses
// the latter: ledger_behind_hq).
func (u *Uploader) resumeCaughtUp(ctx context.Context) (bool, error) {
	kv, err := u.kv(ctx)
	if err != nil {
		return false, err
	}
	through, key := atoi(kv["sent_through"]), kv["sent_key"]
	if through == 0 {
		return false, nil
	}
	var from int64
	var fromKey string
	caught := false
	err = u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
		held, err := uploadstate.RowHeld(ctx, r, through, key)
		if err != nil || held {
			return err
		}
		if caught, err = u.holdsEvent(ctx, key); err != nil || !caught {
			return err
		}
		b, _, err := u.ledger.RestoredOutbox(ctx)
		if err != nil {
			return err
		}
		if from = min(b, through); from > 0 {
			rows, err := r.OutboxAfter(ctx, from-1, 1)
			if err != nil {
				return err
			}
			if len(rows) != 1 || rows[0].ID != from {
				from = 0 // not what the backup held: everything goes again
			} else {
				fromKey = uploadstate.RowKey(&rows[0])
			}
		}
		return nil
	})
	if err != nil || !caught {
		return false, err
	}
	err = inTx(ctx, u.state.W, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('sent_through', ?)
			ON CONFLICT (k) DO UPDATE SET v = excluded.v`, strconv.FormatInt(from, 10)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('sent_key', ?)
			ON CONFLICT (k) DO UPDATE SET v = excluded.v`, fromKey)
		return err
	})
	if err != nil {
		return false, err
	}
	u.log.Warn("the ledger lost rows HQ acknowledged and the tills refilled it; sending again from the last row both hold",
		"hq_acknowledged_through", through, "resume_after", from)
	return true, nil
}

// holdsEvent reports whether the ledger holds, accepted, the event of a row key
// (terminal:seq:hash, uploadstate.RowKey) with that content.
func (u *Uploader) holdsEvent(ctx context.Context, key string) (bool, error) {
	rest, hash, ok := cutLast(key)
	if !ok {
		return false, nil
	}
	terminal, seqText, ok := cutLast(rest)
	seq, err := strconv.ParseInt(seqText, 10, 64)
	if !ok || err != nil {
		return false, nil
	}
	st, found, err := u.ledger.Lookup(ctx, terminal, seq)
	if err != nil || !found {
		return false, err
	}
	return st.Final && st.Status == wire.AckAccepted && st.Hash == hash, nil
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// inTx runs fn in a transaction of db and commits it.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
