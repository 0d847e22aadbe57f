// Package refusals is a daemon's book of what it refused: every refusal is counted by its
// stable code (the store's posgate_store_refusals_total{code}, HQ's
// posgate_hq_refusals_total{code}) and logged, at most once per code in a window, with the
// number held back since the last line: a flood of one refusal neither goes unseen nor
// fills the journal.
package refusals

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/posgate/posgate/internal/wire"
)

// DefaultEvery is how often a code is logged at most.
const DefaultEvery = 10 * time.Second

// Book counts and logs refusals. Its zero value is not usable: New.
type Book struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time
	desc  *prometheus.Desc

	mu     sync.Mutex
	counts map[string]int64
	last   map[string]time.Time // when the code was last logged
	held   map[string]int64     // refusals of the code not logged since
}

// The metrics of the books of the store and of HQ.
const (
	StoreMetric = "posgate_store_refusals_total"
	HQMetric    = "posgate_hq_refusals_total"
)

// New returns a book logging to log, each code at most once per every, whose counter
// (Collect) is metric.
func New(log *slog.Logger, every time.Duration, metric string) *Book {
	return &Book{log: log, every: every, now: time.Now,
		desc: prometheus.NewDesc(metric,
			"Refusals by their stable code: events rejected or in conflict (their acks), messages of terminals not enrolled, requests refused.",
			[]string{"code"}, nil),
		counts: map[string]int64{}, last: map[string]time.Time{}, held: map[string]int64{}}
}

// Note counts one refusal of code and logs it, with attrs, unless the code was logged less
// than the book's window ago; the line then logged says how many were held back. Codes are
// the store's own (never a value a client chose), so the metric's labels stay few.
func (b *Book) Note(level slog.Level, code, msg string, attrs ...any) {
	b.mu.Lock()
	b.counts[code]++
	now := b.now()
	if last, ok := b.last[code]; ok && now.Sub(last) < b.every {
		b.held[code]++
		b.mu.Unlock()
		return
	}
	held := b.held[code]
	b.last[code], b.held[code] = now, 0
	b.mu.Unlock()
	attrs = append([]any{"code", code}, attrs...)
	if held > 0 {
		attrs = append(attrs, "not_logged_since", held)
	}
	b.log.Log(context.Background(), level, msg, attrs...)
}

// Counts returns the refusals counted so far, by code.
func (b *Book) Counts() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int64, len(b.counts))
	for k, v := range b.counts {
		out[k] = v
	}
	return out
}

// Describe is prometheus.Collector's.
func (b *Book) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

// Collect is prometheus.Collector's.
func (b *Book) Collect(ch chan<- prometheus.Metric) {
	for code, n := range b.Counts() {
		ch <- prometheus.MustNewConstMetric(b.desc, prometheus.CounterValue, float64(n), code)
	}
}

// Publisher sends a down message (the broker, or the client of an external one).
type Publisher interface {
	Publish(topic string, payload []byte) error
}

// Acks is a Publisher that books every refusal among the acks it sends on to P: an event
// rejected or in conflict, by its code.
type Acks struct {
	P    Publisher
	Book *Book
}

var (
	rejected   = []byte(`"status":"` + string(wire.AckRejected) + `"`)
	conflicted = []byte(`"status":"` + string(wire.AckConflict) + `"`)
)

// Publish books the refusals payload holds (only a payload that names one is decoded) and
// sends it on.
func (a Acks) Publish(topic string, payload []byte) error {
	if bytes.Contains(payload, rejected) || bytes.Contains(payload, conflicted) {
		a.book(payload)
	}
	return a.P.Publish(topic, payload)
}

func (a Acks) book(payload []byte) {
	var m wire.Acks
	if json.Unmarshal(payload, &m) != nil || m.Kind != "acks" {
		return
	}
	for _, ack := range m.Acks {
		if ack.Status != wire.AckRejected && ack.Status != wire.AckConflict {
			continue
		}
		code, level := ack.Code, slog.LevelWarn
		if code == "" {
			code = string(ack.Status)
		}
		if ack.Live && ack.Status == wire.AckRejected {
			level = slog.LevelInfo // a live refusal (stock, a limit): the till may sell it offline
		}
		a.Book.Note(level, code, "event refused", "terminal", m.Terminal, "seq", ack.Seq, "status", ack.Status, "message", ack.Message)
	}
}
