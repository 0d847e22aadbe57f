package presence

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// DefaultSkewLimit is how far a terminal's clock may be from the store's before the store
// says it is off. A till dates its sales by its own clock (business dates, invariant 7), so
// one that is off by more than the time between its last sale and midnight puts sales on the
// wrong business day; two minutes is far above what a clock kept by NTP drifts and what a
// message takes to arrive, and well below what a dead clock battery does.
const DefaultSkewLimit = 2 * time.Minute

// SkewWindow is how long a reading of a terminal's clock counts: the store's figure is the
// highest reading among the messages it heard from the till in the last SkewWindow (or in
// the last RecentWindow, below). A till the store has heard no reading from for longer has
// no figure: its clock is unknown until it is heard again.
const SkewWindow = 5 * time.Minute

// DefaultBehindConfirm is how long, at least, a till's readings in the window must span
// before the store says its clock is behind (SetBehindConfirm). A message held on its way
// reads behind, never ahead: after the store-server was away from an external broker that
// kept its session, the messages the broker held arrive first, together, and until the
// till's next prompt message they are all the store has heard from it. Readings that span
// 30 s are not one such burst (and the tills send a prompt message at least every minute
// while connected); a till that reads ahead is flagged at once.
const DefaultBehindConfirm = 30 * time.Second

// RecentWindow: once a till's readings of the last RecentWindow span the confirmation time
// (SetBehindConfirm), the figure is the highest of those rather than of the whole window, so
// that a clock stepped back (NTP setting a till that was ahead, a clock reset) shows within
// about RecentWindow instead of SkewWindow. Readings spread over that long are not one burst
// of held messages, and a connected till sends a prompt one at least every minute, which
// outweighs any late one among them.
const RecentWindow = 90 * time.Second

// skewSlot divides time: each slot keeps the highest reading heard in its skewSlot, so a
// terminal's clock costs the same memory however often it is heard. The ring holds one slot
// more than the window covers, so a slot is taken again only once its readings are older
// than the window. A slot counts while its latest reading is within a window, so the figure
// may come from a reading up to one skewSlot older than that window.
const (
	skewSlot  = 15 * time.Second
	skewSlots = int64(SkewWindow/skewSlot) + 1
)

// upSampleGap is the least time between two readings taken from a terminal's up messages:
// more add nothing to the figure, and each costs a decode on the broker's goroutine.
const upSampleGap = time.Second

// Clock is how far a terminal's clock is from the store's, as the store measured it from
// the messages it heard from the till in the last SkewWindow (Board.HandleUp and Handle say
// which count).
type Clock struct {
	// Skew is the till's clock minus the store's: positive when the till runs ahead,
	// negative when it is behind.
	Skew time.Duration
	// Off says the till's clock is further from the store's than the limit (SetSkewLimit):
	// the till dates its sales by a clock the store does not agree with. Ahead, at once;
	// behind, once confirmed (Unconfirmed).
	Off bool
	// Unconfirmed says Skew is behind by more than the limit but the readings it comes from
	// span less than the confirmation time (SetBehindConfirm): they may be messages held on
	// their way rather than a clock that is behind. Off is false; Skew is the readings'
	// figure, which the API and the metrics do not show.
	Unconfirmed bool
	// Checked is when the store last heard a message it measured the clock by (its own
	// clock).
	Checked time.Time
}

// clock is what the board keeps of one terminal's clock.
type clock struct {
	slots   [skewSlots]slot
	checked time.Time
	off     bool      // as last judged (for the log)
	upAt    time.Time // when the last reading from an up message was taken
}

// slot is the highest reading heard in one skewSlot of the store's time (n numbers it), and
// when (the store's time, UnixNano) its first and last readings were heard.
type slot struct {
	n           int64
	reading     time.Duration
	first, last int64
	set         bool
}

// add takes one reading: the till's stamp minus the store's time of receipt.
func (c *clock) add(reading time.Duration, heard time.Time) {
	at := heard.UnixNano()
	n := at / int64(skewSlot)
	s := &c.slots[(n%skewSlots+skewSlots)%skewSlots]
	switch {
	case !s.set || s.n != n:
		*s = slot{n: n, reading: reading, first: at, last: at, set: true}
	default:
		s.reading = max(s.reading, reading)
		s.first, s.last = min(s.first, at), max(s.last, at)
	}
	c.checked = heard
}

// span is the readings of some slots: their highest, and the first and last time heard.
type span struct {
	best        time.Duration
	first, last int64
	any         bool
}

func (p *span) take(s *slot) {
	if !p.any {
		*p = span{best: s.reading, first: s.first, last: s.last, any: true}
		return
	}
	p.best, p.first, p.last = max(p.best, s.reading), min(p.first, s.first), max(p.last, s.last)
}

func (p *span) long(d time.Duration) bool { return time.Duration(p.last-p.first) >= d }

// judge returns the figure at now and what it says. A message's time on the way (network,
// broker, a queue) only ever lowers a reading, never raises it: the highest reading is the
// one that waited least, and the closest to the truth. The figure is the highest reading of
// the last RecentWindow when those span the confirmation time, else of the last SkewWindow;
// known is false when no reading is that recent.
func (c *clock) judge(now time.Time, limit, confirm time.Duration) (v Clock, known bool) {
	at := now.UnixNano()
	var all, recent span
	for i := range c.slots {
		s := &c.slots[i]
		age := time.Duration(at - s.last)
		if !s.set || age < 0 || age > SkewWindow {
			// age < 0: heard after now, by a store clock since stepped back; its readings
			// were taken against a clock the store no longer keeps.
			continue
		}
		all.take(s)
		if age <= RecentWindow {
			recent.take(s)
		}
	}
	if !all.any {
		return Clock{}, false
	}
	figure, confirmed := all.best, all.long(confirm)
	if recent.any && recent.long(confirm) {
		figure, confirmed = recent.best, true
	}
	v = Clock{Skew: figure, Checked: c.checked}
	switch {
	case limit <= 0:
	case figure > limit:
		v.Off = true
	case figure < -limit:
		v.Off, v.Unconfirmed = confirmed, !confirmed
	}
	return v, true
}

// clockChange is a change of a till's clock that the board logs.
type clockChange struct {
	terminal string
	v        Clock
	off      bool // Off now (v.Off; false when unknown)
	known    bool
}

// judgeLocked judges c at now and returns the change to log, if any (b.mu held).
func (b *Board) judgeLocked(terminal string, c *clock, now time.Time) (v Clock, ch clockChange, changed bool) {
	v, known := c.judge(now, b.skewLimit, b.behindConfirm)
	if v.Off != c.off {
		c.off = v.Off
		return v, clockChange{terminal: terminal, v: v, off: v.Off, known: known}, true
	}
	return v, clockChange{}, false
}

// sweepLocked forgets the clocks with no reading in the window (b.mu held): their state is
// unknown, and a terminal id seen once must not stay in the map for as long as the store
// runs. It returns those that were off, to log.
func (b *Board) sweepLocked(now time.Time) (gone []clockChange) {
	b.clockSwept = now
	for t, c := range b.clocks {
		if _, known := c.judge(now, b.skewLimit, b.behindConfirm); !known {
			if c.off {
				gone = append(gone, clockChange{terminal: t})
			}
			delete(b.clocks, t)
		}
	}
	return gone
}

// logClock logs a till's clock going off, coming back within the limit, or no longer
// known.
func (b *Board) logClock(ch clockChange) {
	limit := b.SkewLimit()
	switch {
	case ch.off:
		b.log.Warn("the till's clock is off: it dates its sales by it, so they go to the wrong business day "+
			"if it is off across midnight; set the till's date and time", "terminal", ch.terminal,
			"skew", ch.v.Skew.Round(time.Second).String(), "limit", limit.String())
	case ch.known:
		b.log.Info("the till's clock is back within the limit", "terminal", ch.terminal,
			"skew", ch.v.Skew.Round(time.Second).String(), "limit", limit.String())
	default:
		b.log.Info("the till's clock is no longer known: no message to measure it by", "terminal", ch.terminal,
			"for", SkewWindow.String())
	}
}

// SetSkewLimit sets how far a terminal's clock may be from the store's before the board
// says it is off (DefaultSkewLimit until set; 0: never). Call it before the board hears
// anything.
func (b *Board) SetSkewLimit(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.skewLimit = d
}

// SkewLimit returns how far a terminal's clock may be from the store's (0: no limit).
func (b *Board) SkewLimit() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.skewLimit
}

// SetBehindConfirm sets how long, at least, a till's readings in the window must span before
// the board says its clock is behind (DefaultBehindConfirm until set; 0: at once). Call it
// before the board hears anything.
func (b *Board) SetBehindConfirm(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.behindConfirm = d
}

// BehindConfirm returns how long a till's readings must span before the board says its clock
// is behind.
func (b *Board) BehindConfirm() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.behindConfirm
}

// Clocks returns the clock of every terminal the store has heard a message to measure it by
// in the last SkewWindow, as of now. It forgets the others.
func (b *Board) Clocks() map[string]Clock {
	b.mu.Lock()
	now := b.now()
	changes := b.sweepLocked(now)
	out := make(map[string]Clock, len(b.clocks))
	for t, c := range b.clocks {
		v, ch, changed := b.judgeLocked(t, c, now)
		if changed {
			changes = append(changes, ch)
		}
		out[t] = v
	}
	b.mu.Unlock()
	for _, ch := range changes {
		b.logClock(ch)
	}
	return out
}

// HandleUp reads the terminal's clock from a message on its up topic, before ingest takes it
// (call it with the message as it arrives, then hand it on). Only a message the till sent as
// it stamped it counts: a single live event (not offline: the till made it just now, with
// nothing queued ahead, and sends it at once), or a heartbeat that counted an empty backlog
// (nothing queued ahead of it, so it went as soon as it was made). Offline events and
// batches (a backlog draining, stamped when the sales happened) and heartbeats queued behind
// other events do not. At most one reading per terminal per second is taken; anything it
// cannot read it leaves to ingest, which judges every message.
func (b *Board) HandleUp(topic string, payload []byte) {
	// A topic whose terminal is no terminal id is refused by ingest, as its status and
	// backlog messages are here: it gets no clock, which would be a row of the terminals and
	// a label of the metrics for as long as the store runs.
	store, terminal, ok := wire.ParseUpTopic(topic)
	if !ok || store != b.store || !wire.ValidID(terminal) {
		return
	}
	heard := b.now()
	b.mu.Lock()
	c := b.clocks[terminal]
	recent := c != nil && !heard.Before(c.upAt) && heard.Sub(c.upAt) < upSampleGap
	b.mu.Unlock()
	if recent {
		return
	}
	named, at, ok := upStamp(payload)
	if !ok || named != terminal {
		return
	}
	b.reading(terminal, at, heard, true)
}

// reading takes one reading of a terminal's clock: at is the till's stamp on a message the
// store heard at heard. It logs a till whose clock goes over the limit, and one coming back.
// A reading of a terminal already known costs no allocation; a new terminal's first one
// forgets the clocks gone unknown, at most once every skewSlot.
func (b *Board) reading(terminal string, at, heard time.Time, up bool) {
	if at.IsZero() {
		return
	}
	var gone []clockChange
	b.mu.Lock()
	c := b.clocks[terminal]
	if c == nil {
		// The sweep judges the clocks as of now, not heard: heard was taken before the lock,
		// and a message of another till heard after it may have been read since. Judged at
		// heard, that till's reading was one from the future, no reading at all: its clock
		// was forgotten, and stayed unknown until its next message.
		if now := b.now(); now.Sub(b.clockSwept) >= skewSlot || now.Before(b.clockSwept) {
			gone = b.sweepLocked(now)
		}
		c = &clock{}
		b.clocks[terminal] = c
	}
	if up {
		c.upAt = heard
	}
	c.add(at.Sub(heard), heard)
	_, ch, changed := b.judgeLocked(terminal, c, heard)
	b.mu.Unlock()
	for _, g := range gone {
		b.logClock(g)
	}
	if changed {
		b.logClock(ch)
	}
}

// upStamp reads the members of an up message that say whether it went as soon as it was
// stamped: it returns the terminal and the stamp of a single event of the current version
// that is live (not offline), or a heartbeat whose payload counted no backlog. ok is false
// for a batch, for any other event, and for anything it cannot read. It walks the message's
// top-level members and stops at a batch's kind, so a backlog's batch costs a few tokens.
func upStamp(payload []byte) (terminal string, at time.Time, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", time.Time{}, false
	}
	var (
		v       int
		kind    wire.Kind
		offline bool
		backlog = int64(-1)
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", time.Time{}, false
		}
		switch tok {
		case "v":
			err = dec.Decode(&v)
		case "kind":
			if err = dec.Decode(&kind); err == nil && string(kind) == wire.KindBatch {
				return "", time.Time{}, false
			}
		case "terminal":
			err = dec.Decode(&terminal)
		case "at":
			err = dec.Decode(&at)
		case "offline":
			err = dec.Decode(&offline)
		case "payload":
			var p struct {
				Backlog *int64 `json:"backlog"`
			}
			if err = dec.Decode(&p); err == nil && p.Backlog != nil {
				backlog = *p.Backlog
			}
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return "", time.Time{}, false
		}
	}
	prompt := !offline || (kind == wire.KindHeartbeat && backlog == 0)
	if v != wire.Version || !kind.Valid() || terminal == "" || at.IsZero() || !prompt {
		return "", time.Time{}, false
	}
	return terminal, at, true
}
