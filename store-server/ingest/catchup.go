package ingest

import (
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ledger"
)

// Catch-up. A till sends its events in order and drops each once the store acknowledged
// it, but keeps it in its outbox until pruned. When the store meets a till's event beyond
// the next seq its ledger expects (the ledger was restored from a backup, started empty, or
// lost events any other way), it answers out_of_order and asks the till on its down topic
// to send the events from the first one it lacks again (wire.Resend). The till replays what
// it still holds, in order, each marked with the store's first answer (wire.Replay): an
// accepted event is booked with the flow number it was given (the gate is not asked: Redis
// takes the group from the ledger afterwards), a parked one is parked again, a live refusal
// is recorded as one. Where the till no longer holds events (pruned), its next event says
// so (LostFrom): it is taken and the gap recorded, with the reason.

// resendAsk is the last resend request made to a terminal.
type resendAsk struct {
	from int64
	at   time.Time
}

// askAgain is how long the store waits for a till to act on a resend request before it
// asks again for the same events.
const askAgain = 2 * time.Second

// askResend asks terminal, with the acks of x's group, to send its events from..to again,
// unless it was just asked for them.
func (in *Ingest) askResend(x *item, terminal string, from, to int64) {
	now := time.Now()
	if a, ok := in.asked[terminal]; ok && a.from == from && now.Sub(a.at) < askAgain {
		return
	}
	in.asked[terminal] = resendAsk{from: from, at: now}
	x.resend = &wire.Resend{V: wire.Version, Kind: wire.KindResend, Store: in.cfg.Store, Terminal: terminal,
		From: from, To: to}
	in.count(func(s *client.Stats) { s.Resends++ })
	in.log.Info("a till's events are missing from the ledger: asking for them again",
		"terminal", terminal, "from_seq", from, "to_seq", to)
}

// lost returns the gap an event beyond next takes: the till no longer holds the events from
// next on (its LostFrom is at or before next). Nil: the event is out of order. An event of
// another store's (a till moved here with its old settings) takes no gap.
func (in *Ingest) lost(it wire.Item, next int64) *ledger.SeqGap {
	if it.Err != nil || it.Env.Store != in.cfg.Store || it.Env.LostFrom <= 0 || it.Env.LostFrom > next {
		return nil
	}
	return &ledger.SeqGap{Terminal: it.Env.Terminal, From: next, To: it.Seq - 1, Reason: ledger.GapPruned}
}

// replay fills in x's record from the store's first answer to the event, as the till holds
// it, and reports whether it did (an unknown status is decided as a new offline event). A
// replayed sale's unit prices are held to the store's catalog as an offline sale's are: the
// till vouches for its verdict, not for its prices, so a line at another price than the
// catalog's (changed since, or never the store's) is booked as paid and flagged as a price
// exception, never taken silently.
func (in *Ingest) replay(x *item, p wire.Payload, r *wire.Replay) bool {
	rec := x.rec
	switch r.Status {
	case wire.ReplayAccepted:
		x.payload, x.replay = p, true
		rec.Status, rec.FlowNo, rec.Replayed, rec.Oversold = wire.AckAccepted, r.FlowNo, true, r.Oversold
		// Held as offline: never refused (the customer paid), only flagged.
		prices, err := in.checkPrices(rec.Terminal, p, false)
		if err != nil {
			in.log.Error("price check of a replayed event", "terminal", rec.Terminal, "seq", rec.Seq, "err", err)
		}
		rec.Prices = prices
		typed(rec, p)
	case wire.ReplayParked, wire.ReplayRefused:
		rec.Status, rec.Code = wire.AckRejected, r.Code
		if rec.Code == "" {
			rec.Code = CodeReplayed
		}
		rec.Message = "refused by the store before it lost its ledger; replayed by the till"
		// A live refusal binds nothing (the till undid the step); a parked event stays
		// parked.
		rec.Final = r.Status == wire.ReplayParked
	default:
		return false
	}
	in.count(func(s *client.Stats) { s.Replayed++ })
	return true
}

// CodeReplayed is the code of a replayed refusal the till kept no code of.
const CodeReplayed = "replayed_refusal"

// typed puts an accepted event's decoded payload in its record.
func typed(rec *ledger.Record, p wire.Payload) {
	switch v := p.(type) {
	case *wire.SalePayload:
		rec.Sale = v
	case *wire.RefundPayload:
		rec.Refund = v
	case *wire.DayClosePayload:
		rec.DayClose = v
	case *wire.ScanPayload:
		rec.Scan = v
	}
}

// publishResends sends the group's resend requests, after its acks.
func (in *Ingest) publishResends(msgs []groupMsg) {
	for _, m := range msgs {
		for _, x := range m.items {
			if x.resend == nil {
				continue
			}
			body, err := wire.MarshalResend(x.resend.Store, x.resend.Terminal, x.resend.From, x.resend.To)
			if err != nil {
				in.log.Error("encode resend", "err", err)
				continue
			}
			if err := in.cfg.Out.Publish(wire.DownTopic(x.resend.Store, x.resend.Terminal), body); err != nil {
				in.log.Warn("publish resend", "terminal", x.resend.Terminal, "err", err)
			}
		}
	}
}

// holdBehindReplays holds back the new events of a group that carries replays and that the
// gate would decide: Redis does not hold the replays' stock until the group is committed
// and Redis rebuilt from the ledger, and a live sale it let through on the stock the
// replays take would oversell. A live event gets no answer (its till decides it locally
// and sends it again offline at once); another is paced (rate_limited, the sync lane's
// verdict): it comes back to the next group, decided on a Redis that holds the replays.
func (in *Ingest) holdBehindReplays(items []*item) {
	for _, x := range items {
		if x.rec == nil || x.replay || x.rec.Status != wire.AckAccepted || x.rec.OtherContent {
			continue
		}
		switch x.payload.(type) {
		case *wire.ScanPayload, *wire.SalePayload, *wire.RefundPayload:
		default:
			continue
		}
		x.rec, x.done = nil, true
		if x.live {
			x.ack.Status = ""
			continue
		}
		x.ack.Status, x.ack.Code, x.ack.RetryAfterMs = wire.AckRateLimited, CodeCatchingUp, catchUpPause.Milliseconds()
		x.ack.Message = "the store is booking events a till sent again; send this one shortly"
		in.count(func(s *client.Stats) { s.HeldBehindReplays++ })
	}
}

// CodeCatchingUp is the code of an event held back behind replays (holdBehindReplays).
const CodeCatchingUp = "catching_up"

// catchUpPause is how long a till waits before it sends an event held back behind replays.
const catchUpPause = 200 * time.Millisecond
