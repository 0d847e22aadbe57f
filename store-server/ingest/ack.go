package ingest

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// ackAll sends the group's acks after its commit: one acks message per terminal for all of
// its up messages in the group (at most wire.MaxBatchEvents acks each), in the order the
// events came. A terminal that sent several live events in quick succession gets their
// verdicts in one message, and the broker carries one message instead of many.
func (in *Ingest) ackAll(msgs []groupMsg) {
	type dest struct{ store, terminal string }
	var order []dest
	byDest := map[dest][]wire.Ack{}
	for _, m := range msgs {
		if m.skip {
			continue
		}
		d := dest{m.store, m.terminal}
		acks, seen := byDest[d]
		for _, x := range m.items {
			if x.ack.Status != "" {
				acks = append(acks, x.ack)
			}
		}
		if len(acks) == 0 {
			continue
		}
		if !seen {
			order = append(order, d)
		}
		byDest[d] = acks
	}
	for _, d := range order {
		for acks := byDest[d]; len(acks) > 0; {
			n := min(len(acks), wire.MaxBatchEvents)
			in.publishAcks(d.store, d.terminal, acks[:n])
			acks = acks[n:]
		}
	}
	in.publishResends(msgs)
	if o := in.cfg.Observer; o != nil && len(order) > 0 {
		now := time.Now()
		for _, m := range msgs {
			if !m.skip && slices.ContainsFunc(m.items, func(x *item) bool { return x.ack.Status != "" }) {
				o.Acked(now.Sub(m.arrived))
			}
		}
	}
}

func (in *Ingest) publishAcks(store, terminal string, acks []wire.Ack) {
	body, err := json.Marshal(wire.Acks{V: wire.Version, Kind: wire.KindAcks, Store: store, Terminal: terminal, Acks: acks})
	if err != nil {
		in.log.Error("encode acks", "err", err)
		return
	}
	if err := in.cfg.Out.Publish(wire.DownTopic(store, terminal), body); err != nil {
		in.log.Warn("publish acks", "terminal", terminal, "err", err)
	}
}
