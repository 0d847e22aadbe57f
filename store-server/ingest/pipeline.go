package ingest

import (
	"context"
	"errors"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/store"
)

// item is one event on its way through a group.
type item struct {
	msg      int // index of its message in the group
	ack      wire.Ack
	done     bool // ack decided without the ledger (out of order, bad topic)
	env      wire.Envelope
	payload  wire.Payload
	live     bool
	rec      *ledger.Record
	recIndex int
	op       int   // index in the gate ops, -1 if none
	dupOf    *item // the same key earlier in this group: answered with its result
	// overFinal: rec is a conflict record, the other content of a key the ledger holds
	// final (order); the ledger lookup, not this item, knows the key's original content.
	overFinal bool
	// replay: rec books an event the terminal sent again with the store's first answer
	// (catchup.go): the gate does not decide it.
	replay bool
	// resend, if not nil, asks the terminal to send events again (with the group's acks).
	resend *wire.Resend
}

type groupMsg struct {
	arrived         time.Time
	store, terminal string
	items           []*item
	skip            bool // undecodable: nothing to ack
}

// process decides and commits a group of up messages, then acks them. It reports whether
// the group holds replays the gate did not see (catchup.go).
func (in *Ingest) process(ctx context.Context, group []upMsg) (replays bool) {
	msgs := make([]groupMsg, len(group))
	var items []*item
	// Per terminal: the next seq as this group advances it.
	next := map[string]int64{}
	// nextOf also says whether the terminal is known: the ledger holds an event of it, or
	// this process gave it one.
	nextOf := func(t string) (int64, bool) {
		if n, ok := next[t]; ok {
			return n, true
		}
		if n, ok := in.next[t]; ok {
			return n, true
		}
		return 1, false
	}
	first := map[string]*item{} // key → the item that carries it in this group
	in.count(func(s *client.Stats) { s.Messages += int64(len(group)); s.Groups++ })
	for i, m := range group {
		gm := &msgs[i]
		_, topicTerminal, ok := wire.ParseUpTopic(m.topic)
		up, err := m.up, m.err
		// A topic whose terminal is no terminal id is no terminal's: its events are not
		// filed under that name, which would be a terminal of the ledger, the API and the
		// metrics for good, one per name a publisher chose.
		if ok && err == nil && !wire.ValidID(topicTerminal) {
			err = errors.New("the topic's terminal is not a terminal id")
		}
		if !ok || err != nil {
			gm.skip = true
			in.count(func(s *client.Stats) { s.Bad++ })
			in.log.Warn("undecodable up message", "topic", m.topic, "err", err)
			continue
		}
		gm.store, gm.terminal, gm.arrived = in.cfg.Store, topicTerminal, m.arrived
		for k, it := range up.Items {
			x := &item{msg: i, op: -1, env: it.Env}
			x.ack = wire.Ack{Seq: it.Seq, Key: wire.Key(topicTerminal, it.Seq)}
			gm.items = append(gm.items, x)
			items = append(items, x)
			in.count(func(s *client.Stats) { s.Events++ })
			if it.Seq <= 0 {
				x.done = true // nothing to ack it by; counted as bad
				continue
			}
			if it.Err == nil && it.Env.Terminal != topicTerminal {
				x.ack.Status, x.ack.Code = wire.AckRejected, CodeTerminalMismatch
				x.ack.Message = "the event's terminal is not the topic's terminal"
				x.done = true
				continue
			}
			x.live = it.Err == nil && !it.Env.Offline
			x.ack.Live = x.live
			if f := first[x.ack.Key]; f != nil && f.rec != nil && (it.Err != nil || f.env.Hash == it.Env.Hash || !f.overFinal) {
				if it.Err == nil && f.env.Hash != it.Env.Hash {
					// Other content for a key an earlier event of this group carries (two
					// devices with one terminal id, a restored till and its old self sending
					// at once). The till keeps it, so the ledger parks it behind the first
					// content, as it would in a later group; if the first is not stored
					// final (refused live), it is left unanswered, to be decided on its own.
					x.rec = otherContent(topicTerminal, it)
					continue
				}
				x.done = true
				x.dupOf = f // a resend that arrived in the same group
				continue
			}
			// Other content than a conflict record of this group for the same key: the
			// ledger's original (a duplicate) or yet another content, which order tells
			// apart from the ledger lookup.
			n, known := nextOf(topicTerminal)
			if err := in.order(ctx, x, it, m.payloads[k], m.perrs[k], topicTerminal, n, known); err != nil {
				in.log.Error("ledger lookup", "err", err)
				x.done, x.ack.Status = true, "" // no ack: the terminal resends
				continue
			}
			if x.rec != nil {
				// max: a live refusal resent offline has a seq below next; it must not
				// pull next back for the events after it.
				next[topicTerminal] = max(n, it.Seq+1)
				first[x.ack.Key] = x
				replays = replays || x.replay
			}
		}
	}
	for t, n := range next {
		in.next[t] = max(in.next[t], n)
	}
	if replays && in.Mode() == client.ModeRedis {
		in.holdBehindReplays(items)
	}
	in.decide(ctx, items)
	in.committing.Add(1)
	in.commits <- &decided{items: items, msgs: msgs}
	return replays
}

// decided is a group whose events the gate has decided, on its way to the ledger.
type decided struct {
	items []*item
	msgs  []groupMsg
}

// finish commits a decided group and returns its messages with their acks, ready to send. It
// runs on the committer goroutine, in group order. The loop has already moved each
// terminal's next seq past the group's events: an event that does not commit here is not
// acked, and its resend (a seq below next that the ledger does not hold) is decided again.
func (in *Ingest) finish(ctx context.Context, d *decided) []groupMsg {
	items, msgs := d.items, d.msgs
	in.commit(ctx, items)
	for _, x := range items {
		// A copy of an event that came twice in this group gets the first copy's answer,
		// live flag included: after a live refusal, a copy resent offline is told of the
		// live verdict and comes back again, to be decided as offline once the refusal is
		// committed.
		if f := x.dupOf; f != nil && f.ack.Status != "" {
			x.ack = f.ack
			if f.ack.Status == wire.AckAccepted {
				x.ack.Status = wire.AckDuplicate
			}
		}
	}
	return msgs
}

// order places one event in its terminal's sequence: a replay of a final record is answered
// from the ledger; a new event (or a live refusal resent offline) gets a ledger record. An
// event beyond next is answered out_of_order and the terminal is asked to send the events
// from next again (catchup.go), unless it says that it no longer holds them (LostFrom):
// then it is taken, and the gap recorded.
func (in *Ingest) order(ctx context.Context, x *item, it wire.Item, p wire.Payload, payloadErr error, terminal string, next int64, known bool) error {
	var gap *ledger.SeqGap
	switch {
	case it.Seq > next:
		if gap = in.lost(it, next); gap != nil {
			break
		}
		x.ack.Status, x.ack.Expect = wire.AckOutOfOrder, next
		x.ack.Message = "the store expects an earlier event first"
		x.done = true
		in.count(func(s *client.Stats) { s.OutOfOrder++ })
		in.askResend(x, terminal, next, it.Seq-1)
		return nil
	case it.Seq < next:
		st, ok, err := in.cfg.Ledger.Lookup(ctx, terminal, it.Seq)
		if err != nil {
			return err
		}
		switch {
		case ok && st.Final && it.Err == nil && st.Hash != it.Env.Hash:
			// The key's original stands; the ledger parks this content, which the till
			// kept (its day close counts it), and answers the conflict.
			x.rec = otherContent(terminal, it)
			x.overFinal = true
			return nil
		case ok && st.Final:
			x.done = true
			in.count(func(s *client.Stats) { s.Replays++ })
			x.ack = replayAck(x.ack, st, it)
			return nil
		}
		// Not final (a live refusal): decide it again, whatever its content. A live refusal
		// binds nothing: the till it answered undid the step, or resends it offline to be
		// decided. Other content under its key (a till restored from a backup numbers its
		// events again) is a step that till kept; answered conflict, the till parked it and
		// counted it while the store held it nowhere, neither recorded nor parked.
	}
	x.rec = &ledger.Record{Terminal: terminal, Seq: it.Seq, Kind: it.Env.Kind, Hash: it.Env.Hash, At: it.Env.At,
		Offline: it.Env.Offline, Payload: it.Env.Payload, Final: true, Gap: gap}
	if it.Err != nil {
		reject(x, it.Err)
		return nil
	}
	if it.Env.Store != in.cfg.Store {
		reject(x, perr.New(perr.Invalid, CodeStoreMismatch, "event for store %q reached store %q", it.Env.Store, in.cfg.Store))
		return nil
	}
	if payloadErr != nil {
		reject(x, payloadErr)
		return nil
	}
	if it.Env.Replay != nil && in.replay(x, p, it.Env.Replay) {
		return nil
	}
	if sku, ok := in.unknownSKU(p, !it.Env.Offline); !ok {
		reject(x, perr.New(perr.Invalid, CodeUnknownSKU, "SKU %q is not in the store's catalog", sku))
		return nil
	}
	prices, err := in.checkPrices(terminal, p, !it.Env.Offline)
	if err != nil {
		reject(x, err)
		return nil
	}
	x.rec.Prices = prices
	x.payload = p
	x.rec.Status = wire.AckAccepted
	typed(x.rec, p)
	return nil
}

// otherContent is the ledger record of an event whose key already carries other content
// (the ledger's final record, or an earlier event of the group): the ledger parks it as a
// conflict behind the key's final record (ledger.Record.OtherContent).
func otherContent(terminal string, it wire.Item) *ledger.Record {
	return &ledger.Record{Terminal: terminal, Seq: it.Seq, Kind: it.Env.Kind, Hash: it.Env.Hash, At: it.Env.At,
		Offline: it.Env.Offline, Payload: it.Env.Payload, Final: true, Status: wire.AckConflict,
		Code: ledger.CodeIdempotencyConflict, OtherContent: true}
}

func replayAck(a wire.Ack, st ledger.Stored, it wire.Item) wire.Ack {
	switch {
	case it.Err == nil && st.Hash != it.Env.Hash:
		a.Status, a.Code = wire.AckConflict, "idempotency_conflict"
		a.Message = "this key was already used with other content; the original stands"
	case st.Status == wire.AckAccepted:
		a.Status = wire.AckDuplicate
		a.Result = &wire.Result{FlowNo: st.FlowNo, BusinessDate: st.BusinessDate, Oversold: st.Oversold}
	default:
		a.Status, a.Code, a.Message = st.Status, st.Code, st.Message
	}
	return a
}

// reject records the event as rejected. A live event's rejection is a live verdict, not
// final (docs/protocol.md): the till that waits on it undoes the step and tells the cashier
// no, so the store keeps nothing of it (parked, the manager and HQ would be shown a step the
// till took back); a till that decided the event locally meanwhile resends it offline, and
// that is decided again (an earlier catalog's SKU is recorded, a bad event parked).
func reject(x *item, err error) {
	e := perr.As(err)
	x.rec.Status, x.rec.Code, x.rec.Message = wire.AckRejected, e.Code, e.Message
	x.rec.Final = !x.live
}

// unknownSKU returns a SKU of p the store does not sell, if any. A live event must name SKUs
// of the current catalog; an offline one may name SKUs of an earlier one: a terminal sold
// them offline from its copy of the catalog before it learnt of the new version, and the
// sale happened (invariant 5). A SKU the store never had is refused either way.
func (in *Ingest) unknownSKU(p wire.Payload, live bool) (string, bool) {
	if in.cfg.Catalog == nil {
		return "", true
	}
	check := in.cfg.Catalog.Known
	if live {
		check = in.cfg.Catalog.Has
	}
	switch v := p.(type) {
	case *wire.ScanPayload:
		if !check(v.SKU) {
			return v.SKU, false
		}
	case *wire.SalePayload:
		for _, l := range v.Lines {
			if !check(l.SKU) {
				return l.SKU, false
			}
		}
	case *wire.RefundPayload:
		for _, l := range v.Lines {
			if !check(l.SKU) {
				return l.SKU, false
			}
		}
	}
	return "", true
}

// decide runs the gate for every new scan, sale and refund of the group in one Exec (one
// script call per 250 events); in degraded mode (or when the call fails) it applies the
// local limiter and leaves stock and flow numbers to the ledger.
func (in *Ingest) decide(ctx context.Context, items []*item) {
	var ops []gate.Op
	var opItems []*item
	for _, x := range items {
		if x.rec == nil || x.rec.Status != wire.AckAccepted || x.replay {
			continue
		}
		op, ok := in.op(x)
		if !ok {
			continue
		}
		x.op = len(ops)
		ops = append(ops, op)
		opItems = append(opItems, x)
	}
	if len(ops) == 0 {
		return
	}
	if in.Mode() == client.ModeRedis {
		verdicts, took, err := in.execGate(ctx, ops)
		if in.cfg.Observer != nil {
			in.cfg.Observer.GateCall(took, len(ops))
		}
		slow := took > in.cfg.BreakerSlow
		if err == nil && len(verdicts) == len(ops) {
			for i, x := range opItems {
				in.applyVerdict(x, verdicts[i])
			}
			if slow {
				in.gateFailed(errors.New("slow gate call"))
			} else {
				in.failures = 0
			}
			return
		}
		in.gateFailed(err)
		if perr.KindOf(err) == perr.Unavailable {
			// Redis cannot be reached (refused, timed out, failing over): no reason to wait
			// for more failures; sell on the ledger until a rebuild brings Redis back.
			in.setMode(client.ModeDegraded)
		}
		if in.Mode() == client.ModeRedis {
			// Not yet open: leave these events unacked; the terminals resend them.
			for _, x := range opItems {
				x.rec, x.done, x.ack.Status = nil, true, ""
			}
			return
		}
	}
	now := in.cfg.Now()
	for _, x := range opItems {
		in.degraded(x, ops[x.op], now)
	}
}

func (in *Ingest) op(x *item) (gate.Op, bool) {
	op := gate.Op{Terminal: x.rec.Terminal, Seq: x.rec.Seq, Hash: x.rec.Hash, Live: x.live,
		BusinessDate: in.cfg.Ledger.BusinessDate(x.rec.At)}
	switch p := x.payload.(type) {
	case *wire.ScanPayload:
		op.Kind, op.Lines = gate.OpScan, []store.Line{{SKU: p.SKU, Qty: p.Qty}}
	case *wire.SalePayload:
		op.Kind, op.Total, op.ByMethod = gate.OpSale, p.Total, store.SaleByMethod(p)
		for _, l := range p.Lines {
			op.Lines = append(op.Lines, store.Line{SKU: l.SKU, Qty: l.Qty})
		}
	case *wire.RefundPayload:
		op.Kind, op.Total, op.Restock = gate.OpRefund, p.Amount, p.Restock
		op.ByMethod = map[string]money.Fen{p.Method: p.Amount}
		for _, l := range p.Lines {
			op.Lines = append(op.Lines, store.Line{SKU: l.SKU, Qty: l.Qty})
		}
	default:
		return op, false
	}
	return op, true
}

// applyVerdict turns the gate's verdict into the event's ledger record.
func (in *Ingest) applyVerdict(x *item, v gate.Verdict) {
	switch v.Status {
	case wire.AckAccepted, wire.AckDuplicate:
		x.rec.FlowNo, x.rec.Oversold = v.FlowNo, v.Oversold
	case wire.AckConflict:
		x.rec.Status, x.rec.Code, x.rec.Message = wire.AckConflict, v.Code, v.Message
	case wire.AckRejected, wire.AckRateLimited:
		x.rec.Status, x.rec.Code, x.rec.Message, x.rec.Final = v.Status, v.Code, v.Message, false
		x.ack.RetryAfterMs = v.RetryAfter.Milliseconds()
		// A refusal for stock is the answer a projection that lost stock gives: the loop
		// audits Redis against the ledger after the group (at most once in 5 s).
		if v.Code == gate.CodeOutOfStock {
			in.auditDue = true
		}
	}
}

// commit writes every record of the group in one ledger transaction and fills in the acks.
func (in *Ingest) commit(ctx context.Context, items []*item) {
	var recs []ledger.Record
	var owners []*item
	for _, x := range items {
		if x.rec == nil {
			continue
		}
		x.recIndex = len(recs)
		recs = append(recs, *x.rec)
		owners = append(owners, x)
	}
	if len(recs) == 0 {
		return
	}
	start := time.Now()
	outs, err := in.cfg.Ledger.Commit(context.WithoutCancel(ctx), recs)
	if in.cfg.Observer != nil {
		in.cfg.Observer.Commit(time.Since(start), len(recs))
	}
	if err != nil {
		at := in.cfg.Now()
		in.count(func(s *client.Stats) {
			s.CommitError++
			s.LastCommitError, s.LastCommitErrorAt = err.Error(), at.UTC()
		})
		in.log.Error("ledger commit failed; no acks sent, terminals will resend", "err", err)
		for _, x := range owners {
			x.done, x.ack.Status = true, ""
		}
		return
	}
	blocked := map[string]bool{}
	needRebuild := false
	for i, x := range owners {
		o := outs[i]
		t := x.rec.Terminal
		if o.Undecided {
			// Other content of a key whose first content this group did not store final
			// (refused live): no ack; resent, it is decided as the key's own event.
			x.done, x.ack.Status = true, ""
			continue
		}
		if o.Err != nil || blocked[t] {
			// This record (or an earlier one of its terminal) did not commit: no ack, and the
			// terminal's later events wait; the projection is rebuilt before they are retried.
			if o.Err != nil {
				in.log.Error("record not committed", "terminal", t, "seq", x.rec.Seq, "err", o.Err)
				needRebuild = true
			}
			blocked[t] = true
			x.done, x.ack.Status = true, ""
			continue
		}
		x.ack.Status, x.ack.Code, x.ack.Message = o.Status, o.Code, o.Message
		if g := x.rec.Gap; o.GapRecorded {
			in.count(func(s *client.Stats) { s.SeqGaps++ })
			in.log.Warn("a till's events are missing from the ledger: its next event was taken past them",
				"terminal", t, "from_seq", g.From, "to_seq", g.To, "reason", g.Reason)
		}
		switch o.Status {
		case wire.AckAccepted:
			x.ack.Result = &wire.Result{FlowNo: o.FlowNo, BusinessDate: o.BusinessDate, Oversold: o.Oversold}
			if o.Duplicate {
				x.ack.Status = wire.AckDuplicate
				in.count(func(s *client.Stats) { s.Replays++ })
			} else {
				in.count(func(s *client.Stats) { s.Accepted++ })
			}
		case wire.AckRejected, wire.AckRateLimited:
			// A live refusal is not final: the record said so (the gate's verdict, a live
			// event's bad input), or the ledger refused a live sale for stock (degrade mode,
			// CheckStock), which the record sent as final. Only a final rejection is parked.
			if x.rec.Final && !(x.rec.CheckStock && o.Code == ledger.CodeOutOfStock) {
				in.count(func(s *client.Stats) { s.Rejected++ })
			} else {
				in.count(func(s *client.Stats) { s.Refused++ })
			}
		default:
			in.count(func(s *client.Stats) { s.Rejected++ })
		}
		x.done = true
	}
	if needRebuild && in.Mode() == client.ModeRedis {
		in.Rebuild()
	}
}
