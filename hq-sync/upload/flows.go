package upload

import (
	"context"
	"fmt"
	"path"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/store-server/ledger"
)

// The store's flow exceptions go to HQ beside the batches (side.go), on hqwire.FlowsPath:
// a v0.1.0 serve refuses a batch holding an exception kind it does not know, so they never
// go in a batch. The uploader sends the state of each flow exception changed after the last
// change HQ acknowledged (the state's flows_through).

func flowsRoute() *sideRoute {
	return &sideRoute{what: "flow exceptions", segment: path.Base(hqwire.FlowsPath), through: "flows_through",
		top: func(ctx context.Context, l *ledger.Ledger) (int64, error) { return l.MaxFlowChange(ctx) },
		next: func(ctx context.Context, u *Uploader, l *ledger.Ledger, through int64) (sideBatch, error) {
			xs, last, err := l.FlowExceptionsAfter(ctx, through, hqwire.MaxFlowBatch)
			if err != nil || len(xs) == 0 {
				return sideBatch{last: through}, err
			}
			for i := range xs {
				xs[i].Resolution = fitText(xs[i].Resolution) // as an exception's: a refused batch would hold back the rest
			}
			id := fmt.Sprintf("f-%d-%d", xs[0].Change, last)
			return sideBatch{id: id, items: len(xs), last: last, receipt: &hqwire.FlowReceipt{},
				body: &hqwire.FlowBatch{V: hqwire.Version, Store: u.cfg.Store, ID: id, Exceptions: xs, SentAt: u.cfg.Now().UTC()}}, nil
		}}
}
