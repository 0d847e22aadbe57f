package uplink

import (
	"context"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// onDown applies one acks message: all its transitions in one transaction, under the lock
// that Await's deadline also takes, so that a verdict is either delivered to its waiter or
// the event is already decided locally — never both.
func (u *Uplink) onDown(ctx context.Context, payload []byte) {
	msg, ok := u.decodeDown(payload)
	if !ok {
		return
	}
	now := u.cfg.Now()
	u.mu.Lock()
	u.passedReplayLocked(msg.Acks)
	ts, deliver, verdicts := u.transitionsLocked(msg.Acks, now)
	err := u.applyLocked(ctx, ts, verdicts)
	defer u.mu.Unlock()
	if err != nil {
		u.log.Error("apply acks", "err", err)
		if len(ts) > 0 {
			u.rewindLocked(ts[0].Seq) // the events stay pending: send them again
		}
		return
	}
	u.answeredLocked(ctx, now)
	u.wakeLocked(ts, deliver)
	if len(ts) > 0 {
		u.Notify()
	}
}

// decodeDown decodes a down message and checks that it is this terminal's. A resend
// request is taken here (resendLocked); acks are returned.
func (u *Uplink) decodeDown(payload []byte) (wire.Acks, bool) {
	d, err := wire.DecodeDown(payload)
	if err != nil {
		u.log.Warn("bad down message", "err", err)
		return wire.Acks{}, false
	}
	if d.Resend != nil {
		r := d.Resend
		if r.Terminal != u.cfg.Terminal || r.Store != u.cfg.Store {
			u.log.Warn("resend for another terminal", "store", r.Store, "terminal", r.Terminal)
			return wire.Acks{}, false
		}
		u.mu.Lock()
		u.resendLocked(r.From, r.To)
		u.mu.Unlock()
		u.Notify()
		return wire.Acks{}, false
	}
	msg := *d.Acks
	if msg.Terminal != u.cfg.Terminal {
		u.log.Warn("acks for another terminal", "terminal", msg.Terminal)
		return msg, false
	}
	return msg, true
}

// transitionsLocked turns acks into the outbox's transitions, and paces or rewinds the
// sender where an ack asks for it. It returns the acks a waiting request is to be given
// (deliver), and whether a live verdict or a waiting request is involved at all.
func (u *Uplink) transitionsLocked(acks []wire.Ack, now time.Time) (ts []outbox.Transition,
	deliver map[int64]wire.Ack, verdicts bool) {
	ts = make([]outbox.Transition, 0, len(acks))
	deliver = map[int64]wire.Ack{}
	for _, a := range acks {
		_, waiting := u.waiters[a.Seq]
		verdicts = verdicts || waiting || a.Live
		switch a.Status {
		case wire.AckAccepted, wire.AckDuplicate:
			ts = append(ts, outbox.Transition{Seq: a.Seq, Ack: a, Action: outbox.Ack})
		case wire.AckRejected, wire.AckRateLimited, wire.AckConflict:
			switch {
			case a.Status == wire.AckConflict:
				// Not a verdict on the step: its key is the store's already, with other
				// content (an outbox restored from a backup reuses seqs). The store parks
				// this content and the till keeps the step, live or not: undone, the store
				// would list a step the till took back, and every step would be refused
				// until the till's seqs passed the store's.
				ts = append(ts, outbox.Transition{Seq: a.Seq, Ack: a, Action: outbox.Park})
			case a.Live && waiting:
				ts = append(ts, outbox.Transition{Seq: a.Seq, Ack: a, Action: outbox.Refuse})
			case a.Status == wire.AckRejected && !a.Live:
				ts = append(ts, outbox.Transition{Seq: a.Seq, Ack: a, Action: outbox.Park})
			case a.Live:
				// The store judged a live attempt the terminal has since decided locally:
				// deliver it again as an offline event, which the store records.
				ts = append(ts, outbox.Transition{Seq: a.Seq, Ack: a, Action: outbox.Offline})
				u.rewindLocked(a.Seq)
			default: // rate_limited on the sync lane: pace it
				u.pausedUntil = time.Now().Add(time.Duration(a.RetryAfterMs) * time.Millisecond) // monotonic (pump)
				u.rewindLocked(a.Seq)
			}
		case wire.AckOutOfOrder:
			if a.Expect > 0 && a.Expect != u.lastRewind {
				u.rewindLocked(a.Expect)
				u.lastRewind = a.Expect
			}
			continue
		default:
			u.log.Warn("unknown ack status", "status", a.Status, "seq", a.Seq)
			continue
		}
		if waiting {
			deliver[a.Seq] = a
		}
		delete(u.inflight, a.Seq)
		delete(u.liveSeen, a.Seq)
	}
	return ts, deliver, verdicts
}

// applyLocked writes the transitions to the outbox in one transaction. It is called, and
// returns, with u.mu held; a drain's acks are written without it.
func (u *Uplink) applyLocked(ctx context.Context, ts []outbox.Transition, verdicts bool) error {
	if verdicts {
		_, err := u.store.Apply(context.WithoutCancel(ctx), ts)
		return err
	}
	// A drain's acks: no request waits on them and no live verdict is in them, so
	// nothing Await does can race with them. Write them without holding the lane's
	// lock, so that the next batch is published meanwhile.
	u.mu.Unlock()
	_, err := u.store.Apply(context.WithoutCancel(ctx), ts)
	u.mu.Lock()
	return err
}

// answeredLocked records that the store answered at now: every message sent is answered,
// and a silence kept for a restart (keepSilence), if any, is over.
func (u *Uplink) answeredLocked(ctx context.Context, now time.Time) {
	u.lastAck, u.unanswered, u.unansweredMono = now, time.Time{}, time.Time{}
	if u.silenceKept {
		if err := u.store.SetKV(context.WithoutCancel(ctx), outbox.KVSilentSince, 0); err != nil {
			u.log.Error("record the store's answer", "err", err)
		} else {
			u.silenceKept = false
		}
	}
}

// wakeLocked gives each waiting request the verdict on its event, as written (ts).
func (u *Uplink) wakeLocked(ts []outbox.Transition, deliver map[int64]wire.Ack) {
	for _, t := range ts {
		a, ok := deliver[t.Seq]
		if !ok && (t.Action == outbox.Ack || t.Action == outbox.Park) {
			// A request that started waiting while the acks were written (a retry of one
			// committed before a restart): delivered or parked, the event's fate is final,
			// and the request learns it now, not as "decided locally" at its deadline.
			a, ok = t.Ack, true
		}
		if w := u.waiters[t.Seq]; ok && w != nil {
			w.ack, w.action = &a, t.Action
			close(w.done)
			delete(u.waiters, t.Seq)
		}
	}
}

func (u *Uplink) onCatalog(ctx context.Context, payload []byte) {
	c, err := wire.DecodeCatalog(payload)
	if err != nil {
		u.log.Warn("bad catalog", "err", err)
		return
	}
	if c.Store != u.cfg.Store {
		u.log.Warn("catalog for another store", "store", c.Store)
		return
	}
	if !u.catalogSigned(ctx, c) {
		return
	}
	u.takeCatalog(ctx, c)
}

// takeCatalog keeps c, signed by the store's key, when it is newer than the one held.
func (u *Uplink) takeCatalog(ctx context.Context, c wire.Catalog) {
	changed, err := u.store.ReplaceCatalog(context.WithoutCancel(ctx), c)
	if err != nil {
		u.log.Error("store catalog", "err", err)
		return
	}
	if changed {
		u.log.Info("catalog updated", "version", c.Version, "items", len(c.Items))
	}
}

// onSettings keeps the store's settings (supervisors, refund rules) when they are newer than
// the ones held.
func (u *Uplink) onSettings(ctx context.Context, payload []byte) {
	st, err := wire.DecodeSettings(payload)
	if err != nil {
		u.log.Warn("bad settings", "err", err)
		return
	}
	if st.Store != u.cfg.Store {
		u.log.Warn("settings for another store", "store", st.Store)
		return
	}
	changed, err := u.store.ReplaceSettings(context.WithoutCancel(ctx), st, payload)
	if err != nil {
		u.log.Error("store settings", "err", err)
		return
	}
	if changed {
		u.log.Info("settings updated", "version", st.Version, "supervisors", len(st.Supervisors))
	}
}
