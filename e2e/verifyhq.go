package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/hq-sync/hqstore/postgres"
	"github.com/posgate/posgate/hq-sync/hqstore/sqlite"
	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
)

// What HQ holds of what the store's ledger flagged beside its batches: its flow exceptions
// (a replayed sale or refund whose receipt prints a flow number another transaction holds),
// which the uploader sends on a route of their own and HQ keeps in the latest state it was
// sent.

// VerifyHQ adds to rep, once the store's uploader has sent HQ every change of the ledger's
// flow exceptions, whether HQ holds them as the ledger does (VerifyFlowsAtHQ).
func VerifyHQ(ctx context.Context, s *StoreServer, hq *Serve, rep *Report) {
	VerifyFlowsAtHQ(ctx, s.Manager(), s.Opts.Store, hq.Opts.DB, rep)
}

// VerifyFlowsAtHQ waits until the uploader of the store (its manager API m) has no flow
// exception change left to send (GET /v1/hq), then reads the ledger's flow exceptions,
// resolved ones too, and those HQ holds of store in its database db (serve's --db: a SQLite
// path, read beside the running serve, or a postgres:// URL), and compares them
// (CompareFlows) into rep.
func VerifyFlowsAtHQ(ctx context.Context, m *client.Client, store, db string, rep *Report) {
	var last string
	for {
		a, err := m.HQ(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case a.Upload == nil:
			last = "no uploader state"
		default:
			last = fmt.Sprintf("%d flow exception changes waiting", a.Upload.FlowsWaiting)
		}
		if err == nil && a.Upload != nil && a.Upload.FlowsWaiting == 0 {
			break
		}
		select {
		case <-ctx.Done():
			rep.Add(false, "the uploader sent HQ every flow exception change: %v (%s)", ctx.Err(), last)
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	led, err := m.FlowExceptions(ctx, "", true)
	if err != nil {
		rep.Add(false, "store flow exceptions: %v", err)
		return
	}
	hq, err := hqFlows(ctx, db, store)
	if err != nil {
		rep.Add(false, "HQ's flow exceptions: %v", err)
		return
	}
	CompareFlows(rep, store, led.Flows, hq)
}

// hqFlows reads the flow exceptions HQ holds of store, every date, resolved ones too.
func hqFlows(ctx context.Context, db, store string) ([]hqstore.StoredFlowException, error) {
	var st hqstore.Storage
	var err error
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		st, err = postgres.Open(ctx, db)
	} else {
		st, err = sqlite.Open(ctx, strings.TrimPrefix(db, "sqlite:"))
	}
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.FlowExceptions(ctx, "", store, false)
}

// CompareFlows adds to rep whether HQ holds the flow exceptions of store (hq: what HQ holds,
// of store and any other) as the store's ledger does (ledger: all of them, resolved ones
// too): each of the ledger's at HQ with the same state (kind, flow numbers, the transaction
// holding the receipt's number, times, business date, open or resolved, and the
// resolution), and none at HQ that the ledger lacks. A line for each difference, and one
// line that counts them.
func CompareFlows(rep *Report, store string, ledger []client.FlowException, hq []hqstore.StoredFlowException) {
	at := map[string]hqstore.StoredFlowException{}
	for _, x := range hq {
		if x.Store == store {
			at[wire.Key(x.Terminal, x.Seq)] = x
		}
	}
	differ, resolved, held := 0, 0, len(at)
	for _, l := range ledger {
		k := wire.Key(l.Terminal, l.Seq)
		if l.Resolved {
			resolved++
		}
		h, ok := at[k]
		delete(at, k)
		if !ok {
			differ++
			rep.Add(false, "flow exception %s of %s (flow %d booked as %d): in the store's ledger, not at HQ",
				k, l.BusinessDate, l.FlowGiven, l.FlowBooked)
			continue
		}
		if d := flowDiffers(l, h.FlowException); d != "" {
			differ++
			rep.Add(false, "flow exception %s of %s: the ledger's and HQ's differ in %s", k, l.BusinessDate, d)
		}
	}
	for k, h := range at {
		differ++
		rep.Add(false, "flow exception %s of %s (flow %d booked as %d): at HQ, not in the store's ledger",
			k, h.BusinessDate, h.FlowGiven, h.FlowBooked)
	}
	rep.Add(differ == 0, "flow exceptions: %d in the store's ledger (%d resolved), %d at HQ, %d differ",
		len(ledger), resolved, held, differ)
}

// flowDiffers names the fields of a flow exception's state in which the ledger's (l) and
// HQ's (h) differ, with both values; "" when none does.
func flowDiffers(l client.FlowException, h hqwire.FlowException) string {
	var d []string
	field := func(name string, same bool, lv, hv any) {
		if !same {
			d = append(d, fmt.Sprintf("%s (ledger %v, HQ %v)", name, lv, hv))
		}
	}
	field("kind", l.Kind == h.Kind, l.Kind, h.Kind)
	field("flow_given", l.FlowGiven == h.FlowGiven, l.FlowGiven, h.FlowGiven)
	field("flow_booked", l.FlowBooked == h.FlowBooked, l.FlowBooked, h.FlowBooked)
	field("held_by", l.HeldBy == h.HeldBy, fmt.Sprintf("%q", l.HeldBy), fmt.Sprintf("%q", h.HeldBy))
	field("at", l.At.Equal(h.At), l.At, h.At)
	field("business_date", l.BusinessDate == h.BusinessDate, l.BusinessDate, h.BusinessDate)
	field("resolved", l.Resolved == h.Resolved, l.Resolved, h.Resolved)
	field("resolved_at", l.ResolvedAt.Equal(h.ResolvedAt), l.ResolvedAt, h.ResolvedAt)
	field("resolution", l.Resolution == h.Resolution, fmt.Sprintf("%q", l.Resolution), fmt.Sprintf("%q", h.Resolution))
	return strings.Join(d, ", ")
}
