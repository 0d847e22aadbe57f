// Package presence follows the terminals' retained status messages
// (pos/{store}/{terminal}/status): an agent publishes "online" when it connects and leaves
// "offline" as its last will, which the broker publishes when the connection is lost. The
// store-server subscribes to them so that a manager sees which tills are connected now,
// beside what the ledger last heard from each. It follows their retained backlog reports
// (pos/{store}/{terminal}/backlog) too: what a till holds that the store has not
// acknowledged, sent beside its events rather than behind them. And it checks each till's
// clock against the store's, from the till's stamps on the messages it sends as it stamps
// them (clock.go): a till dates its sales by its own clock (invariant 7), and one whose clock
// is off puts them on the wrong business day. The board only watches: it never changes a
// message, a stamp or a business date.
package presence

import (
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/wire"
)

// Seen is a terminal's presence as the store last heard it.
type Seen struct {
	Online bool `json:"online"`
	// Since is when the terminal said it connected (its own clock), on an online message.
	Since time.Time `json:"since,omitzero"`
	// Heard is when the store received the message (a retained one when the store
	// subscribed: the time of the store-server's start, not of the change).
	Heard time.Time `json:"heard"`
}

// Backlog is a terminal's backlog as it last reported it. The manager API answers it as
// client.Backlog, of the same fields; this one carries the board's rules (Supersedes,
// OldestAge).
type Backlog struct {
	Events int64 `json:"events"`
	// Seq is the highest seq the terminal had given an event when it counted.
	Seq int64 `json:"seq"`
	// OldestMs is the age of the oldest event it holds, when it counted (At, its clock).
	OldestMs int64     `json:"oldest_age_ms"`
	At       time.Time `json:"at"`
	// Heard is when the store received the report; for a retained report the broker sent
	// again, when it first received it, or, new to it, the report's At (never later than
	// when it received it).
	Heard time.Time `json:"heard"`
	// CatalogVersion is the version of the store's catalog the terminal held (0: none, or
	// an agent that does not say).
	CatalogVersion int64 `json:"catalog_version,omitempty"`
}

// Supersedes reports whether the report stands over the terminal's last heartbeat (its seq
// and the time the terminal took it). A till that stopped reporting (reports turned off,
// --backlog-every 0) still sends heartbeats: a heartbeat taken after the report
// (a higher seq) and more than two refreshes of it later (by the terminal's clock) says
// reports have stopped, and it is the better account of what the till holds. Anything less
// is a till still reporting (a heartbeat counts a live sale in flight, and an unchanged
// report goes again only every wire.BacklogRefresh), or one whose clock stepped back.
func (r Backlog) Supersedes(heartbeatSeq int64, heartbeatAt time.Time) bool {
	return heartbeatSeq <= r.Seq || heartbeatAt.Sub(r.At) <= 2*wire.BacklogRefresh
}

// OldestAge is the age of the oldest event the report counted, now: it keeps growing from
// when the report was heard while the terminal reported a backlog, since a till that went
// offline with one reports nothing more and its figure must not stand still under the alert
// meant for it. 0 for an empty backlog.
func (r Backlog) OldestAge(now time.Time) time.Duration {
	if r.Events == 0 {
		return 0
	}
	return time.Duration(r.OldestMs)*time.Millisecond + max(0, now.Sub(r.Heard))
}

// Board holds the latest presence and backlog report of every terminal of a store. It is
// safe for concurrent use.
type Board struct {
	store string
	now   func() time.Time
	log   *slog.Logger

	mu        sync.Mutex
	seen      map[string]Seen
	backlog   map[string]Backlog
	clocks    map[string]*clock
	skewLimit time.Duration
	// behindConfirm: SetBehindConfirm; clockSwept: when the clocks gone unknown were last
	// forgotten.
	behindConfirm time.Duration
	clockSwept    time.Time
	wrong         int64
}

// New returns an empty board for store. now is the clock (time.Now if nil).
func New(store string, now func() time.Time, log *slog.Logger) *Board {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Board{store: store, now: now, log: log.With("component", "presence"),
		seen: map[string]Seen{}, backlog: map[string]Backlog{}, clocks: map[string]*clock{},
		skewLimit: DefaultSkewLimit, behindConfirm: DefaultBehindConfirm}
}

// Handle takes one message from a status or backlog topic; retained says the broker sent
// it as the topic's retained message (on subscribing) rather than as it was published. An
// empty payload (a cleared retained message) forgets the terminal's presence (and its clock)
// or backlog. A
// message on a topic that is not one of the store's status or backlog topics, that cannot be
// decoded or that names another terminal than its topic is counted, logged and dropped: it
// changes nothing. An online message and a backlog report, as published (not retained), are
// readings of the till's clock too: the till stamps each as it publishes it, straight to the
// broker, never from its queue of events (a backlog report goes at QoS 0, which the MQTT
// client drops rather than keeps while it is disconnected).
func (b *Board) Handle(topic string, payload []byte, retained bool) {
	if store, terminal, ok := wire.ParseBacklogTopic(topic); ok && store == b.store {
		b.handleBacklog(topic, terminal, payload, retained)
		return
	}
	store, terminal, ok := wire.ParseStatusTopic(topic)
	if !ok || store != b.store {
		b.drop("not a status or backlog topic of this store", "topic", topic)
		return
	}
	if len(payload) == 0 {
		// The terminal's status cleared (a till taken out of service): the store forgets
		// it, its clock too.
		b.mu.Lock()
		delete(b.seen, terminal)
		delete(b.clocks, terminal)
		b.mu.Unlock()
		return
	}
	p, err := wire.DecodePresence(payload)
	if err != nil {
		b.drop("undecodable status message", "topic", topic, "err", err)
		return
	}
	if p.Terminal != terminal {
		b.drop("status message names another terminal", "topic", topic, "terminal", p.Terminal)
		return
	}
	s := Seen{Online: p.Online, Heard: b.now()}
	if p.Online {
		s.Since = p.At
	}
	b.mu.Lock()
	b.seen[terminal] = s
	b.mu.Unlock()
	if p.Online && !retained {
		b.reading(terminal, p.At, s.Heard, false)
	}
}

func (b *Board) handleBacklog(topic, terminal string, payload []byte, retained bool) {
	if len(payload) == 0 {
		b.mu.Lock()
		delete(b.backlog, terminal)
		b.mu.Unlock()
		return
	}
	r, err := wire.DecodeBacklog(payload)
	if err != nil {
		b.drop("undecodable backlog report", "topic", topic, "err", err)
		return
	}
	if r.Terminal != terminal {
		b.drop("backlog report names another terminal", "topic", topic, "terminal", r.Terminal)
		return
	}
	b.mu.Lock()
	heard := b.now()
	if retained {
		// A report published before the store subscribed (its restart, or its reconnection
		// to the broker): the same report keeps the time it was first heard, and another
		// one counts from when the till took it, by its clock, never later than now. Heard
		// again as new, a till gone quiet with a backlog would look younger after every
		// restart, and its alert would clear.
		if old, ok := b.backlog[terminal]; ok && old.At.Equal(r.At) {
			heard = old.Heard
		} else if r.At.Before(heard) {
			heard = r.At
		}
	}
	b.backlog[terminal] = Backlog{Events: r.Events, Seq: r.Seq, OldestMs: r.OldestMs, At: r.At, Heard: heard,
		CatalogVersion: r.CatalogVersion}
	b.mu.Unlock()
	if !retained {
		b.reading(terminal, r.At, heard, false)
	}
}

func (b *Board) drop(msg string, args ...any) {
	b.mu.Lock()
	b.wrong++
	b.mu.Unlock()
	b.log.Warn(msg, args...)
}

// All returns a copy of every terminal's presence.
func (b *Board) All() map[string]Seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.seen)
}

// Backlogs returns a copy of every terminal's last backlog report.
func (b *Board) Backlogs() map[string]Backlog {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.backlog)
}

// Dropped returns how many status and backlog messages were dropped as wrong.
func (b *Board) Dropped() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wrong
}
