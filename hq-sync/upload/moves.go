package upload

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
)

// The store's stock adjustments go to HQ beside the batches, on a route of their own
// (hqwire.MovesPath, next to the batches' path): HQ keeps them so that a store that lost its
// ledger with no backup can rebuild its stock (store-server restore --from-hq). They are
// sent after the one HQ last acknowledged (the state's moves_through), in the ledger's
// order, whenever the uploader has no batch to send. A v0.1.0 serve answers the route 404:
// the moves wait and are tried again every RefusedRetry; the batches go on as before.

// movesEvery is how often an idle uploader looks for new adjustments.
const movesEvery = 2 * time.Second

// movesPath is the path of HQ's moves route beside the batches' path.
func movesPath(batches string) string {
	return strings.TrimSuffix(strings.TrimSuffix(batches, "/"), "/batches") + "/stock-moves"
}

// sendMoves sends the adjustments HQ does not hold yet, if it is time to. It returns when
// they are all sent or HQ did not take them.
func (u *Uploader) sendMoves(ctx context.Context) error {
	if time.Now().Before(u.movesAt) {
		return nil
	}
	u.movesAt = time.Now().Add(movesEvery)
	kv, err := u.kv(ctx)
	if err != nil {
		return err
	}
	through := atoi(kv["moves_through"])
	u.ledgerMu.RLock()
	l := u.ledger
	u.ledgerMu.RUnlock()
	top, err := l.MaxAdjustment(ctx)
	if err != nil {
		return err
	}
	if top < through {
		// A ledger restored from a backup, or refilled: send its adjustments again (HQ keeps
		// one of each by id).
		through = 0
	}
	for ctx.Err() == nil {
		moves, err := l.Adjustments(ctx, through, hqwire.MaxMovesBatch)
		if err != nil || len(moves) == 0 {
			return err
		}
		last := moves[len(moves)-1].N
		b := hqwire.MovesBatch{V: hqwire.Version, Store: u.cfg.Store, ID: fmt.Sprintf("m-%d-%d", moves[0].N, last),
			Moves: moves, SentAt: u.cfg.Now().UTC()}
		status, err := u.postMoves(ctx, &b)
		if status == http.StatusNotFound {
			u.movesAt = time.Now().Add(u.cfg.RefusedRetry)
			u.log.Info("HQ does not take stock moves yet (a serve before v0.2.0); trying again later", "retry_in", u.cfg.RefusedRetry)
			return nil
		}
		if err != nil {
			return err
		}
		through = last
		if err := inTx(ctx, u.state.W, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('moves_through', ?)
				ON CONFLICT (k) DO UPDATE SET v = excluded.v`, strconv.FormatInt(through, 10))
			return err
		}); err != nil {
			return err
		}
		u.log.Info("stock moves sent to HQ", "moves", len(moves), "through", through)
	}
	return nil
}

// postMoves sends one moves batch, signed, and checks HQ's signed receipt. It returns HQ's
// status.
func (u *Uploader) postMoves(ctx context.Context, b *hqwire.MovesBatch) (int, error) {
	var rc hqwire.MovesReceipt
	return u.postSigned(ctx, movesPath, b.ID, b, &rc)
}
