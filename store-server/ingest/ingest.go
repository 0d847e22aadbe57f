// Package ingest is the store-server's path from an MQTT up message to an ack: decode and
// validate, keep each terminal's seq order, answer replays from the ledger, run the Redis
// gate (live limits, atomic stock, fen counters, flow numbers) for new events, commit the
// ledger in groups, and only then ack.
//
// The ledger is the judge; Redis is a projection rebuilt from it at start, after any outage,
// after a failover, and whenever a gate call (the projection marker, lua/proj.lua) or the
// drift audit finds that Redis no longer holds it; the group in hand is then decided again. When Redis is unreachable a circuit breaker opens and the store keeps
// selling on the ledger alone (degrade mode) with a conservative in-process limiter. Ingest
// never acks an event before its ledger commit.
package ingest

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/gate"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/store"
)

// Codes of the store's own rejections.
const (
	CodeTerminalMismatch = "wire_terminal_mismatch" // envelope terminal is not the topic's
	CodeStoreMismatch    = "wire_store_mismatch"    // envelope store is not this store
	CodeUnknownSKU       = "unknown_sku"            // a SKU the store's catalog does not have
)

// Publisher sends a down message.
type Publisher interface {
	Publish(topic string, payload []byte) error
}

// Catalog tells which SKUs the store sells (Has), and which it sold in this or an earlier
// catalog (Known).
type Catalog interface {
	Has(sku string) bool
	Known(sku string) bool
}

// Config configures an Ingest.
type Config struct {
	Store   string
	Gate    *gate.Gate
	Ledger  *ledger.Ledger
	Catalog Catalog
	Out     Publisher
	Logger  *slog.Logger
	Now     func() time.Time
	// MaxGroup bounds the events decided and committed together.
	MaxGroup int
	// QueueLen bounds up messages waiting to be processed.
	QueueLen int
	// Breaker settings.
	BreakerErrors int           // consecutive gate failures that open the breaker (default 3)
	BreakerSlow   time.Duration // a gate call slower than this counts as a failure (default 500ms)
	ProbeEvery    time.Duration // how often an open breaker probes Redis (default 1s)
	// AuditEvery is how often the drift audit compares Redis's stock and counters (today's
	// and, in turn, another date's in Redis) with the ledger (default DefaultAuditEvery; negative: only after a refusal for stock).
	AuditEvery time.Duration
	// Observer, if not nil, is told how long ingest's steps take.
	Observer Observer
}

// Observer receives the timings of ingest's work (for metrics). Its methods are called on
// ingest's own goroutines, at most a few times per group, and must not block.
type Observer interface {
	// GateCall is one script call deciding events (Redis mode; a failed call included).
	GateCall(d time.Duration, events int)
	// Commit is one group commit of records to the ledger (a failed one included).
	Commit(d time.Duration, records int)
	// Acked is one up message answered: from its arrival to its acks handed to the broker.
	Acked(d time.Duration)
}

// Ingest processes up messages.
type Ingest struct {
	cfg   Config
	log   *slog.Logger
	queue chan upMsg
	kick  chan struct{} // asks the loop to rebuild (failover seen)

	// commits carries decided groups to the committer; committing counts the groups sent
	// and not yet committed (the loop waits for none before a rebuild). It is unbuffered: a
	// group decided while the committer is busy is handed over when it is free, and the
	// loop meanwhile lets new messages gather for the next group. A buffered group would
	// wait one whole commit more, and add nothing when the committer is the slower stage.
	commits    chan *decided
	committing sync.WaitGroup

	policyMu sync.Mutex // orders the manager's changes of the live limits and promo

	mu   sync.Mutex
	mode client.Mode
	next map[string]int64 // terminal → next expected seq; owned by the loop
	// asked is, per terminal, the last request to send events again (catchup.go). Owned by
	// the loop.
	asked   map[string]resendAsk
	stats   client.Stats
	limiter *localLimiter

	failures int

	// auditDue asks the loop for a drift audit after its group (a live refusal for stock);
	// auditedAt is when the last one ran; evictionSaid is the eviction finding last logged.
	// Owned by the loop.
	auditDue     bool
	auditedAt    time.Time
	evictionSaid string
	// auditedDate is the date other than today whose counters the last audit compared;
	// the next takes the one after it (compare). Owned by the loop.
	auditedDate string

	// proj orders the manager's stock adjustments with rebuilds of the projection: a
	// rebuild holds it from its snapshot of the ledger until it has set the mode it leaves,
	// an adjustment (AdjustStock, CountStock) from its ledger write until Redis has it too
	// or it is left to a rebuild to come. Without it an adjustment committed after a
	// rebuild's snapshot, while the mode still said degraded, was missing from Redis until
	// some later rebuild; one that read the mode just before a rebuild was applied twice.
	proj sync.RWMutex

	stopped  chan struct{} // closed by Stop: Handle no longer waits for room in the queue
	stopOnce sync.Once
}

// upMsg is an up message decoded by Handle, off the ingest loop: decoding needs no state,
// so the MQTT client's goroutine does it while the loop decides and commits.
type upMsg struct {
	arrived  time.Time
	topic    string
	up       wire.Up
	err      error          // the message as a whole could not be decoded
	payloads []wire.Payload // per item: its decoded payload (nil if it did not decode)
	perrs    []error        // per item: why its payload did not decode
}

// New returns an Ingest. Run starts it.
func New(cfg Config) *Ingest {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxGroup <= 0 {
		cfg.MaxGroup = 2000
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 4096
	}
	if cfg.BreakerErrors <= 0 {
		cfg.BreakerErrors = 3
	}
	if cfg.BreakerSlow <= 0 {
		cfg.BreakerSlow = 2 * time.Second
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = time.Second
	}
	if cfg.AuditEvery == 0 {
		cfg.AuditEvery = DefaultAuditEvery
	}
	return &Ingest{
		cfg: cfg, log: cfg.Logger.With("component", "ingest"), queue: make(chan upMsg, cfg.QueueLen),
		kick: make(chan struct{}, 1), mode: client.ModeStarting, next: map[string]int64{}, commits: make(chan *decided),
		asked:   map[string]resendAsk{},
		limiter: newLocalLimiter(store.Policy{PromoPercent: 100}), stopped: make(chan struct{}),
	}
}

// Handle queues an up message; it blocks when the queue is full (back-pressure to the broker)
// until ingest is stopped.
func (in *Ingest) Handle(topic string, payload []byte) {
	m := upMsg{topic: topic}
	if in.cfg.Observer != nil {
		m.arrived = time.Now()
	}
	m.up, m.err = wire.DecodeUp(payload)
	if m.err == nil {
		m.payloads = make([]wire.Payload, len(m.up.Items))
		m.perrs = make([]error, len(m.up.Items))
		for i, it := range m.up.Items {
			if it.Err == nil {
				m.payloads[i], m.perrs[i] = wire.DecodePayload(it.Env)
			}
		}
	}
	select {
	case in.queue <- m:
	case <-in.stopped:
		// Nothing will take it: dropped unacked, and its terminal sends it again to the next
		// run. Handle returns, so the broker's connection goroutine can end.
	}
}

// Stop makes Handle drop what it is given from now on instead of waiting for the queue,
// which nothing takes once Run has returned (Run stops ingest when it returns). The
// embedded broker waits for its connections' goroutines when it closes, and one of them may
// be inside Handle.
func (in *Ingest) Stop() { in.stopOnce.Do(func() { close(in.stopped) }) }

// Stats returns counters.
func (in *Ingest) Stats() client.Stats {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.stats
	s.DriftReasons = maps.Clone(s.DriftReasons)
	return s
}

func (in *Ingest) count(f func(*client.Stats)) {
	in.mu.Lock()
	f(&in.stats)
	in.mu.Unlock()
}

// Run processes messages until ctx ends. It first loads each terminal's next seq from the
// ledger and rebuilds the Redis projection (or starts degraded if Redis is down).
func (in *Ingest) Run(ctx context.Context) error {
	defer in.Stop()
	next, err := in.cfg.Ledger.Next(ctx)
	if err != nil {
		return err
	}
	in.next = next
	if at, ok, err := in.cfg.Ledger.RestoredAt(ctx); err != nil {
		return err
	} else if ok {
		in.log.Info("the ledger was restored from a backup: each till is asked for what the backup lacks",
			"restored_at", at)
	}
	// The limiter of degraded mode holds to the manager's limits from the start: Redis may
	// not answer the first rebuild.
	p, _, err := in.cfg.Ledger.Policy(ctx)
	if err != nil {
		return err
	}
	in.limiter.set(p)
	in.tryRebuild(ctx)
	// The committer writes group N while the loop decides group N+1, and the acker publishes
	// the acks of group N-1: publishing (encoding, one message per terminal) is off the
	// committer's cycle, which is what paces the groups. One acker keeps the groups' order.
	acking := make(chan []groupMsg, 64)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		for msgs := range acking {
			in.ackAll(msgs)
		}
	}()
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		defer close(acking)
		for d := range in.commits {
			acking <- in.finish(ctx, d)
			in.committing.Done()
			// Between two commits, while the loop decides the next group.
			if err := in.cfg.Ledger.FinishCheckpoint(context.WithoutCancel(ctx)); err != nil {
				in.log.Warn("ledger checkpoint", "err", err)
			}
		}
	}()
	defer func() { close(in.commits); <-committed; <-acked }()
	probe := time.NewTicker(in.cfg.ProbeEvery)
	defer probe.Stop()
	var auditC <-chan time.Time
	if in.cfg.AuditEvery > 0 {
		audit := time.NewTicker(in.cfg.AuditEvery)
		defer audit.Stop()
		auditC = audit.C
	}
	group := make([]upMsg, 0, 256)
	for {
		if in.auditDue && time.Since(in.auditedAt) >= auditGap {
			in.audit(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-in.kick:
			in.setMode(client.ModeRebuilding)
			in.tryRebuild(ctx)
			continue
		case <-probe.C:
			if in.Mode() == client.ModeDegraded {
				in.tryRebuild(ctx)
			} else {
				in.checkMarker(ctx)
			}
			continue
		case <-auditC:
			in.audit(ctx)
			continue
		case m := <-in.queue:
			group = append(group[:0], m)
		}
		// Take whatever else is waiting: one gate round trip and one commit for all of it.
		events := len(group[0].up.Items)
	fill:
		for events < in.cfg.MaxGroup {
			select {
			case m := <-in.queue:
				group = append(group, m)
				events += len(m.up.Items)
			default:
				break fill
			}
		}
		if in.process(ctx, group) && in.Mode() == client.ModeRedis {
			// Replays were booked on the ledger alone, with the flow numbers they were
			// given: Redis takes their stock and counters from the ledger before the next
			// group is decided (its flow counters are never lowered).
			in.tryRebuild(ctx)
		}
	}
}
