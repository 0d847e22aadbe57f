// Package storesim is a test double for the store: a simple, faithful responder that speaks
// the real wire protocol over a real MQTT broker (paho, QoS 1, persistent session), so that
// terminal-agent tests and benchmarks have a store to talk to. It is never used in production.
//
// The default store accepts each terminal's events strictly in seq order starting at 1,
// answers resends with the recorded verdict (duplicate, or conflict when the content hash
// differs), answers gaps with out_of_order, and sends the acks of one up message as one Acks
// message on the terminal's down topic. Knobs (Decide, AckDelay, DuplicateAcks, Silent) bend
// that behaviour for tests and may be changed while the responder runs.
package storesim

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/mqttconn"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// CodeTerminalMismatch is the code of the rejection of every event of an up message whose
// terminal differs from the terminal named in its topic.
const CodeTerminalMismatch = "wire_terminal_mismatch"

// CodeStoreMismatch is the code of the rejection of every event of an up message whose store
// differs from this responder's store.
const CodeStoreMismatch = "wire_store_mismatch"

// CodeConflict is the code of a conflict ack: the key was already used with other content.
const CodeConflict = "idempotency_conflict"

// DecideFunc decides on a new event that is next in its terminal's seq order. live is true
// for a live attempt (env.Offline is false). It returns nil for the default verdict (accept),
// or an ack whose Status, Code, Message, RetryAfterMs and Result are used (the responder
// fills in Seq, Key and Live):
//
//   - accepted: the event is committed; a nil Result, or zero FlowNo or BusinessDate in it,
//     is filled in as for the default verdict (so a test can set Oversold).
//   - rejected: final for an offline attempt; for a live attempt a live verdict, recorded
//     as not final, so that the terminal may resend the event offline.
//   - rate_limited: never final; a resend is decided again. For an offline attempt the seq is
//     not passed either, so later events wait (out_of_order) and order holds.
//   - any other status is sent as is, and the event is neither recorded nor passed.
//
// A DecideFunc is called from the responder's single processing goroutine, without any lock
// held, so it may call the Responder's methods. It must not block for long.
type DecideFunc func(env wire.Envelope, live bool) *wire.Ack

// Options configure a Responder.
type Options struct {
	// BrokerURL is the MQTT broker, e.g. "tcp://127.0.0.1:1883". Required.
	BrokerURL string
	// Store is the store id the responder plays. Required.
	Store string
	// ClientID is the MQTT client id of the persistent session; "storesim-" + Store if empty.
	ClientID string
	// Location is the store's time zone for business dates; time.Local if nil.
	Location *time.Location

	// Decide optionally overrides the default verdict on new events; see DecideFunc.
	Decide DecideFunc
	// AckDelay is how long to wait, after an up message is processed, before its acks are
	// sent. Acks of one terminal always go out in order.
	AckDelay time.Duration
	// DuplicateAcks makes the responder send every Acks message twice.
	DuplicateAcks bool
	// Silent makes the responder drop every up message unprocessed and send no acks, as a
	// store that has gone silent. Acks already waiting for AckDelay are dropped too.
	Silent bool
}

// Stats counts what a Responder has seen and answered.
type Stats struct {
	Messages  int64 // up messages received, including ones dropped while silent
	Silenced  int64 // up messages dropped unprocessed because the store was silent
	Bad       int64 // up messages that could not be decoded at all (nothing to ack)
	Events    int64 // events in the up messages that were decoded
	BadEvents int64 // events that failed to decode (acked by seq if it could be read)

	// Acks sent, by status. An Acks message sent twice (DuplicateAcks) counts once.
	Accepted    int64
	Duplicates  int64
	Rejected    int64
	RateLimited int64
	Conflicts   int64
	OutOfOrder  int64

	AckMessages   int64 // down messages published, each copy counted
	DroppedAcks   int64 // down messages dropped because the store went silent before sending
	PublishErrors int64 // down messages whose publication failed
}

// record is what the store decided for one seq of a terminal.
type record struct {
	hash    string
	status  wire.AckStatus
	final   bool // false for a live verdict or a rate limit: a resend is decided again
	code    string
	message string
	result  *wire.Result // accepted only; shared, read-only
}

// terminal is the store's state for one terminal. next and recs are written only by the
// processing goroutine, under Responder.mu.
type terminal struct {
	next     int64    // the next seq expected
	recs     []record // recs[i] is the record of seq i+1, for every seq below next
	accepted []wire.Envelope
}

// Responder is a running store test double. Its methods are safe for concurrent use.
type Responder struct {
	store    string
	loc      *time.Location
	clientID string
	client   mqtt.Client

	in      fifo[inMsg]
	senders map[string]*sender // by terminal; owned by the processing goroutine

	mu          sync.Mutex
	decide      DecideFunc
	ackDelay    time.Duration
	dupAcks     bool
	silent      bool
	terms       map[string]*terminal
	acceptCount map[string]int
	flow        int64
	lastY       int // the cached business date, see businessDate
	lastM       time.Month
	lastD       int
	lastDate    string
	stats       Stats
	changed     chan struct{} // closed and replaced whenever events are accepted

	subscribed chan struct{} // closed after the first successful subscription
	subOnce    sync.Once
	subErr     chan error

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

type inMsg struct {
	topic   string
	payload []byte
}

// Start connects to the broker with a persistent session, subscribes (QoS 1) to every up
// topic of the store and starts answering. It returns once the subscription is in place, or
// with an error if ctx ends or the broker cannot be reached.
func Start(ctx context.Context, o Options) (*Responder, error) {
	if o.BrokerURL == "" {
		return nil, errors.New("storesim: Options.BrokerURL is required")
	}
	if !wire.ValidID(o.Store) {
		return nil, fmt.Errorf("storesim: store id %q is not valid", o.Store)
	}
	r := &Responder{
		store:       o.Store,
		loc:         o.Location,
		clientID:    o.ClientID,
		senders:     map[string]*sender{},
		decide:      o.Decide,
		ackDelay:    o.AckDelay,
		dupAcks:     o.DuplicateAcks,
		silent:      o.Silent,
		terms:       map[string]*terminal{},
		acceptCount: map[string]int{},
		changed:     make(chan struct{}),
		subscribed:  make(chan struct{}),
		subErr:      make(chan error, 1),
		done:        make(chan struct{}),
	}
	r.in.init()
	if r.loc == nil {
		r.loc = time.Local
	}
	if r.clientID == "" {
		r.clientID = "storesim-" + o.Store
	}
	handler := func(_ mqtt.Client, m mqtt.Message) {
		r.in.push(inMsg{topic: m.Topic(), payload: m.Payload()})
	}
	opts := mqtt.NewClientOptions().
		AddBroker(o.BrokerURL).
		SetClientID(r.clientID).
		SetCleanSession(false).
		SetOrderMatters(true).
		SetAutoReconnect(true).
		SetConnectRetry(false).
		SetMaxReconnectInterval(time.Second).
		SetConnectTimeout(5 * time.Second).
		SetWriteTimeout(5 * time.Second).
		SetKeepAlive(30 * time.Second).
		SetStore(mqtt.NewOrderedMemoryStore()).
		// With a persistent session the broker may deliver queued messages before the
		// subscription is made again: they reach the default handler.
		SetDefaultPublishHandler(handler).
		SetOnConnectHandler(func(c mqtt.Client) {
			tok := c.Subscribe(wire.UpWildcard(o.Store), 1, handler)
			go func() {
				select {
				case <-tok.Done():
				case <-r.done:
					return
				}
				if err := tok.Error(); err != nil {
					select {
					case r.subErr <- err:
					default:
					}
					return
				}
				r.subOnce.Do(func() { close(r.subscribed) })
			}()
		})
	mqttconn.OwnCopies(opts)
	r.client = mqtt.NewClient(opts)

	r.wg.Add(1)
	go r.process()

	fail := func(err error) (*Responder, error) {
		r.Close()
		return nil, err
	}
	tok := r.client.Connect()
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return fail(fmt.Errorf("storesim: connect to %s: %w", o.BrokerURL, err))
		}
	case <-ctx.Done():
		return fail(fmt.Errorf("storesim: connect to %s: %w", o.BrokerURL, ctx.Err()))
	}
	select {
	case <-r.subscribed:
	case err := <-r.subErr:
		return fail(fmt.Errorf("storesim: subscribe to %s: %w", wire.UpWildcard(o.Store), err))
	case <-ctx.Done():
		return fail(fmt.Errorf("storesim: subscribe to %s: %w", wire.UpWildcard(o.Store), ctx.Err()))
	}
	return r, nil
}

// Close disconnects from the broker (keeping the persistent session, so that a responder
// started again with the same ClientID receives what was published meanwhile) and stops the
// responder. Acks not yet sent are dropped, as by a store that stops. Close is idempotent.
func (r *Responder) Close() error {
	r.closeOnce.Do(func() {
		close(r.done)
		r.client.Disconnect(250)
		r.wg.Wait()
	})
	return nil
}

// SetSilent makes the store go silent (true: up messages are dropped unprocessed and no acks
// are sent) or speak again (false). Messages dropped while silent are never processed; the
// terminal has to resend them.
func (r *Responder) SetSilent(silent bool) {
	r.mu.Lock()
	r.silent = silent
	r.mu.Unlock()
}

// SetAckDelay sets the wait before the acks of newly processed up messages are sent.
func (r *Responder) SetAckDelay(d time.Duration) {
	r.mu.Lock()
	r.ackDelay = d
	r.mu.Unlock()
}

// SetDuplicateAcks makes the responder send every Acks message twice (true) or once (false).
func (r *Responder) SetDuplicateAcks(dup bool) {
	r.mu.Lock()
	r.dupAcks = dup
	r.mu.Unlock()
}

// SetDecide replaces the verdict override (nil restores the default store).
func (r *Responder) SetDecide(f DecideFunc) {
	r.mu.Lock()
	r.decide = f
	r.mu.Unlock()
}

// Key is the catalog key of every simulated store: PublishCatalog signs with it, and a
// terminal pins it as it would a store's.
var Key = ed25519.NewKeyFromSeed(func() []byte { s := sha256.Sum256([]byte("posgate storesim catalog key")); return s[:] }())

// PublishCatalog publishes c as the store's retained catalog (QoS 1) on wire.CatalogTopic and
// waits for the broker to take it. c is sent as given, not validated; one with no key and no
// signature is signed with Key first, as a store signs its catalogs.
func (r *Responder) PublishCatalog(c wire.Catalog) error {
	if c.Key == "" && c.Sig == "" {
		if err := wire.SignCatalog(&c, Key); err != nil {
			return fmt.Errorf("storesim: sign catalog: %w", err)
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("storesim: encode catalog: %w", err)
	}
	tok := r.client.Publish(wire.CatalogTopic(r.store), 1, true, b)
	if !tok.WaitTimeout(30 * time.Second) {
		return errors.New("storesim: publish catalog: timed out")
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("storesim: publish catalog: %w", err)
	}
	return nil
}

// Accepted returns a copy of the events of terminal accepted as new, in acceptance order.
func (r *Responder) Accepted(terminal string) []wire.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.terms[terminal]
	if t == nil {
		return nil
	}
	return append([]wire.Envelope(nil), t.accepted...)
}

// AcceptedCount returns how many events of terminal were accepted as new.
func (r *Responder) AcceptedCount(terminal string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.terms[terminal]; t != nil {
		return len(t.accepted)
	}
	return 0
}

// AcceptCount returns how many times the event with idempotency key key was accepted as
// new. The responder never accepts a key twice, so it is 0 or 1; tests assert it.
func (r *Responder) AcceptCount(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acceptCount[key]
}

// Expect returns the next seq the store expects from terminal (1 for a terminal not seen).
func (r *Responder) Expect(terminal string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.terms[terminal]; t != nil {
		return t.next
	}
	return 1
}

// Stats returns a snapshot of the counters.
func (r *Responder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// WaitAccepted waits until at least n events of terminal have been accepted, or ctx ends.
func (r *Responder) WaitAccepted(ctx context.Context, terminal string, n int) error {
	for {
		r.mu.Lock()
		got := 0
		if t := r.terms[terminal]; t != nil {
			got = len(t.accepted)
		}
		ch := r.changed
		r.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("storesim: %d of %d events of terminal %s accepted: %w", got, n, terminal, ctx.Err())
		case <-r.done:
			return fmt.Errorf("storesim: %d of %d events of terminal %s accepted: responder closed", got, n, terminal)
		}
	}
}

// process is the single goroutine that handles up messages in the order they arrived.
func (r *Responder) process() {
	defer r.wg.Done()
	var batch []inMsg
	for {
		select {
		case <-r.done:
			return
		case <-r.in.wake:
		}
		batch = r.in.swap(batch[:0])
		for i := range batch {
			select {
			case <-r.done:
				return
			default:
			}
			r.handle(batch[i].topic, batch[i].payload)
		}
		clear(batch)
	}
}

// handle processes one up message and queues its acks.
func (r *Responder) handle(topic string, payload []byte) {
	r.mu.Lock()
	r.stats.Messages++
	if r.silent {
		r.stats.Silenced++
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()

	_, termID, okTopic := wire.ParseUpTopic(topic)
	up, err := wire.DecodeUp(payload)

	r.mu.Lock()
	if !okTopic || err != nil {
		r.stats.Bad++
		r.mu.Unlock()
		return
	}
	delay, dup := r.ackDelay, r.dupAcks
	r.stats.Events += int64(len(up.Items))
	acks := make([]wire.Ack, 0, len(up.Items))
	mismatch := ""
	switch {
	case up.Store != "" && up.Store != r.store:
		mismatch = CodeStoreMismatch
	case up.Terminal != "" && up.Terminal != termID:
		mismatch = CodeTerminalMismatch
	}
	accepted := false
	if mismatch != "" {
		for i := range up.Items {
			it := &up.Items[i]
			if it.Err != nil {
				r.stats.BadEvents++
			}
			if it.Seq <= 0 {
				continue
			}
			acks = append(acks, wire.Ack{
				Seq: it.Seq, Key: it.Key, Status: wire.AckRejected, Live: !it.Env.Offline,
				Code:    mismatch,
				Message: fmt.Sprintf("event of store %s terminal %s arrived on topic %s", up.Store, up.Terminal, topic),
			})
		}
	} else {
		t := r.terms[termID]
		if t == nil {
			t = &terminal{next: 1}
			r.terms[termID] = t
		}
		for i := range up.Items {
			a, ok, acc := r.step(t, &up.Items[i])
			if ok {
				acks = append(acks, a)
			}
			accepted = accepted || acc
		}
	}
	for i := range acks {
		switch acks[i].Status {
		case wire.AckAccepted:
			r.stats.Accepted++
		case wire.AckDuplicate:
			r.stats.Duplicates++
		case wire.AckRejected:
			r.stats.Rejected++
		case wire.AckRateLimited:
			r.stats.RateLimited++
		case wire.AckConflict:
			r.stats.Conflicts++
		case wire.AckOutOfOrder:
			r.stats.OutOfOrder++
		}
	}
	if accepted {
		close(r.changed)
		r.changed = make(chan struct{})
	}
	r.mu.Unlock()

	if len(acks) == 0 {
		return
	}
	b, err := json.Marshal(wire.Acks{V: wire.Version, Kind: wire.KindAcks, Store: r.store, Terminal: termID, Acks: acks})
	if err != nil { // cannot happen for these types
		panic("storesim: encode acks: " + err.Error())
	}
	s := r.senders[termID]
	if s == nil {
		s = r.newSender(wire.DownTopic(r.store, termID))
		r.senders[termID] = s
	}
	out := outMsg{due: time.Now().Add(delay), payload: b}
	s.q.push(out)
	if dup {
		s.q.push(out)
	}
}

// step decides one event of terminal t. It is called with r.mu held, and may release it
// around the Decide call. It returns the ack, whether there is one (an event whose seq cannot
// be read cannot be acked), and whether the event was accepted as new.
func (r *Responder) step(t *terminal, it *wire.Item) (ack wire.Ack, ok, accepted bool) {
	if it.Err != nil {
		r.stats.BadEvents++
	}
	seq := it.Seq
	if seq <= 0 {
		return wire.Ack{}, false, false
	}
	live := !it.Env.Offline
	switch {
	case seq > t.next:
		return wire.Ack{
			Seq: seq, Key: it.Key, Status: wire.AckOutOfOrder, Live: live, Expect: t.next,
			Message: fmt.Sprintf("the store expects seq %d first", t.next),
		}, true, false
	case seq == t.next:
		a, rec, keep := r.decideNew(t, it, live)
		if keep {
			t.recs = append(t.recs, rec)
			t.next++
		}
		return a, true, a.Status == wire.AckAccepted && keep
	}
	rec := &t.recs[seq-1]
	// Other content under a final key is a conflict; a live verdict or a rate limit binds
	// nothing, whatever comes under its key next is decided again (as the store does).
	if it.Err == nil && it.Env.Hash != rec.hash && rec.final {
		return wire.Ack{
			Seq: seq, Key: it.Key, Status: wire.AckConflict, Live: live, Code: CodeConflict,
			Message: fmt.Sprintf("key %s was already used with other content", it.Key),
		}, true, false
	}
	if !rec.final {
		// A live verdict or a rate limit decided nothing for good: decide again (an offline
		// resend is never refused for stock or limits by the default store).
		a, nrec, keep := r.decideNew(t, it, live)
		if keep {
			t.recs[seq-1] = nrec
		}
		return a, true, a.Status == wire.AckAccepted && keep
	}
	if rec.status == wire.AckAccepted {
		return wire.Ack{Seq: seq, Key: it.Key, Status: wire.AckDuplicate, Live: live, Result: rec.result}, true, false
	}
	return wire.Ack{Seq: seq, Key: it.Key, Status: rec.status, Live: live, Code: rec.code, Message: rec.message}, true, false
}

// decideNew decides an event as new: a bad event is rejected with its error's code, a good
// one goes to Decide or is accepted. keep reports whether the verdict is recorded (and the
// terminal's seq passed). Called with r.mu held; releases it around Decide.
func (r *Responder) decideNew(t *terminal, it *wire.Item, live bool) (ack wire.Ack, rec record, keep bool) {
	if it.Err != nil {
		pe := perr.As(it.Err)
		ack = wire.Ack{Seq: it.Seq, Key: it.Key, Status: wire.AckRejected, Live: live, Code: pe.Code, Message: pe.Message}
		return ack, record{hash: it.Env.Hash, status: wire.AckRejected, final: !live, code: pe.Code, message: pe.Message}, true
	}
	var v *wire.Ack
	if decide := r.decide; decide != nil {
		r.mu.Unlock()
		v = decide(it.Env, live)
		r.mu.Lock()
	}
	if v == nil {
		v = &wire.Ack{Status: wire.AckAccepted}
	}
	ack = *v
	ack.Seq, ack.Key, ack.Live = it.Seq, it.Key, live
	rec = record{hash: it.Env.Hash, status: ack.Status, code: ack.Code, message: ack.Message}
	switch ack.Status {
	case wire.AckAccepted:
		res := &wire.Result{}
		if ack.Result != nil {
			*res = *ack.Result
		}
		if res.FlowNo == 0 {
			r.flow++
			res.FlowNo = r.flow
		}
		if res.BusinessDate == "" {
			res.BusinessDate = r.businessDate(it.Env.At)
		}
		ack.Result = res
		rec.result, rec.final = res, true
		t.accepted = append(t.accepted, it.Env)
		r.acceptCount[it.Key]++
	case wire.AckRejected:
		rec.final = !live
	case wire.AckRateLimited:
		if !live {
			// Pacing the sync lane: the store takes this seq later, and nothing after it
			// before, so that a terminal's events land in seq order.
			return ack, record{}, false
		}
		rec.final = false
	default:
		return ack, record{}, false
	}
	return ack, rec, true
}

// businessDate returns at's date in the store's time zone. Events come in time order, so the
// last date is cached. Called with r.mu held.
func (r *Responder) businessDate(at time.Time) string {
	y, m, d := at.In(r.loc).Date()
	if y != r.lastY || m != r.lastM || d != r.lastD || r.lastDate == "" {
		r.lastY, r.lastM, r.lastD = y, m, d
		r.lastDate = fmt.Sprintf("%04d-%02d-%02d", y, int(m), d)
	}
	return r.lastDate
}

// outMsg is an Acks message waiting to be sent.
type outMsg struct {
	due     time.Time
	payload []byte
}

// sender publishes one terminal's Acks messages in order, each at its due time.
type sender struct {
	topic string
	q     fifo[outMsg]
}

// maxInFlight bounds the publications a sender has not yet seen acknowledged by the broker.
const maxInFlight = 64

func (r *Responder) newSender(topic string) *sender {
	s := &sender{topic: topic}
	s.q.init()
	r.wg.Add(1)
	go r.runSender(s)
	return s
}

func (r *Responder) runSender(s *sender) {
	defer r.wg.Done()
	var (
		batch   []outMsg
		pending []mqtt.Token
		timer   *time.Timer
	)
	// settle waits for the oldest pending publications until at most keep remain.
	settle := func(keep int) bool {
		for len(pending) > keep {
			select {
			case <-pending[0].Done():
			case <-r.done:
				return false
			}
			if pending[0].Error() != nil {
				r.mu.Lock()
				r.stats.PublishErrors++
				r.mu.Unlock()
			}
			pending[0] = nil
			pending = pending[1:]
		}
		return true
	}
	for {
		if !settle(0) {
			return
		}
		select {
		case <-r.done:
			return
		case <-s.q.wake:
		}
		batch = s.q.swap(batch[:0])
		for i := range batch {
			m := &batch[i]
			if d := time.Until(m.due); d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-r.done:
					return
				}
			}
			r.mu.Lock()
			silent := r.silent
			if silent {
				r.stats.DroppedAcks++
			} else {
				r.stats.AckMessages++
			}
			r.mu.Unlock()
			if silent {
				continue
			}
			pending = append(pending, r.client.Publish(s.topic, 1, false, m.payload))
			if !settle(maxInFlight) {
				return
			}
		}
		clear(batch)
	}
}

// fifo is an unbounded queue with one consumer, which takes everything queued at once.
type fifo[T any] struct {
	mu    sync.Mutex
	items []T
	wake  chan struct{} // signalled (capacity 1) when items are pushed
}

func (q *fifo[T]) init() { q.wake = make(chan struct{}, 1) }

func (q *fifo[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// swap returns everything queued and keeps buf (emptied) as the queue's next buffer.
func (q *fifo[T]) swap(buf []T) []T {
	q.mu.Lock()
	items := q.items
	q.items = buf
	q.mu.Unlock()
	return items
}
