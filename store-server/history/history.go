// Package history keeps the store-server's recent figures in memory for the dashboard's
// charts, so that a store needs no Prometheus to see its last hour: every few seconds it
// takes a sample of the gate mode, each till's backlog and the age of its oldest unsent event
// (or that they are unknown: the till is offline), and how long the acks of the interval
// took (p50 and p99). It keeps the samples of the last hour in a ring; a restart starts it
// empty. What the ledger knows (sales per minute) the ledger answers itself.
package history

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/posgate/posgate/store-server/client"
)

// DefaultEvery is how often a sample is taken unless the store-server says otherwise.
const DefaultEvery = 10 * time.Second

// Span is how far back the samples go.
const Span = time.Hour

// maxAcks bounds the ack times kept for one interval's quantiles: over it, a uniform sample
// of them (reservoir) stands for all.
const maxAcks = 8192

// Till is one till's figures at a sample. Known is false while the till is not known to be
// online: what it holds is unknown, and Events and OldestMs are 0.
type Till struct {
	Known    bool
	Events   int64
	OldestMs int64
}

// Sample is the store's figures at one time.
type Sample struct {
	At   time.Time
	Mode client.Mode
	// Acks counts the up messages answered in the interval before At; the quantiles are
	// of their times (0 when Acks is 0).
	Acks               int64
	AckP50Ms, AckP99Ms float64
	Tills              map[string]Till
}

// Probe reads the mode and the tills' figures now.
type Probe func(ctx context.Context) (client.Mode, map[string]Till, error)

// Recorder takes and keeps the samples. Its Acked method makes it part of ingest's
// Observer. It is safe for concurrent use.
type Recorder struct {
	every time.Duration
	keep  int

	mu   sync.Mutex
	ring []Sample
	next int // where the next sample goes once the ring is full
	acks []float64
	seen int64 // acks in the interval (acks holds up to maxAcks of them)
	rnd  *rand.Rand
}

// New returns a recorder that samples every every (DefaultEvery if 0) and keeps Span of
// samples.
func New(every time.Duration) *Recorder {
	if every <= 0 {
		every = DefaultEvery
	}
	return &Recorder{every: every, keep: int(Span / every), rnd: rand.New(rand.NewPCG(1, 2))}
}

// Every is the interval between samples.
func (r *Recorder) Every() time.Duration { return r.every }

// GateCall does nothing: ingest's Observer tells it, the charts do not use it.
func (r *Recorder) GateCall(time.Duration, int) {}

// Commit does nothing: ingest's Observer tells it, the charts do not use it.
func (r *Recorder) Commit(time.Duration, int) {}

// Acked records one up message answered in d.
func (r *Recorder) Acked(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen++
	if len(r.acks) < maxAcks {
		r.acks = append(r.acks, ms)
		return
	}
	if i := r.rnd.Int64N(r.seen); i < maxAcks {
		r.acks[i] = ms
	}
}

// Run takes a sample every interval with probe until ctx ends. A probe that fails records
// the sample with what it could read (the mode), and no till: their figures are unknown.
func (r *Recorder) Run(ctx context.Context, probe Probe) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			pctx, cancel := context.WithTimeout(ctx, r.every)
			mode, tills, err := probe(pctx)
			cancel()
			if err != nil {
				tills = nil
			}
			r.Record(now, mode, tills)
		}
	}
}

// Record adds the sample taken at now, with the acks recorded since the last one.
func (r *Recorder) Record(now time.Time, mode client.Mode, tills map[string]Till) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Sample{At: now, Mode: mode, Acks: r.seen, Tills: tills}
	if len(r.acks) > 0 {
		slices.Sort(r.acks)
		s.AckP50Ms, s.AckP99Ms = quantile(r.acks, 0.50), quantile(r.acks, 0.99)
	}
	r.acks, r.seen = r.acks[:0], 0
	if len(r.ring) < r.keep {
		r.ring = append(r.ring, s)
		return
	}
	r.ring[r.next] = s
	r.next = (r.next + 1) % r.keep
}

// quantile is the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Samples returns the samples kept, oldest first.
func (r *Recorder) Samples() []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Sample, 0, len(r.ring))
	out = append(out, r.ring[r.next:]...)
	return append(out, r.ring[:r.next]...)
}
