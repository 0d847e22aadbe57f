package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/posgate/posgate/hq-sync/hqstore"
)

// A store's flow exceptions (a replayed sale or refund whose receipt prints a flow number
// another transaction of the date holds: two customers' receipts carry one number) are
// listed among the report's exceptions, as kind ExceptionFlow, open or resolved with the
// manager's note.

// ExceptionFlow is the kind of a flow exception among a report's exceptions.
const ExceptionFlow = "flow"

// CodeFlowTaken is the code of every flow exception.
const CodeFlowTaken = "flow_number_taken"

// flowExceptions returns the report's entries of the flow exceptions HQ holds.
func flowExceptions(xs []hqstore.StoredFlowException) []StoreException {
	out := make([]StoreException, len(xs))
	for i := range xs {
		x := &xs[i]
		holder := "another transaction"
		if x.HeldBy != "" {
			holder = x.HeldBy
		}
		out[i] = StoreException{Kind: ExceptionFlow, Store: x.Store, BusinessDate: x.BusinessDate, Terminal: x.Terminal,
			Seq: x.Seq, Code: CodeFlowTaken, Detail: fmt.Sprintf("the %s's receipt prints flow no. %d, which %s holds; booked as no. %d",
				x.Kind, x.FlowGiven, holder, x.FlowBooked),
			FlowGiven: x.FlowGiven, FlowBooked: x.FlowBooked, HeldBy: x.HeldBy, Resolved: x.Resolved, Resolution: x.Resolution}
	}
	return out
}

// withFlows returns the exceptions xs and the flow exceptions fs in one list, by business
// date, store, kind, terminal, seq and SKU.
func withFlows(xs []StoreException, fs []hqstore.StoredFlowException) []StoreException {
	out := append(slices.Clip(xs), flowExceptions(fs)...)
	slices.SortStableFunc(out, func(a, b StoreException) int {
		return cmp.Or(cmp.Compare(a.BusinessDate, b.BusinessDate), cmp.Compare(a.Store, b.Store),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Terminal, b.Terminal), cmp.Compare(a.Seq, b.Seq),
			cmp.Compare(a.SKU, b.SKU))
	})
	return out
}

// dateExceptions reads the exceptions and flow exceptions of a date, of one store or all.
func dateExceptions(ctx context.Context, st hqstore.Storage, date, store string) ([]StoreException, error) {
	xs, err := st.Exceptions(ctx, date, store)
	if err != nil {
		return nil, err
	}
	fs, err := st.FlowExceptions(ctx, date, store, false)
	if err != nil {
		return nil, err
	}
	return withFlows(storeExceptions(xs), fs), nil
}

// openExceptions reads the open exceptions and flow exceptions of every date, of one store
// or all.
func openExceptions(ctx context.Context, st hqstore.Storage, store string) ([]StoreException, error) {
	xs, err := st.OpenExceptions(ctx, store)
	if err != nil {
		return nil, err
	}
	fs, err := st.FlowExceptions(ctx, "", store, true)
	if err != nil {
		return nil, err
	}
	return withFlows(storeExceptions(xs), fs), nil
}
