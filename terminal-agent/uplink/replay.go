package uplink

import "github.com/posgate/posgate/internal/wire"

// resendLocked takes the store's request to send its events from..to again (wire.Resend:
// its ledger lacks them): the lane goes back to from and sends, in order, every event of
// the window the outbox still holds as a replay, then its pending events as before
// (outbox.Store.Sendable). A window already open is widened.
func (u *Uplink) resendLocked(from, to int64) {
	if u.replayTo > 0 {
		from, to = min(from, u.replayFrom), max(to, u.replayTo)
	}
	u.replayFrom, u.replayTo = from, to
	u.log.Info("the store asks for events again", "from_seq", from, "to_seq", to)
	u.rewindLocked(from)
	u.lastRewind = 0
}

// passedReplayLocked closes the replay window once the store has answered its last event
// (or one after it) finally: the store holds the window then.
func (u *Uplink) passedReplayLocked(acks []wire.Ack) {
	if u.replayTo == 0 {
		return
	}
	for _, a := range acks {
		if a.Seq >= u.replayTo && a.Status.Final() {
			u.log.Info("the store holds the events it asked for again", "from_seq", u.replayFrom, "to_seq", u.replayTo)
			u.replayFrom, u.replayTo = 0, 0
			return
		}
	}
}
