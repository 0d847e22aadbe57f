// Package uplink is the terminal-agent's sync lane to its store over MQTT (QoS 1, persistent
// session): it publishes queued events in seq order with a bounded window of unacked events,
// batches a backlog, applies the store's application acks to the outbox, resends after a
// reconnect, a gap or an ack timeout, and gives the local API the store's live verdict on a
// scan or a checkout within a short deadline.
//
// An event is done only when the store's ack arrives on the terminal's down topic; a broker's
// PUBACK means nothing here. The package never marks an event delivered on its own.
package uplink

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/mqttconn"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
)

// Config configures an Uplink.
type Config struct {
	BrokerURL string
	Store     string
	Terminal  string
	Username  string
	Password  string
	ClientID  string // default "posgate-STORE-TERMINAL"
	// TLS, if not nil, is the TLS set-up of a tls:// (ssl://, mqtts://) broker: the store's
	// certificate authority, when the store's broker has a certificate of its own.
	TLS *tls.Config
	// Window is the most events published and not yet acked.
	Window int
	// BatchMax is the most events carried by one message.
	BatchMax int
	// AckTimeout is how long to wait for an ack before resending from the oldest unacked event.
	AckTimeout time.Duration
	// VerdictTimeout is how long a live scan or checkout waits for the store's verdict.
	VerdictTimeout time.Duration
	// LiveQueueMax: with more events than this queued ahead, a new event is decided locally
	// at once instead of waiting for a verdict it cannot get in time.
	LiveQueueMax int64
	// HeartbeatEvery queues a heartbeat event this often while online (0: never).
	HeartbeatEvery time.Duration
	// BacklogEvery is how often, while online, the lane looks at the backlog and publishes
	// it on the terminal's backlog topic if it changed (and within every wire.BacklogRefresh
	// if not; at most half a refresh); it also publishes it on each connection. 0: never, and a connection clears the
	// retained report an earlier run left, which would otherwise stand for the till.
	BacklogEvery time.Duration
	// StoreKey, if not nil, is the store's public catalog key (--store-key): pinned when it
	// is first given or changes; the pin then moves along the store's signed rotations (or
	// by catalog-key reset). Nil: the key of the first signed catalog is pinned.
	StoreKey ed25519.PublicKey
	Logger   *slog.Logger
	Now      func() time.Time
}

func (c *Config) defaults() {
	if c.ClientID == "" {
		c.ClientID = "posgate-" + c.Store + "-" + c.Terminal
	}
	if c.Window <= 0 {
		c.Window = 2000
	}
	if c.BatchMax <= 0 {
		c.BatchMax = 250
	}
	if c.BatchMax > wire.MaxBatchEvents {
		c.BatchMax = wire.MaxBatchEvents
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 5 * time.Second
	}
	if c.VerdictTimeout <= 0 {
		c.VerdictTimeout = 300 * time.Millisecond
	}
	if c.BacklogEvery > wire.BacklogRefresh/2 {
		// The store reads a report as current for two refreshes: reports further apart
		// would give way to the heartbeats between them, and a tick as long as a refresh
		// would find the refresh a hair short of due and wait for the next one.
		c.BacklogEvery = wire.BacklogRefresh / 2
	}
	if c.LiveQueueMax <= 0 {
		c.LiveQueueMax = 16
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Uplink is the sync lane.
type Uplink struct {
	cfg    Config
	store  *outbox.Store
	log    *slog.Logger
	client mqtt.Client
	wakeCh chan struct{}

	// reportCh tells the backlog loop that a connection published a report: its interval
	// starts over.
	reportCh chan struct{}
	// reportMu orders the backlog reports; reported is the last one the broker took (its
	// count, oldest seq and catalog version), reportedAt when.
	reportMu     sync.Mutex
	reported     [3]int64
	reportedAt   time.Time
	reportedEver bool // KV backlog_reported is set

	mu           sync.Mutex
	connected    bool
	offlineSince time.Time
	lastAck      time.Time
	// unanswered is when the first message was sent that no ack has followed yet (zero:
	// every message sent has been answered since). The broker may be up while the store is
	// down or stuck: past AckTimeout of it the store counts as unreachable (Mode).
	unanswered time.Time
	// offlineMono and unansweredMono are time.Now's readings (monotonic) when offlineSince
	// and unanswered were set in this run (zero when they were read from the outbox at the
	// start): how long the till has been offline, or the store silent, is measured on them,
	// which no step of the wall clock moves (startedAt).
	offlineMono, unansweredMono time.Time
	// silenceKept: KV store_silent_since_ms holds unanswered (the store is silent, and that
	// is to outlive a restart).
	silenceKept bool
	// startSeq is the last seq of the outbox when the lane started: a live event up to it
	// was committed by an earlier run, whose requests wait no more. liveSeen is when the
	// lane first saw each live event of this run that no request waited for yet.
	startSeq    int64
	liveSeen    map[int64]time.Time
	cursor      int64               // highest seq published in this pass
	gen         uint64              // bumped by every rewind, so a racing read is dropped
	inflight    map[int64]time.Time // published, not yet acked: when (time.Now, monotonic)
	lastRewind  int64               // the expect of the last out_of_order rewind
	pausedUntil time.Time           // after a rate_limited ack of the sync lane (time.Now, monotonic)
	keys        catalogKeys         // the pinned store key's follow-up (catalogkey.go)
	// replayFrom..replayTo is the window of events the store asked for again (wire.Resend),
	// sent as replays until the store answers its end (replay.go); replayTo 0: none.
	replayFrom, replayTo int64
	waiters              map[int64]*waiter
}

// New returns an Uplink for the outbox; Run connects it.
func New(cfg Config, store *outbox.Store) *Uplink {
	cfg.defaults()
	return &Uplink{
		cfg: cfg, store: store, log: cfg.Logger.With("component", "uplink"),
		wakeCh: make(chan struct{}, 1), reportCh: make(chan struct{}, 1), inflight: map[int64]time.Time{}, waiters: map[int64]*waiter{},
		liveSeen: map[int64]time.Time{},
	}
}

// Status is the lane's state for the status API.
type Status struct {
	Online       bool
	OfflineSince time.Time
	LastAck      time.Time
	InFlight     int
}

// Status returns the lane's state.
func (u *Uplink) Status() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	return Status{Online: u.connected, OfflineSince: u.offlineSince, LastAck: u.lastAck, InFlight: len(u.inflight)}
}

// Mode tells the local API how the next event will be decided: live (wait for the store's
// verdict) only when connected and little is queued ahead of it.
func (u *Uplink) Mode(ctx context.Context) outbox.Mode {
	now := u.cfg.Now()
	u.mu.Lock()
	silentSince := u.silentSinceLocked(now)
	var offlineSince time.Time
	if !u.offlineSince.IsZero() {
		offlineSince = startedAt(now, u.offlineSince, u.offlineMono)
	}
	m := outbox.Mode{Live: u.connected && silentSince.IsZero(), Disconnected: !u.connected || !silentSince.IsZero(),
		OfflineSince: offlineSince}
	if !silentSince.IsZero() && (m.OfflineSince.IsZero() || silentSince.Before(m.OfflineSince)) {
		m.OfflineSince = silentSince
	}
	u.mu.Unlock()
	if m.Live {
		if b, err := u.store.Backlog(ctx); err != nil || b.Count > u.cfg.LiveQueueMax {
			m.Live = false
		}
	}
	return m
}

// silentSinceLocked returns when the store went silent, as the clock reads now, if it has not
// answered for longer than AckTimeout (zero if it has). A silence kept across a restart
// that began after now began under a clock since set back: how long it has lasted is
// unknown, and it counts as silent.
func (u *Uplink) silentSinceLocked(now time.Time) time.Time {
	if u.unanswered.IsZero() {
		return time.Time{}
	}
	since := startedAt(now, u.unanswered, u.unansweredMono)
	if now.Sub(since) > u.cfg.AckTimeout || since.After(now) {
		return since
	}
	return time.Time{}
}

// startedAt returns when something that began at at (the clock's reading then) began, as
// the clock reads now. Begun in this run (mono, time.Now's reading then, is set), it is now
// less the time the monotonic clock measured since: a step of the wall clock (NTP, a clock
// set by hand, a fault test's offset) moves dates, not how long the till has been offline.
// Read from the outbox at the start (mono zero), it is at as recorded: the clock is all a
// restarted agent has to go by.
func startedAt(now, at, mono time.Time) time.Time {
	if mono.IsZero() {
		return at
	}
	return now.Add(-time.Since(mono))
}

// Notify wakes the sender after an event was queued.
func (u *Uplink) Notify() {
	select {
	case u.wakeCh <- struct{}{}:
	default:
	}
}

// Verdict is the outcome of waiting for the store on a live event.
type Verdict struct {
	// Ack is the store's answer, nil if the terminal decided locally.
	Ack *wire.Ack
	// Refused: the store said no and the sale step was undone (outbox.Refuse).
	Refused bool
	// Parked: the store rejected an event the terminal had decided (offline, or a conflict):
	// the step stands, and the event waits in the parked list (outbox.Park).
	Parked bool
}

// waiter is what the requests waiting on one live event's verdict share: a retry of a
// request (a double click) waits with the first one and gets the same answer.
type waiter struct {
	done   chan struct{} // closed once the verdict is in, or the event was decided locally
	ack    *wire.Ack     // the verdict; nil if decided locally
	action outbox.Action // what the verdict did to the event
}

func (w *waiter) verdict() Verdict {
	if w.ack == nil {
		return Verdict{}
	}
	return Verdict{Ack: w.ack, Refused: w.action == outbox.Refuse, Parked: w.action == outbox.Park}
}

// Await waits up to the verdict deadline for the store's answer on live event seq. Past the
// deadline the event is marked offline (decided locally) and a nil Ack is returned; from then
// on the store can no longer refuse it. Requests that wait on the same event at once get the
// same answer.
func (u *Uplink) Await(ctx context.Context, seq int64) Verdict {
	u.mu.Lock()
	if st, err := u.store.EventState(ctx, seq); err == nil && st.State != "pending" {
		u.mu.Unlock()
		return verdictFromState(st)
	}
	w := u.waiters[seq]
	if w == nil {
		w = &waiter{done: make(chan struct{})}
		u.waiters[seq] = w
	}
	u.mu.Unlock()
	u.Notify()
	timer := time.NewTimer(u.cfg.VerdictTimeout)
	defer timer.Stop()
	select {
	case <-w.done:
		return w.verdict()
	case <-timer.C:
	case <-ctx.Done():
	}
	u.mu.Lock()
	if u.waiters[seq] == w {
		delete(u.waiters, seq)
		delete(u.liveSeen, seq)
		_, err := u.store.Apply(context.WithoutCancel(ctx), []outbox.Transition{{Seq: seq, Action: outbox.Offline}})
		// Resend it offline now, ahead of everything after it. Not sent yet, it may be in a
		// message pump has read and not published: the rewind drops that read, which would
		// publish it as live with no request waiting, and the events after it behind it.
		u.rewindLocked(seq)
		close(w.done) // decided locally, for every request waiting on it
		u.mu.Unlock()
		u.Notify()
		if err != nil {
			u.log.Error("mark event offline", "seq", seq, "err", err)
		}
		return Verdict{}
	}
	u.mu.Unlock()
	<-w.done // the verdict was delivered, or another request decided, as the deadline passed
	return w.verdict()
}

func verdictFromState(st client.EventState) Verdict {
	a := wire.Ack{Seq: st.Seq, Key: st.Key, Status: wire.AckStatus(st.Status), Code: st.Code, Message: st.Message}
	if st.FlowNo > 0 {
		a.Result = &wire.Result{FlowNo: st.FlowNo}
	}
	return Verdict{Ack: &a, Refused: st.State == "refused", Parked: st.State == "parked"}
}

// Run connects to the broker and runs the lane until ctx ends.
func (u *Uplink) Run(ctx context.Context) error {
	if _, err := u.pinnedKey(ctx); err != nil { // --store-key applied before any catalog comes
		return err
	}
	since, err := u.store.KV(ctx, outbox.KVOfflineSince)
	if err != nil {
		return err
	}
	now := u.cfg.Now()
	if since == 0 {
		since = now.UnixMilli()
		if err := u.store.SetKV(ctx, outbox.KVOfflineSince, since); err != nil {
			return err
		}
	}
	last, _ := u.store.KV(ctx, outbox.KVLastAck)
	silent, err := u.store.KV(ctx, outbox.KVSilentSince)
	if err != nil {
		return err
	}
	startSeq, err := u.store.LastSeq(ctx)
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.offlineSince = time.UnixMilli(since)
	if last > 0 {
		u.lastAck = time.UnixMilli(last)
	}
	if silent > 0 {
		// The store was silent when the agent stopped: it counts as silent since then until
		// it answers again.
		u.unanswered, u.silenceKept = time.UnixMilli(silent), true
	}
	u.startSeq = startSeq
	u.mu.Unlock()

	will, _ := json.Marshal(wire.Presence{V: wire.Version, Terminal: u.cfg.Terminal, Online: false})
	opts := mqtt.NewClientOptions().
		AddBroker(u.cfg.BrokerURL).
		SetClientID(u.cfg.ClientID).
		SetUsername(u.cfg.Username).
		SetPassword(u.cfg.Password).
		SetCleanSession(false).
		SetOrderMatters(true).
		SetAutoReconnect(true).
		SetConnectRetry(true).
		SetConnectRetryInterval(500*time.Millisecond).
		SetMaxReconnectInterval(2*time.Second).
		SetKeepAlive(5*time.Second).
		SetPingTimeout(3*time.Second).
		SetConnectTimeout(5*time.Second).
		SetWriteTimeout(5*time.Second).
		SetWill(wire.StatusTopic(u.cfg.Store, u.cfg.Terminal), string(will), 1, true).
		SetOnConnectHandler(func(c mqtt.Client) { u.onConnect(ctx, c) }).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { u.onLost(ctx, err) })
	if u.cfg.TLS != nil {
		opts.SetTLSConfig(u.cfg.TLS)
	}
	mqttconn.Use(opts, u.cfg.BrokerURL, nil)
	u.client = mqtt.NewClient(opts)
	u.client.Connect() // retries in the background (SetConnectRetry)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); u.sendLoop(ctx) }()
	if u.cfg.HeartbeatEvery > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); u.heartbeatLoop(ctx) }()
	}
	if u.cfg.BacklogEvery > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); u.backlogLoop(ctx) }()
	}
	<-ctx.Done()
	wg.Wait()
	// A connection gets 250 ms to send what it holds and a DISCONNECT (no last will). With
	// none open there is nothing to send, and paho's Disconnect would sit out the whole
	// quiesce before it returns (while it waits for the connect retry to give up): an offline
	// till would stop 250 ms late.
	var quiesce uint
	if u.client.IsConnectionOpen() {
		quiesce = 250
	}
	u.client.Disconnect(quiesce)
	return nil
}

func (u *Uplink) onConnect(ctx context.Context, c mqtt.Client) {
	down := wire.DownTopic(u.cfg.Store, u.cfg.Terminal)
	if t := c.Subscribe(down, 1, func(_ mqtt.Client, m mqtt.Message) { u.onDown(ctx, m.Payload()) }); t.Wait() && t.Error() != nil {
		u.log.Error("subscribe down", "err", t.Error())
	}
	// The chain of the catalog key's rotations before the catalog: a catalog signed by a new
	// key is taken once the chain has moved the pin to it.
	if t := c.Subscribe(wire.CatalogKeysTopic(u.cfg.Store), 1, func(_ mqtt.Client, m mqtt.Message) { u.onCatalogKeys(ctx, m.Payload()) }); t.Wait() && t.Error() != nil {
		u.log.Error("subscribe catalog keys", "err", t.Error())
	}
	if t := c.Subscribe(wire.CatalogTopic(u.cfg.Store), 1, func(_ mqtt.Client, m mqtt.Message) { u.onCatalog(ctx, m.Payload()) }); t.Wait() && t.Error() != nil {
		u.log.Error("subscribe catalog", "err", t.Error())
	}
	if t := c.Subscribe(wire.SettingsTopic(u.cfg.Store), 1, func(_ mqtt.Client, m mqtt.Message) { u.onSettings(ctx, m.Payload()) }); t.Wait() && t.Error() != nil {
		u.log.Error("subscribe settings", "err", t.Error())
	}
	if t := c.Subscribe(wire.HQHeldTopic(u.cfg.Store), 1, func(_ mqtt.Client, m mqtt.Message) { u.onHQHeld(ctx, m.Payload()) }); t.Wait() && t.Error() != nil {
		u.log.Error("subscribe hq", "err", t.Error())
	}
	online, _ := json.Marshal(wire.Presence{V: wire.Version, Terminal: u.cfg.Terminal, Online: true, At: u.cfg.Now()})
	c.Publish(wire.StatusTopic(u.cfg.Store, u.cfg.Terminal), 1, true, online)
	if err := u.store.SetKV(ctx, outbox.KVOfflineSince, 0); err != nil {
		u.log.Error("record online", "err", err)
	}
	if u.cfg.BacklogEvery <= 0 {
		u.clearBacklog(ctx, c)
	} else {
		// Counted as the connection is made, before the lane sends anything again: what the
		// till holds as it comes back.
		u.publishBacklog(ctx, c, true)
		select {
		case u.reportCh <- struct{}{}:
		default:
		}
	}
	u.mu.Lock()
	u.connected = true
	u.offlineSince, u.offlineMono = time.Time{}, time.Time{}
	u.rewindLocked(1) // resend everything unacked
	u.mu.Unlock()
	u.log.Info("connected", "broker", u.cfg.BrokerURL)
	u.Notify()
}

func (u *Uplink) onLost(ctx context.Context, err error) {
	now := u.cfg.Now()
	u.mu.Lock()
	u.connected = false
	if u.offlineSince.IsZero() {
		u.offlineSince, u.offlineMono = now, time.Now()
	}
	u.mu.Unlock()
	if err := u.store.SetKV(context.WithoutCancel(ctx), outbox.KVOfflineSince, now.UnixMilli()); err != nil {
		u.log.Error("record offline", "err", err)
	}
	u.log.Warn("connection lost", "err", err)
}

// rewindLocked makes the sender publish again from seq on.
func (u *Uplink) rewindLocked(seq int64) {
	if seq-1 < u.cursor {
		u.cursor = seq - 1
	}
	for s := range u.inflight {
		if s >= seq {
			delete(u.inflight, s)
		}
	}
	u.gen++
}

func (u *Uplink) sendLoop(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.wakeCh:
		case <-tick.C:
		}
		if err := u.pump(ctx); err != nil && ctx.Err() == nil {
			u.log.Error("publish", "err", err)
		}
		u.keepSilence(ctx)
	}
}

// keepSilence records, once, that the store has not answered for longer than AckTimeout,
// and since when, so that the time offline goes on across a restart. Under the lane's lock,
// as onDown clears it: the record never outlives the answer that ended the silence.
func (u *Uplink) keepSilence(ctx context.Context) {
	now := u.cfg.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.silenceKept {
		return
	}
	since := u.silentSinceLocked(now)
	if since.IsZero() {
		return
	}
	if err := u.store.SetKV(context.WithoutCancel(ctx), outbox.KVSilentSince, since.UnixMilli()); err != nil {
		u.log.Error("record the store's silence", "err", err)
		return
	}
	u.silenceKept = true
}

// pump publishes as many queued events as the window allows.
//
// A live event (one whose request waits for the store's verdict) ends its message, and
// nothing after it is published until its verdict arrives or its deadline passes: past the
// deadline it is resent at once as offline, so the store still sees the terminal's events in
// seq order whatever its live verdict was.
func (u *Uplink) pump(ctx context.Context) error {
	for {
		now := u.cfg.Now()
		u.mu.Lock()
		// The ack timeout and the pause run on the monotonic clock: a step of the wall clock
		// neither resends everything in flight nor holds the lane for the step.
		mono := time.Now()
		if !u.connected || mono.Before(u.pausedUntil) || u.holdingLocked() {
			u.mu.Unlock()
			return nil
		}
		if oldest, ok := u.oldestInflightLocked(); ok && mono.Sub(u.inflight[oldest]) > u.cfg.AckTimeout {
			u.log.Warn("ack timeout, resending", "from_seq", oldest)
			u.rewindLocked(oldest)
			u.lastRewind = 0
		}
		room := u.cfg.Window - len(u.inflight)
		after, gen := u.cursor, u.gen
		from, to := u.replayFrom, u.replayTo
		u.mu.Unlock()
		if room <= 0 {
			return nil
		}
		evs, err := u.store.Sendable(ctx, after, from, to, min(room, u.cfg.BatchMax))
		if err != nil || len(evs) == 0 {
			return err
		}
		if evs, err = u.cutAtLive(ctx, evs); err != nil || len(evs) == 0 {
			return err
		}
		msg, n, err := u.encode(evs)
		if err != nil {
			return err
		}
		evs = evs[:n]
		u.mu.Lock()
		if gen != u.gen || !u.connected {
			u.mu.Unlock()
			continue
		}
		for _, e := range evs {
			u.inflight[e.Seq] = mono
		}
		if u.unanswered.IsZero() {
			u.unanswered, u.unansweredMono = now, time.Now()
		}
		u.cursor = evs[len(evs)-1].Seq
		u.mu.Unlock()
		// QoS 1; the PUBACK is not awaited: only the store's ack counts.
		u.client.Publish(wire.UpTopic(u.cfg.Store, u.cfg.Terminal), 1, false, msg)
	}
}

// holdingLocked reports whether a published live event still waits for its verdict.
func (u *Uplink) holdingLocked() bool {
	for seq := range u.waiters {
		if _, sent := u.inflight[seq]; sent && seq <= u.cursor {
			return true
		}
	}
	return false
}

// cutAtLive ends a message after its first live event. A live event nobody waits for is
// turned offline first: one an earlier run committed (its request was answered, or gave up,
// before a restart), or one of this run no request has waited for since the lane first saw
// it, VerdictTimeout ago; until then it stops the message before it, as its request may not
// have started waiting yet. The time is the process's own: the event's creation time is the
// wall clock's, which a correction can set back by hours, and the lane then held back
// everything behind the event until the clock caught up.
func (u *Uplink) cutAtLive(ctx context.Context, evs []outbox.Event) ([]outbox.Event, error) {
	for i := range evs {
		if evs[i].Offline {
			continue
		}
		seq := evs[i].Seq
		u.mu.Lock()
		_, waiting := u.waiters[seq]
		wait := false
		if waiting {
			delete(u.liveSeen, seq)
		} else if seq > u.startSeq {
			first, seen := u.liveSeen[seq]
			if !seen {
				first = time.Now()
				u.liveSeen[seq] = first
			}
			wait = time.Since(first) < u.cfg.VerdictTimeout
		}
		u.mu.Unlock()
		switch {
		case waiting:
			return evs[:i+1], nil
		case wait:
			return evs[:i], nil
		}
		if _, err := u.store.Apply(ctx, []outbox.Transition{{Seq: seq, Action: outbox.Offline}}); err != nil {
			return nil, err
		}
		u.mu.Lock()
		delete(u.liveSeen, seq)
		u.mu.Unlock()
		evs[i].Offline = true
	}
	return evs, nil
}

func (u *Uplink) oldestInflightLocked() (int64, bool) {
	var oldest int64
	for s := range u.inflight {
		if oldest == 0 || s < oldest {
			oldest = s
		}
	}
	return oldest, oldest != 0
}

// encode encodes the first events of evs as one up message, as many as fit under
// wire.MaxMessageBytes (at least one: an event is at most wire.MaxEventBytes), and returns
// how many it took. A batch of BatchMax large sales (120 lines each) came to 4.4 MB: the
// broker refused the packet and dropped the connection, at every try, and the backlog never
// drained.
func (u *Uplink) encode(evs []outbox.Event) ([]byte, int, error) {
	if len(evs) == 1 {
		b, err := json.Marshal(evs[0].Envelope(u.cfg.Store, u.cfg.Terminal))
		return b, 1, err
	}
	budget := wire.MaxMessageBytes - batchOverhead - len(u.cfg.Store) - len(u.cfg.Terminal)
	raw := make([]json.RawMessage, 0, len(evs))
	for i := range evs {
		b, err := json.Marshal(evs[i].Envelope(u.cfg.Store, u.cfg.Terminal))
		if err != nil {
			return nil, 0, err
		}
		if budget -= len(b) + 1; budget < 0 && len(raw) > 0 {
			break
		}
		raw = append(raw, b)
	}
	if len(raw) == 1 { // one event goes as itself
		return raw[0], 1, nil
	}
	msg, err := wire.MarshalBatch(u.cfg.Store, u.cfg.Terminal, raw)
	return msg, len(raw), err
}

// batchOverhead is room for a batch message's own members around its events.
const batchOverhead = 256

func (u *Uplink) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(u.cfg.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !u.Status().Online {
			continue
		}
		b, err := u.store.Backlog(ctx)
		if err != nil {
			continue
		}
		v, _ := u.store.KV(ctx, outbox.KVCatalogVersion)
		hb := &wire.HeartbeatPayload{Backlog: b.Count, CatalogVersion: v}
		if !b.OldestAt.IsZero() {
			hb.OldestAgeMs = max(0, u.cfg.Now().Sub(b.OldestAt).Milliseconds())
		}
		if _, err := u.store.Enqueue(ctx, wire.KindHeartbeat, hb); err != nil && !errors.Is(err, context.Canceled) {
			u.log.Error("queue heartbeat", "err", err)
		}
		u.Notify()
	}
}

// backlogLoop publishes the backlog while online every BacklogEvery if the count or the
// oldest event changed since the last report (its age alone does not count: the store ages
// it from when it heard it), and unchanged within every wire.BacklogRefresh (a QoS 0 report
// the broker dropped, or a retained one it lost, is replaced within it). A new connection publishes at
// once (onConnect) and starts the interval over.
func (u *Uplink) backlogLoop(ctx context.Context) {
	t := time.NewTicker(u.cfg.BacklogEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.reportCh:
			t.Reset(u.cfg.BacklogEvery)
			continue
		case <-t.C:
		}
		u.mu.Lock()
		online := u.connected
		u.mu.Unlock()
		if online {
			u.publishBacklog(ctx, u.client, false)
		}
	}
}

// publishBacklog publishes what the outbox holds unacknowledged on the terminal's retained
// backlog topic, unless force is false and it is what the last report the broker took said,
// and the next tick still comes within a refresh of that report. A heartbeat goes behind the
// events it counts, so by the time the store has it they are there too; this report goes
// beside them, so the store sees what a till back from offline still holds while it sends
// it, and sees it reach 0.
//
// QoS 0: a report is superseded by the next one, so there is nothing to wait for, and a
// broker that refuses the topic drops the report instead of closing the connection. Reports
// are published one at a time, so they reach the broker in the order they were counted.
func (u *Uplink) publishBacklog(ctx context.Context, c mqtt.Client, force bool) {
	u.reportMu.Lock()
	defer u.reportMu.Unlock()
	b, err := u.store.Backlog(ctx)
	if err != nil {
		if ctx.Err() == nil {
			u.log.Error("count the backlog", "err", err)
		}
		return
	}
	// Unchanged, the report goes again once the next tick could come after a refresh has
	// passed (with half a tick to spare for the ticks' jitter).
	cv, err := u.store.KV(ctx, outbox.KVCatalogVersion)
	if err != nil {
		if ctx.Err() == nil {
			u.log.Error("read the catalog version", "err", err)
		}
		return
	}
	if !force && u.reported == [3]int64{b.Count, b.OldestSeq, cv} &&
		u.cfg.Now().Sub(u.reportedAt) < wire.BacklogRefresh-u.cfg.BacklogEvery*3/2 {
		return
	}
	last, err := u.store.LastSeq(ctx)
	if err != nil {
		if ctx.Err() == nil {
			u.log.Error("read the last seq", "err", err)
		}
		return
	}
	now := u.cfg.Now()
	r := wire.Backlog{V: wire.Version, Terminal: u.cfg.Terminal, Events: b.Count, Seq: last, At: now, CatalogVersion: cv}
	if b.Count > 0 && !b.OldestAt.IsZero() {
		r.OldestMs = max(0, now.Sub(b.OldestAt).Milliseconds())
	}
	body, err := json.Marshal(r)
	if err != nil {
		u.log.Error("encode the backlog report", "err", err)
		return
	}
	if !u.reportedEver {
		// Recorded before the report goes: a run that stops between the two still knows to
		// clear it if reports are turned off.
		if err := u.store.SetKV(ctx, outbox.KVBacklogReported, 1); err != nil {
			u.log.Error("record the backlog report", "err", err)
			return
		}
		u.reportedEver = true
	}
	tok := c.Publish(wire.BacklogTopic(u.cfg.Store, u.cfg.Terminal), 0, true, body)
	if !tok.WaitTimeout(2*time.Second) || tok.Error() != nil {
		// Not written: the next tick tries again, whatever the count then.
		u.reported = [3]int64{-1, -1, -1}
		return
	}
	u.reported, u.reportedAt = [3]int64{b.Count, b.OldestSeq, cv}, now
}

// clearBacklog clears the retained backlog report an earlier run of the agent left on the
// broker (reports are off now): left there, it would stand for the till for good. It
// publishes nothing when the agent never reported: there is nothing to clear.
func (u *Uplink) clearBacklog(ctx context.Context, c mqtt.Client) {
	if reported, err := u.store.KV(ctx, outbox.KVBacklogReported); err != nil || reported == 0 {
		return
	}
	tok := c.Publish(wire.BacklogTopic(u.cfg.Store, u.cfg.Terminal), 0, true, []byte{})
	if !tok.WaitTimeout(2*time.Second) || tok.Error() != nil {
		return // the next connection tries again
	}
	if err := u.store.SetKV(ctx, outbox.KVBacklogReported, 0); err != nil {
		u.log.Error("record the backlog report cleared", "err", err)
	}
}

// String describes the lane for logs.
func (u *Uplink) String() string {
	return fmt.Sprintf("uplink %s/%s via %s", u.cfg.Store, u.cfg.Terminal, u.cfg.BrokerURL)
}
