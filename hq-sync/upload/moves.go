package upload

import (
	"context"
	"fmt"
	"path"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/store-server/ledger"
)

// The store's stock adjustments go to HQ beside the batches (side.go), on hqwire.MovesPath:
// HQ keeps them so that a store that lost its ledger with no backup can rebuild its stock
// (store-server restore --from-hq). They are sent in the ledger's order after the one HQ
// last acknowledged (the state's moves_through).

func movesRoute() *sideRoute {
	return &sideRoute{what: "stock moves", segment: path.Base(hqwire.MovesPath), through: "moves_through",
		top: func(ctx context.Context, l *ledger.Ledger) (int64, error) { return l.MaxAdjustment(ctx) },
		next: func(ctx context.Context, u *Uploader, l *ledger.Ledger, through int64) (sideBatch, error) {
			moves, err := l.Adjustments(ctx, through, hqwire.MaxMovesBatch)
			if err != nil || len(moves) == 0 {
				return sideBatch{last: through}, err
			}
			last := moves[len(moves)-1].N
			id := fmt.Sprintf("m-%d-%d", moves[0].N, last)
			return sideBatch{id: id, items: len(moves), last: last, receipt: &hqwire.MovesReceipt{},
				body: &hqwire.MovesBatch{V: hqwire.Version, Store: u.cfg.Store, ID: id, Moves: moves, SentAt: u.cfg.Now().UTC()}}, nil
		}}
}
