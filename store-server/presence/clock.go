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
// highest reading among the messages it heard from the till in the last SkewWindow.
const SkewWindow = 5 * time.Minute

// skewSlots divide SkewWindow: each keeps the highest reading heard in its part of it, so a
// terminal's clock costs the same memory however often it is heard.
const skewSlots = 10

const skewSlot = SkewWindow / skewSlots

// upSampleGap is the least time between two readings taken from a terminal's up messages:
// more add nothing to the figure, and each costs a decode on the broker's goroutine.
const upSampleGap = time.Second

// Clock is how far a terminal's clock is from the store's, as the store measured it from
// the messages it heard from the till (Board.HandleUp and Handle say which count).
type Clock struct {
	// Skew is the till's clock minus the store's: positive when the till runs ahead,
	// negative when it is behind.
	Skew time.Duration
	// Off says |Skew| is over the store's limit (SetSkewLimit): the till dates its sales
	// by a clock the store does not agree with.
	Off bool
	// Checked is when the store last heard a message it measured the clock by (its own
	// clock). The figure stands while the till says nothing.
	Checked time.Time
}

// clock is what the board keeps of one terminal's clock.
type clock struct {
	slots   [skewSlots]slot
	skew    time.Duration
	checked time.Time
	off     bool
	upAt    time.Time // when the last reading from an up message was taken
}

// slot is the highest reading heard in one skewSlot of the store's time (n numbers it).
type slot struct {
	n       int64
	reading time.Duration
	set     bool
}

// add takes one reading (the till's stamp minus the store's time of receipt) and sets the
// figure to the highest reading of the window. A message's time on the way (network,
// broker, a queue) only ever lowers a reading, never raises it: the highest reading is the
// one that waited least, and the closest to the truth. A message held somewhere makes a
// till look behind only until a prompt one arrives in the same window.
func (c *clock) add(reading time.Duration, heard time.Time) {
	n := heard.UnixNano() / int64(skewSlot)
	s := &c.slots[(n%skewSlots+skewSlots)%skewSlots]
	if !s.set || s.n != n || reading > s.reading {
		*s = slot{n: n, reading: reading, set: true}
	}
	best := reading
	for _, s := range c.slots {
		if s.set && s.n > n-skewSlots && s.n <= n && s.reading > best {
			best = s.reading
		}
	}
	c.skew, c.checked = best, heard
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

// Clocks returns every terminal's clock as last measured, for those the store has heard a
// message to measure it by since it started.
func (b *Board) Clocks() map[string]Clock {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]Clock, len(b.clocks))
	for t, c := range b.clocks {
		out[t] = Clock{Skew: c.skew, Off: c.off, Checked: c.checked}
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
func (b *Board) reading(terminal string, at, heard time.Time, up bool) {
	if at.IsZero() {
		return
	}
	b.mu.Lock()
	c := b.clocks[terminal]
	if c == nil {
		c = &clock{}
		b.clocks[terminal] = c
	}
	if up {
		c.upAt = heard
	}
	was := c.off
	c.add(at.Sub(heard), heard)
	c.off = b.skewLimit > 0 && (c.skew > b.skewLimit || c.skew < -b.skewLimit)
	off, skew, limit := c.off, c.skew, b.skewLimit
	b.mu.Unlock()
	switch {
	case off && !was:
		b.log.Warn("the till's clock is off: it dates its sales by it, so they go to the wrong business day "+
			"if it is off across midnight; set the till's date and time", "terminal", terminal,
			"skew", skew.Round(time.Second).String(), "limit", limit.String())
	case was && !off:
		b.log.Info("the till's clock is back within the limit", "terminal", terminal,
			"skew", skew.Round(time.Second).String(), "limit", limit.String())
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
