package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/store"
)

// TestBadInputEnvelopes acts as hostile or broken terminals on a real mosquitto in front of
// an in-process store-server on a real Redis: malformed and hostile up messages mixed with
// good events. Every bad event whose seq can be read is answered with a coded, final
// rejection (and parked), it takes its place in the terminal's sequence, and the good
// events around it are accepted and counted exactly once; a message whose seq cannot be
// read is not answered and does not hold up the next good event.

const biCatalogCSV = "sku,name,price\nA1,Apple,3.50\nB2,Bread,12.00\nC3,Cola,2.75\nD4,Dates,0.99\n"

var (
	biPrices  = map[string]money.Fen{"A1": 350, "B2": 1200, "C3": 275, "D4": 99}
	biOpening = map[string]int64{"A1": 1000, "B2": 1000, "C3": 1000, "D4": 1000}
)

// biAnyCode stands for any non-empty code in the expected parked events.
const biAnyCode = "*"

// biAckWait bounds the wait for an acks message that should come.
const biAckWait = 5 * time.Second

// biBus is one raw paho client playing every terminal: it publishes on up topics and
// collects the acks of every down topic of the store, per terminal.
type biBus struct {
	c  mqtt.Client
	mu sync.Mutex
	in map[string]chan biDown
}

// biDown is one down message.
type biDown struct {
	acks wire.Acks
	err  error
	raw  []byte
}

func biConnect(t *testing.T, url string) *biBus {
	t.Helper()
	b := &biBus{in: map[string]chan biDown{}}
	opts := mqtt.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("bi-terminals-%d", time.Now().UnixNano())).
		SetCleanSession(true).SetOrderMatters(true).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second)
	b.c = mqtt.NewClient(opts)
	if tok := b.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", url, tok.Error())
	}
	t.Cleanup(func() { b.c.Disconnect(250) })
	tok := b.c.Subscribe("pos/"+biStoreID+"/+/down", 1, func(_ mqtt.Client, m mqtt.Message) {
		p := strings.Split(m.Topic(), "/")
		raw := append([]byte(nil), m.Payload()...)
		if d, err := wire.DecodeDown(raw); err == nil && d.Resend != nil {
			return // the store asks for events again (catch-up): these tests read acks
		}
		a, err := wire.DecodeAcks(raw)
		b.ch(p[2]) <- biDown{acks: a, err: err, raw: raw}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return b
}

func (b *biBus) ch(terminal string) chan biDown {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.in[terminal]
	if c == nil {
		c = make(chan biDown, 1024)
		b.in[terminal] = c
	}
	return c
}

func (b *biBus) publish(t testing.TB, terminal string, msg []byte) {
	t.Helper()
	tok := b.c.Publish(wire.UpTopic(biStoreID, terminal), 1, false, msg)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish on %s: %v", wire.UpTopic(biStoreID, terminal), tok.Error())
	}
}

// next returns the next down message of a terminal, or false after wait.
func (b *biBus) next(terminal string, wait time.Duration) (biDown, bool) {
	select {
	case d := <-b.ch(terminal):
		return d, true
	case <-time.After(wait):
		return biDown{}, false
	}
}

// biWant is the ack expected for one event.
type biWant struct {
	seq     int64
	status  wire.AckStatus
	code    string // rejected, conflict
	anyCode bool   // rejected with any non-empty code
	expect  int64  // out_of_order
	live    bool   // accepted: the ack's live flag
	sale    *wire.SalePayload
	refund  *wire.RefundPayload
	noPark  bool // a rejection or conflict that is not (newly) parked: topic mismatch, replay
}

func biAccepted(seq int64) biWant { return biWant{seq: seq, status: wire.AckAccepted} }
func biRejected(seq int64, code string) biWant {
	return biWant{seq: seq, status: wire.AckRejected, code: code}
}

// biLiveRejected is a live event's rejection: a live verdict, not final, and not parked.
func biLiveRejected(seq int64, code string) biWant {
	return biWant{seq: seq, status: wire.AckRejected, code: code, noPark: true}
}
func biDuplicate(seq int64) biWant { return biWant{seq: seq, status: wire.AckDuplicate} }
func biConflict(seq int64) biWant {
	return biWant{seq: seq, status: wire.AckConflict, code: ledger.CodeIdempotencyConflict}
}
func biOutOfOrder(seq, expect int64) biWant {
	return biWant{seq: seq, status: wire.AckOutOfOrder, expect: expect}
}

// biRun is the state of one TestBadInputEnvelopes: the server, the terminals' client, the
// business time of every event, and what the ledger should end up holding.
type biRun struct {
	srv  *biServer
	bus  *biBus
	at   time.Time
	date string

	mu       sync.Mutex
	counters map[string]*client.Counters // terminal → expected day totals
	moved    map[string]int64            // sku → expected stock change by events
	flows    map[string]int64            // key → flow number of an accepted sale or refund
	flowKey  map[int64]string            // flow number → key (flow numbers never repeat)
	parked   map[string]string           // key → code of an expected parked event
	counted  map[string]bool             // keys whose sale or refund is in the expectations
}

// openStore imports biCatalogCSV and books each SKU's opening stock (biOpening).
func (s *biServer) openStore(t *testing.T) {
	t.Helper()
	s.importCSV(t, []byte(biCatalogCSV))
	for _, sku := range slices.Sorted(maps.Keys(biOpening)) {
		if qty, applied := s.adjust(t, "opening-"+sku, sku, biOpening[sku], ledger.ReasonOpening); !applied || qty != biOpening[sku] {
			t.Fatalf("opening stock %s: qty %d applied %v", sku, qty, applied)
		}
	}
}

// biStartRun connects the terminals' client to srv and waits until the store answers. The
// run's events happen a minute ago in the store's time zone (r.date is their business date).
func biStartRun(t *testing.T, srv *biServer) *biRun {
	t.Helper()
	loc, err := time.LoadLocation(biTZ)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().In(loc).Add(-time.Minute).Truncate(time.Millisecond)
	r := &biRun{
		srv: srv, bus: biConnect(t, srv.Broker), at: at, date: at.Format(wire.BusinessDate),
		counters: map[string]*client.Counters{}, moved: map[string]int64{}, flows: map[string]int64{},
		flowKey: map[int64]string{}, parked: map[string]string{}, counted: map[string]bool{},
	}
	r.warmUp(t)
	return r
}

func (r *biRun) seal(kind wire.Kind, terminal string, seq int64, payload []byte) wire.Envelope {
	env := wire.NewEnvelope(kind, biStoreID, terminal, seq, r.at, payload)
	env.Offline = true // the backlog lane, unless a case says otherwise
	return env
}

func biMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return b
}

// biEdit changes the top-level fields of an encoded envelope: set (a raw JSON value) or
// delete (nil).
func biEdit(t testing.TB, env []byte, fields map[string]any) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(env, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range fields {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = json.RawMessage(v.(string))
	}
	return biMarshal(t, m)
}

// biBatch builds a batch message by hand, keeping each event's bytes as they are.
func biBatch(terminal string, events ...[]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"v":1,"kind":"batch","store":%q,"terminal":%q,"events":[`, biStoreID, terminal)
	b.Write(bytes.Join(events, []byte(",")))
	b.WriteString("]}")
	return b.Bytes()
}

// biLine is a quantity of a SKU at its catalog price.
type biLine struct {
	sku string
	qty int64
}

// biSale builds a valid sale; with no payments it is paid in cash, exactly.
func biSale(id string, lines []biLine, pays []wire.Payment, change money.Fen) *wire.SalePayload {
	p := &wire.SalePayload{SaleID: id, Payments: pays, Change: change}
	for i, l := range lines {
		amt := biPrices[l.sku] * money.Fen(l.qty)
		p.Lines = append(p.Lines, wire.Line{Line: i + 1, SKU: l.sku, Qty: l.qty, UnitPrice: biPrices[l.sku], Amount: amt})
		p.Total += amt
	}
	if len(p.Payments) == 0 {
		p.Payments = []wire.Payment{{Method: wire.MethodCash, Amount: p.Total}}
	}
	return p
}

// goodSale returns the n-th of a few kinds of valid sale: cash, card, cash with change,
// QR, card and cash with change, several lines.
func biGoodSale(id string, n int) *wire.SalePayload {
	switch n % 5 {
	case 0:
		return biSale(id, []biLine{{"A1", 2}}, nil, 0) // 7.00 cash
	case 1:
		return biSale(id, []biLine{{"B2", 1}, {"C3", 3}}, // 20.25 card
			[]wire.Payment{{Method: wire.MethodCard, Amount: 2025, Reference: "CARD-" + id}}, 0)
	case 2:
		return biSale(id, []biLine{{"D4", 5}}, // 4.95, 10.00 cash, 5.05 change
			[]wire.Payment{{Method: wire.MethodCash, Amount: 1000}}, 505)
	case 3:
		return biSale(id, []biLine{{"A1", 1}}, // 3.50 QR
			[]wire.Payment{{Method: wire.MethodQR, Amount: 350, Reference: "QR-" + id}}, 0)
	default:
		return biSale(id, []biLine{{"C3", 2}, {"A1", 1}, {"C3", 1}}, // 11.75: card 5.00 + cash 7.00, 0.25 change
			[]wire.Payment{{Method: wire.MethodCard, Amount: 500, Reference: "CARD-" + id},
				{Method: wire.MethodCash, Amount: 700}}, 25)
	}
}

// good returns a valid sale event of a terminal and the ack it must get.
func (r *biRun) good(t testing.TB, terminal string, seq int64) ([]byte, biWant) {
	p := biGoodSale(fmt.Sprintf("%s-%d", terminal, seq), int(seq))
	return biMarshal(t, r.seal(wire.KindSale, terminal, seq, biMarshal(t, p))), biWant{seq: seq, status: wire.AckAccepted, sale: p}
}

// heartbeat returns a valid heartbeat event (not counted anywhere) and its ack.
func (r *biRun) heartbeat(t testing.TB, terminal string, seq, backlog int64) ([]byte, biWant) {
	p := wire.HeartbeatPayload{Backlog: backlog, OldestAgeMs: 10 * backlog, CatalogVersion: 1}
	return biMarshal(t, r.seal(wire.KindHeartbeat, terminal, seq, biMarshal(t, p))), biAccepted(seq)
}

// event seals a raw payload of a kind.
func (r *biRun) event(t testing.TB, kind wire.Kind, terminal string, seq int64, payload string) []byte {
	return biMarshal(t, r.seal(kind, terminal, seq, []byte(payload)))
}

// step publishes msg on terminal's up topic as a subtest and checks the acks message that
// answers it; with no wants, no answer is expected (the next step's answer proves it).
func (r *biRun) step(t *testing.T, name, terminal string, msg []byte, wants ...biWant) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Helper()
		r.expect(wants, terminal)
		r.bus.publish(t, terminal, msg)
		if len(wants) == 0 {
			return
		}
		d, ok := r.bus.next(terminal, biAckWait)
		if !ok {
			t.Errorf("%s: no acks within %v, want %s", terminal, biAckWait, biWantString(wants))
			return
		}
		if d.err != nil {
			t.Errorf("%s: undecodable down message %s: %v", terminal, d.raw, d.err)
			return
		}
		if d.acks.Store != biStoreID || d.acks.Terminal != terminal {
			t.Errorf("down message for %s/%s on %s's topic", d.acks.Store, d.acks.Terminal, terminal)
		}
		if len(d.acks.Acks) != len(wants) {
			t.Errorf("%s: got acks %s, want %s", terminal, d.raw, biWantString(wants))
			return
		}
		for i, w := range wants {
			r.check(t, terminal, d.acks.Acks[i], w)
		}
	})
}

func biWantString(wants []biWant) string {
	var parts []string
	for _, w := range wants {
		s := fmt.Sprintf("%d:%s", w.seq, w.status)
		if w.code != "" {
			s += "/" + w.code
		}
		if w.expect != 0 {
			s += fmt.Sprintf("(expect %d)", w.expect)
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// expect records what the wanted acks commit the ledger to.
func (r *biRun) expect(wants []biWant, terminal string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range wants {
		key := wire.Key(terminal, w.seq)
		switch {
		case w.status == wire.AckAccepted && (w.sale != nil || w.refund != nil) && !r.counted[key]:
			r.counted[key] = true
			c := r.counters[terminal]
			if c == nil {
				c = &client.Counters{ByMethod: map[string]money.Fen{}, RefundByMethod: map[string]money.Fen{}}
				r.counters[terminal] = c
			}
			if p := w.sale; p != nil {
				c.Sales++
				c.Amount += p.Total
				for m, f := range store.SaleByMethod(p) {
					c.ByMethod[m] += f
				}
				for _, l := range p.Lines {
					r.moved[l.SKU] -= l.Qty
				}
			}
			if p := w.refund; p != nil {
				c.Refunds++
				c.RefundAmount += p.Amount
				c.RefundByMethod[p.Method] += p.Amount
				if p.Restock {
					for _, l := range p.Lines {
						r.moved[l.SKU] += l.Qty
					}
				}
			}
		case (w.status == wire.AckRejected || w.status == wire.AckConflict) && !w.noPark:
			// A conflict parks its content, which the till kept, unless the key is parked
			// already.
			if _, ok := r.parked[key]; !ok {
				r.parked[key] = w.code
				if w.anyCode {
					r.parked[key] = biAnyCode
				}
			}
		}
	}
}

// check compares one ack with what was wanted.
func (r *biRun) check(t *testing.T, terminal string, a wire.Ack, w biWant) {
	t.Helper()
	key := wire.Key(terminal, w.seq)
	if a.Seq != w.seq || a.Key != key || a.Status != w.status {
		t.Errorf("ack %+v (result %+v): want seq %d key %s status %s %s", a, a.Result, w.seq, key, w.status, w.code)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch w.status {
	case wire.AckAccepted:
		if a.Code != "" || a.Result == nil || a.Result.BusinessDate != r.date || a.Result.Oversold {
			t.Errorf("accepted %s: code %q result %+v, want business date %s, not oversold", key, a.Code, a.Result, r.date)
			return
		}
		if a.Live != w.live {
			t.Errorf("accepted %s: live %v, want %v", key, a.Live, w.live)
		}
		if w.sale == nil && w.refund == nil {
			if a.Result.FlowNo != 0 {
				t.Errorf("accepted %s (no sale or refund) has flow number %d", key, a.Result.FlowNo)
			}
			return
		}
		if a.Result.FlowNo <= 0 {
			t.Errorf("accepted %s has no flow number: %+v", key, a.Result)
			return
		}
		if other, ok := r.flowKey[a.Result.FlowNo]; ok && other != key {
			t.Errorf("flow number %d given to %s and to %s", a.Result.FlowNo, other, key)
		}
		r.flowKey[a.Result.FlowNo] = key
		r.flows[key] = a.Result.FlowNo
	case wire.AckDuplicate:
		if a.Result == nil || a.Result.FlowNo != r.flows[key] || a.Result.BusinessDate != r.date {
			t.Errorf("duplicate %s: result %+v, want the original flow number %d of %s", key, a.Result, r.flows[key], r.date)
		}
	case wire.AckRejected:
		if w.anyCode && a.Code == "" || !w.anyCode && a.Code != w.code || a.Message == "" || a.Result != nil {
			t.Errorf("rejected %s: code %q message %q result %+v, want code %q", key, a.Code, a.Message, a.Result, w.code)
		}
	case wire.AckConflict:
		if a.Code != w.code || a.Result != nil || a.Message == "" {
			t.Errorf("conflict %s: code %q result %+v, want code %q", key, a.Code, a.Result, w.code)
		}
	case wire.AckOutOfOrder:
		if a.Expect != w.expect {
			t.Errorf("out_of_order %s: expect %d, want %d", key, a.Expect, w.expect)
		}
	}
}

// biSaleJSON is a valid sale payload (A1 × 2, 7.00 cash) that the payload cases corrupt.
const biSaleJSON = `{"sale_id":"bad","lines":[{"line":1,"sku":"A1","qty":2,"unit_price":"3.50","amount":"7.00"}],` +
	`"total":"7.00","payments":[{"method":"cash","amount":"7.00"}],"change":"0.00"}`

// biSaleWith returns biSaleJSON with each old substring replaced by its new one.
func biSaleWith(t testing.TB, oldNew ...string) string {
	t.Helper()
	s := biSaleJSON
	for i := 0; i < len(oldNew); i += 2 {
		if !strings.Contains(s, oldNew[i]) {
			t.Fatalf("sale payload has no %q", oldNew[i])
		}
		s = strings.Replace(s, oldNew[i], oldNew[i+1], 1)
	}
	return s
}

func TestBadInputEnvelopes(t *testing.T) {
	t.Parallel()
	srv := biRunServer(t)
	srv.openStore(t)
	r := biStartRun(t, srv)

	t.Run("envelope", r.envelopeCases)
	t.Run("payload", r.payloadCases)
	t.Run("batch", r.batchCases)
	t.Run("replay", r.replayCases)
	t.Run("unreadable", r.unreadableCases)
	t.Run("topic", r.topicCases)
	t.Run("kind not a string", r.kindTypeCase)
	t.Run("oversize event in a batch", r.oversizeEventCase)
	t.Run("one key twice in a batch", r.sameBatchConflictCase)
	t.Run("business date out of range", r.farTimeCase)

	r.checkNoStrayAcks(t)
	r.checkLedger(t)
}

// warmUp waits until the store answers: the server's subscription is made as it connects,
// so the first message could otherwise reach the broker before it.
func (r *biRun) warmUp(t *testing.T) {
	msg, _ := r.heartbeat(t, "T_PROBE", 1, 0)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r.bus.publish(t, "T_PROBE", msg)
		if d, ok := r.bus.next("T_PROBE", 250*time.Millisecond); ok {
			if d.err != nil || len(d.acks.Acks) != 1 || d.acks.Acks[0].Status != wire.AckAccepted &&
				d.acks.Acks[0].Status != wire.AckDuplicate {
				t.Fatalf("probe answered %s (%v)", d.raw, d.err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store does not answer")
		}
	}
	time.Sleep(300 * time.Millisecond)
	for {
		if _, ok := r.bus.next("T_PROBE", 0); !ok {
			return
		}
	}
}

// envelopeCases: broken envelopes with a readable seq, each answered with its wire code.
func (r *biRun) envelopeCases(t *testing.T) {
	const term = "T_ENV"
	seq := int64(0)
	next := func() int64 { seq++; return seq }
	good := func(name string) {
		s := next()
		msg, w := r.good(t, term, s)
		r.step(t, name, term, msg, w)
	}
	// bad seals a valid heartbeat at the next seq, then breaks it.
	bad := func(name, code string, edit map[string]any) {
		s := next()
		msg, _ := r.heartbeat(t, term, s, 1)
		r.step(t, name, term, biEdit(t, msg, edit), biRejected(s, code))
	}
	sale := func() (int64, []byte) {
		s := next()
		msg, _ := r.good(t, term, s)
		return s, msg
	}

	good("good 1")
	bad("bad hash", wire.CodeHash, map[string]any{"hash": `"` + strings.Repeat("a", 64) + `"`})
	{
		s, msg := sale()
		r.step(t, "payload tampered after sealing", term, biEdit(t, msg, map[string]any{
			"payload": string(biMarshal(t, biGoodSale("tampered", 1)))}), biRejected(s, wire.CodeHash))
	}
	{
		s, msg := sale()
		r.step(t, "business time moved after sealing", term, biEdit(t, msg, map[string]any{
			"at": string(biMarshal(t, r.at.Add(-24*time.Hour)))}), biRejected(s, wire.CodeHash))
	}
	good("good 2")
	bad("wrong version", wire.CodeVersion, map[string]any{"v": `2`})
	bad("unknown kind", wire.CodeKind, map[string]any{"kind": `"coupon"`})
	bad("missing hash", wire.CodeMissing, map[string]any{"hash": nil})
	bad("missing at", wire.CodeMissing, map[string]any{"at": nil})
	bad("missing payload", wire.CodeMissing, map[string]any{"payload": nil})
	bad("null payload", wire.CodeMissing, map[string]any{"payload": `null`})
	bad("missing v", wire.CodeMissing, map[string]any{"v": nil})
	bad("missing kind", wire.CodeMissing, map[string]any{"kind": nil})
	bad("missing key", wire.CodeMissing, map[string]any{"key": nil})
	bad("missing terminal", wire.CodeMissing, map[string]any{"terminal": nil})
	bad("missing store", wire.CodeMissing, map[string]any{"store": nil})
	good("good 3")
	bad("unknown envelope field", wire.CodeUnknownField, map[string]any{"discount": `"5.00"`})
	bad("key of another seq", wire.CodeKey, map[string]any{"key": `"T_ENV:999"`})
	bad("key of another terminal", wire.CodeKey, map[string]any{"key": fmt.Sprintf(`"T_X:%d"`, seq+1)})
	bad("business time without offset", wire.CodeType, map[string]any{"at": `"2026-01-02T10:00:00"`})
	bad("business time not a time", wire.CodeType, map[string]any{"at": `"yesterday"`})
	bad("payload an array", wire.CodeType, map[string]any{"payload": `[{"backlog":1}]`})
	bad("payload a string", wire.CodeType, map[string]any{"payload": `"{}"`})
	bad("offline a string", wire.CodeType, map[string]any{"offline": `"yes"`})
	bad("version a string", wire.CodeType, map[string]any{"v": `"1"`})
	good("good 4")
	bad("store id with a slash", wire.CodeID, map[string]any{"store": `"S/1"`})
	bad("terminal id with a space", wire.CodeID, map[string]any{"terminal": `"T ENV"`})
	bad("terminal id too long", wire.CodeID, map[string]any{"terminal": `"` + strings.Repeat("T", wire.MaxIDLen+1) + `"`})
	{
		s := next()
		env := wire.NewEnvelope(wire.KindSale, "S2", term, s, r.at, biMarshal(t, biGoodSale("other-store", 0)))
		// Sent live: a live verdict, which the waiting till undoes; nothing is parked.
		r.step(t, "sealed for another store", term, biMarshal(t, env), biLiveRejected(s, ingest.CodeStoreMismatch))
	}
	{
		s := next()
		env := wire.NewEnvelope(wire.KindSale, "s1", term, s, r.at, biMarshal(t, biGoodSale("lower-store", 0)))
		r.step(t, "store id in the wrong case", term, biMarshal(t, env), biLiveRejected(s, ingest.CodeStoreMismatch))
	}
	{
		// Whitespace is not content: a pretty-printed envelope keeps its hash.
		s := next()
		p := biGoodSale(fmt.Sprintf("%s-%d", term, s), 4)
		env := r.seal(wire.KindSale, term, s, biMarshal(t, p))
		pretty, err := json.MarshalIndent(env, "", "   ")
		if err != nil {
			t.Fatal(err)
		}
		r.step(t, "good pretty-printed", term, pretty, biWant{seq: s, status: wire.AckAccepted, sale: p})
	}
	{
		// <, > and & sent unescaped hash as encoding/json writes them (escaped).
		s := next()
		p := biGoodSale(fmt.Sprintf("%s-%d", term, s), 0)
		p.Lines[0].Name = "Tom & Jerry <3>"
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(p); err != nil {
			t.Fatal(err)
		}
		raw := bytes.TrimSpace(buf.Bytes())
		if !bytes.Contains(raw, []byte("<3>")) {
			t.Fatalf("payload escaped: %s", raw)
		}
		env := r.seal(wire.KindSale, term, s, raw)
		msg := []byte(fmt.Sprintf(`{"v":1,"kind":"sale","store":%q,"terminal":%q,"seq":%d,"key":%q,"hash":%q,"at":%s,"offline":true,"payload":%s}`,
			biStoreID, term, s, env.Key, env.Hash, biMarshal(t, r.at), raw))
		r.step(t, "good with unescaped html characters", term, msg, biWant{seq: s, status: wire.AckAccepted, sale: p})
	}
	r.step(t, "seq far ahead", term, biMarshal(t, r.seal(wire.KindHeartbeat, term, 1<<53, []byte(`{"backlog":0,"oldest_age_ms":0,"catalog_version":0}`))),
		biOutOfOrder(1<<53, seq+1))
	good("good 5")
}

// payloadCases: well-sealed envelopes whose payload breaks a money, quantity or payload rule.
func (r *biRun) payloadCases(t *testing.T) {
	const term = "T_PAY"
	seq := int64(0)
	next := func() int64 { seq++; return seq }
	good := func(name string) *wire.SalePayload {
		s := next()
		msg, w := r.good(t, term, s)
		r.step(t, name, term, msg, w)
		return w.sale
	}
	bad := func(name string, kind wire.Kind, payload, code string) {
		s := next()
		r.step(t, name, term, r.event(t, kind, term, s, payload), biRejected(s, code))
	}
	sale := func(name, code string, oldNew ...string) { bad(name, wire.KindSale, biSaleWith(t, oldNew...), code) }
	cashPay := `{"method":"cash","amount":"7.00"}`

	first := good("good 1") // B2 × 1 and C3 × 3, 20.25 card
	sale("sub-fen unit price", money.CodeSubFen, `"unit_price":"3.50"`, `"unit_price":"0.001"`)
	sale("sub-fen payment", money.CodeSubFen, cashPay, `{"method":"cash","amount":"7.001"}`)
	sale("sub-fen change", money.CodeSubFen, `"change":"0.00"`, `"change":"0.005"`)
	sale("total a JSON number", money.CodeSyntax, `"total":"7.00"`, `"total":7`)
	sale("unit price a JSON number", money.CodeSyntax, `"unit_price":"3.50"`, `"unit_price":3.5`)
	sale("total null", money.CodeSyntax, `"total":"7.00"`, `"total":null`)
	sale("amount with exponent", money.CodeSyntax, cashPay, `{"method":"cash","amount":"7e0"}`)
	sale("amount with plus sign", money.CodeSyntax, cashPay, `{"method":"cash","amount":"+7.00"}`)
	sale("amount empty", money.CodeEmpty, cashPay, `{"method":"cash","amount":""}`)
	sale("amount overflow", money.CodeOverflow, `"total":"7.00"`, `"total":"99999999999999999999.00"`)
	good("good 2")
	sale("negative quantity", wire.CodeQuantity, `"qty":2`, `"qty":-2`, `"amount":"7.00"}]`, `"amount":"-7.00"}]`)
	sale("zero quantity", wire.CodeQuantity, `"qty":2`, `"qty":0`)
	sale("quantity above the limit", wire.CodeQuantity, `"qty":2`, `"qty":1000001`)
	sale("quantity a string", wire.CodeType, `"qty":2`, `"qty":"2"`)
	sale("quantity a fraction", wire.CodeType, `"qty":2`, `"qty":1.5`)
	sale("line times quantity overflows", money.CodeOverflow, `"qty":2`, `"qty":1000000`,
		`"unit_price":"3.50"`, `"unit_price":"90000000000000.00"`)
	sale("unknown SKU", ingest.CodeUnknownSKU, `"sku":"A1"`, `"sku":"ZZ9"`)
	good("good 3")
	sale("total not the sum of the lines", wire.CodeAmount, `"total":"7.00"`, `"total":"8.00"`, cashPay, `{"method":"cash","amount":"8.00"}`)
	sale("line amount not quantity times price", wire.CodeAmount, `"amount":"7.00"}]`, `"amount":"6.00"}]`,
		`"total":"7.00"`, `"total":"6.00"`, cashPay, `{"method":"cash","amount":"6.00"}`)
	sale("payments less change not the total", wire.CodeAmount, cashPay, `{"method":"cash","amount":"10.00"}`,
		`"change":"0.00"`, `"change":"2.00"`)
	sale("change without cash", wire.CodeAmount, cashPay, `{"method":"card","amount":"10.00","reference":"R1"}`,
		`"change":"0.00"`, `"change":"3.00"`)
	sale("negative change", wire.CodeAmount, cashPay, `{"method":"cash","amount":"6.00"}`, `"change":"0.00"`, `"change":"-1.00"`)
	sale("card without reference", wire.CodePayload, cashPay, `{"method":"card","amount":"7.00"}`)
	sale("qr with an empty reference", wire.CodePayload, cashPay, `{"method":"qr","amount":"7.00","reference":""}`)
	sale("reference too long", wire.CodePayload, cashPay, `{"method":"card","amount":"7.00","reference":"`+strings.Repeat("r", wire.MaxTextLen+1)+`"}`)
	sale("unknown payment method", wire.CodeMethod, cashPay, `{"method":"bitcoin","amount":"7.00","reference":"x"}`)
	sale("negative payment", wire.CodeAmount, cashPay, `{"method":"cash","amount":"8.00"},{"method":"card","amount":"-1.00","reference":"R2"}`)
	sale("zero payment", wire.CodeAmount, cashPay, `{"method":"cash","amount":"7.00"},{"method":"qr","amount":"0.00","reference":"R3"}`)
	good("good 4")
	sale("unknown payload field", wire.CodeUnknownField, `"change":"0.00"`, `"change":"0.00","discount":"1.00"`)
	sale("unknown line field", wire.CodeUnknownField, `"line":1,`, `"line":1,"tax":"0.10",`)
	sale("missing sale id", wire.CodePayload, `"sale_id":"bad",`, ``)
	sale("sale id too long", wire.CodePayload, `"sale_id":"bad"`, `"sale_id":"`+strings.Repeat("s", wire.MaxTextLen+1)+`"`)
	sale("line number zero", wire.CodePayload, `"line":1,`, `"line":0,`)
	sale("line without sku", wire.CodePayload, `"sku":"A1",`, ``)
	sale("name too long", wire.CodePayload, `"sku":"A1",`, `"sku":"A1","name":"`+strings.Repeat("n", wire.MaxTextLen+1)+`",`)
	sale("no lines", wire.CodePayload, `{"line":1,"sku":"A1","qty":2,"unit_price":"3.50","amount":"7.00"}`, ``,
		`"total":"7.00"`, `"total":"0.00"`)
	sale("no payments", wire.CodePayload, cashPay, ``)
	{
		var lines []string
		for i := 1; i <= wire.MaxLines+1; i++ {
			lines = append(lines, fmt.Sprintf(`{"line":%d,"sku":"A1","qty":1,"unit_price":"0.00","amount":"0.00"}`, i))
		}
		sale("too many lines", wire.CodePayload, `{"line":1,"sku":"A1","qty":2,"unit_price":"3.50","amount":"7.00"}`,
			strings.Join(lines, ","), `"total":"7.00"`, `"total":"0.00"`)
	}
	good("good 5")
	bad("refund without lines", wire.KindRefund,
		`{"refund_id":"r1","sale_id":"T_PAY-1","sale_seq":1,"lines":[],"amount":"3.50","method":"cash","restock":true}`, wire.CodePayload)
	bad("refund of an unknown SKU", wire.KindRefund,
		`{"refund_id":"r2","sale_id":"T_PAY-1","sale_seq":1,"lines":[{"line":1,"sku":"ZZ9","qty":1,"amount":"3.50"}],"amount":"3.50","method":"cash","restock":true}`,
		ingest.CodeUnknownSKU)
	bad("refund amount not the sum of its lines", wire.KindRefund,
		`{"refund_id":"r3","sale_id":"T_PAY-1","sale_seq":1,"lines":[{"line":1,"sku":"A1","qty":1,"amount":"3.50"}],"amount":"4.00","method":"cash","restock":true}`,
		wire.CodeAmount)
	bad("refund by card without reference", wire.KindRefund,
		`{"refund_id":"r4","sale_id":"T_PAY-1","sale_seq":1,"lines":[{"line":1,"sku":"A1","qty":1,"amount":"3.50"}],"amount":"3.50","method":"card","restock":true}`,
		wire.CodePayload)
	bad("refund with sub-fen amount", wire.KindRefund,
		`{"refund_id":"r5","sale_id":"T_PAY-1","sale_seq":1,"lines":[{"line":1,"sku":"A1","qty":1,"amount":"3.499"}],"amount":"3.50","method":"cash","restock":true}`,
		money.CodeSubFen)
	bad("heartbeat with negative backlog", wire.KindHeartbeat, `{"backlog":-1,"oldest_age_ms":0,"catalog_version":1}`, wire.CodePayload)
	bad("heartbeat with unknown field", wire.KindHeartbeat, `{"backlog":1,"oldest_age_ms":0,"catalog_version":1,"cpu":0.5}`, wire.CodeUnknownField)
	bad("day close with an impossible date", wire.KindDayClose,
		`{"business_date":"2026-13-01","sale_count":0,"sale_amount":"0.00","refund_count":0,"refund_amount":"0.00","methods":[]}`, wire.CodePayload)
	bad("day close listing a method twice", wire.KindDayClose,
		`{"business_date":"2026-03-01","sale_count":0,"sale_amount":"0.00","refund_count":0,"refund_amount":"0.00","methods":[`+
			`{"method":"cash","sale_count":0,"sale_amount":"0.00","refund_count":0,"refund_amount":"0.00"},`+
			`{"method":"cash","sale_count":0,"sale_amount":"0.00","refund_count":0,"refund_amount":"0.00"}]}`, wire.CodeMethod)
	bad("day close with a negative amount", wire.KindDayClose,
		`{"business_date":"2026-03-01","sale_count":1,"sale_amount":"-1.00","refund_count":0,"refund_amount":"0.00","methods":[]}`, wire.CodeAmount)
	bad("scan of zero units", wire.KindScan, `{"sale_id":"s9","line":1,"sku":"A1","qty":0,"unit_price":"3.50"}`, wire.CodeQuantity)
	bad("scan of an unknown SKU", wire.KindScan, `{"sale_id":"s9","line":1,"sku":"ZZ9","qty":1,"unit_price":"3.50"}`, ingest.CodeUnknownSKU)
	bad("scan with sub-fen price", wire.KindScan, `{"sale_id":"s9","line":1,"sku":"A1","qty":1,"unit_price":"3.501"}`, money.CodeSubFen)
	{
		s := next()
		r.step(t, "good scan", term, r.event(t, wire.KindScan, term, s, `{"sale_id":"s9","line":1,"sku":"A1","qty":1,"unit_price":"3.50"}`),
			biAccepted(s))
	}
	{
		// A partial refund of good 1 (one of its first line), restocked.
		s := next()
		ln := first.Lines[0]
		p := &wire.RefundPayload{RefundID: "T_PAY-refund-1", SaleID: first.SaleID, SaleSeq: 1, Restock: true,
			Lines:  []wire.RefundLine{{Line: ln.Line, SKU: ln.SKU, Qty: 1, Amount: ln.UnitPrice}},
			Amount: ln.UnitPrice, Method: wire.MethodCash}
		r.step(t, "good refund", term, biMarshal(t, r.seal(wire.KindRefund, term, s, biMarshal(t, p))),
			biWant{seq: s, status: wire.AckAccepted, refund: p})
	}
	{
		// Live attempts: an invalid one is still refused with its code (a live verdict: the
		// waiting till undoes the step, and the store parks nothing); a valid one is accepted live.
		s := next()
		env := wire.NewEnvelope(wire.KindSale, biStoreID, term, s, r.at, []byte(biSaleWith(t, cashPay, `{"method":"card","amount":"7.00"}`)))
		r.step(t, "live card without reference", term, biMarshal(t, env), biLiveRejected(s, wire.CodePayload))
		s = next()
		p := biGoodSale(fmt.Sprintf("%s-%d", term, s), 3)
		env = wire.NewEnvelope(wire.KindSale, biStoreID, term, s, r.at, biMarshal(t, p))
		r.step(t, "good live sale", term, biMarshal(t, env), biWant{seq: s, status: wire.AckAccepted, sale: p, live: true})
	}
	good("good 6")
}

// batchCases: a bad event inside a batch is rejected alone; a batch that cannot be read as a
// whole is not answered.
func (r *biRun) batchCases(t *testing.T) {
	const term = "T_BATCH"
	g := func(seq int64) ([]byte, biWant) { return r.good(t, term, seq) }
	e1, w1 := g(1)
	e2, _ := g(2)
	e2 = biEdit(t, e2, map[string]any{"hash": `"` + strings.Repeat("0", 64) + `"`})
	e3, w3 := g(3)
	r.step(t, "bad middle event", term, biBatch(term, e1, e2, e3), w1, biRejected(2, wire.CodeHash), w3)

	e4, w4 := g(4)
	e5 := biMarshal(t, wire.NewEnvelope(wire.KindHeartbeat, biStoreID, "T_X", 5, r.at, []byte(`{"backlog":0,"oldest_age_ms":0,"catalog_version":0}`)))
	e6 := r.event(t, wire.KindSale, term, 6, biSaleWith(t, `"unit_price":"3.50"`, `"unit_price":"0.001"`))
	e7, w7 := g(7)
	r.step(t, "event of another terminal and sub-fen event", term, biBatch(term, e4, e5, e6, e7),
		w4, biRejected(5, wire.CodeMismatch), biRejected(6, money.CodeSubFen), w7)

	e8, w8 := g(8)
	r.step(t, "same event twice", term, biBatch(term, e8, e8), w8, biDuplicate(8))

	e9, w9 := g(9)
	r.step(t, "batch of another version", term, bytes.Replace(biBatch(term, e9), []byte(`"v":1,"kind":"batch"`), []byte(`"v":2,"kind":"batch"`), 1))
	r.step(t, "batch without events", term, biBatch(term))
	r.step(t, "batch with a bad store id", term, bytes.Replace(biBatch(term, e9), []byte(`"store":"S1","terminal":"T_BATCH","events"`),
		[]byte(`"store":"S 1","terminal":"T_BATCH","events"`), 1))
	r.step(t, "batch with an unknown field", term, bytes.Replace(biBatch(term, e9), []byte(`"events":[`), []byte(`"priority":1,"events":[`), 1))
	{
		events := make([][]byte, wire.MaxBatchEvents+1)
		for i := range events {
			events[i] = e9
		}
		r.step(t, "batch over the event limit", term, biBatch(term, events...))
	}
	r.step(t, "good 9 after the unreadable batches", term, e9, w9)

	e10, w10 := g(10)
	e11, w11 := g(11)
	zero := biMarshal(t, wire.NewEnvelope(wire.KindHeartbeat, biStoreID, term, 0, r.at, []byte(`{"backlog":0,"oldest_age_ms":0,"catalog_version":0}`)))
	r.step(t, "seq 0 inside a batch", term, biBatch(term, e10, zero, e11), w10, w11)

	e12, w12 := g(12)
	e13, w13 := g(13)
	e14, w14 := g(14)
	r.step(t, "gap inside a batch", term, biBatch(term, e12, e14), w12, biOutOfOrder(14, 13))
	r.step(t, "resend from the gap", term, biBatch(term, e13, e14), w13, w14)
}

// replayCases: the same key again, with the same and with other content, and seqs out of order.
func (r *biRun) replayCases(t *testing.T) {
	const term = "T_REPLAY"
	e1, w1 := r.good(t, term, 1)
	r.step(t, "good 1", term, e1, w1)
	r.step(t, "same content again", term, e1, biDuplicate(1))
	r.step(t, "same content sent live", term, biEdit(t, e1, map[string]any{"offline": nil}), biDuplicate(1))
	{
		other := r.seal(wire.KindSale, term, 1, biMarshal(t, biGoodSale("T_REPLAY-1-other", 1)))
		r.step(t, "other content", term, biMarshal(t, other), biConflict(1))
	}
	e2, w2 := r.good(t, term, 2)
	e3, w3 := r.good(t, term, 3)
	r.step(t, "seq 3 before seq 2", term, e3, biOutOfOrder(3, 2))
	r.step(t, "good 2", term, e2, w2)
	r.step(t, "good 3", term, e3, w3)
	e4, _ := r.heartbeat(t, term, 4, 1)
	e4 = biEdit(t, e4, map[string]any{"hash": `"` + strings.Repeat("f", 64) + `"`})
	r.step(t, "bad hash", term, e4, biRejected(4, wire.CodeHash))
	r.step(t, "bad hash again", term, e4, biWant{seq: 4, status: wire.AckRejected, code: wire.CodeHash, noPark: true})
	{
		fixed, _ := r.good(t, term, 4)
		r.step(t, "a valid event on the rejected key", term, fixed, biConflict(4))
	}
	e5, w5 := r.good(t, term, 5)
	r.step(t, "good 5", term, e5, w5)
	r.step(t, "replay of good 2", term, e2, biDuplicate(2))
	r.step(t, "replay of 2 and 3 in a batch", term, biBatch(term, e2, e3), biDuplicate(2), biDuplicate(3))
}

// unreadableCases: messages the store cannot tell the seq of are not answered, and the good
// event after them flows.
func (r *biRun) unreadableCases(t *testing.T) {
	const term = "T_NOACK"
	hb := `{"backlog":0,"oldest_age_ms":0,"catalog_version":0}`
	e1, w1 := r.good(t, term, 1)
	r.step(t, "not JSON", term, []byte("hello, store"))
	r.step(t, "empty message", term, []byte{})
	r.step(t, "truncated JSON", term, e1[:len(e1)/2])
	r.step(t, "JSON array", term, []byte(`[1,2,3]`))
	r.step(t, "JSON null", term, []byte(`null`))
	r.step(t, "empty object", term, []byte(`{}`))
	r.step(t, "seq 0", term, biMarshal(t, wire.NewEnvelope(wire.KindHeartbeat, biStoreID, term, 0, r.at, []byte(hb))))
	r.step(t, "negative seq", term, biMarshal(t, wire.NewEnvelope(wire.KindHeartbeat, biStoreID, term, -1, r.at, []byte(hb))))
	r.step(t, "missing seq", term, biEdit(t, e1, map[string]any{"seq": nil}))
	r.step(t, "seq a string", term, biEdit(t, e1, map[string]any{"seq": `"1"`}))
	r.step(t, "seq a fraction", term, biEdit(t, e1, map[string]any{"seq": `1.5`}))
	r.step(t, "trailing data", term, append(append([]byte{}, e1...), []byte(` {"seq":1}`)...))
	r.step(t, "message over the size limit", term, append(append([]byte{}, e1...), bytes.Repeat([]byte(" "), wire.MaxMessageBytes)...))
	r.step(t, "good 1", term, e1, w1)
	e2, w2 := r.good(t, term, 2)
	r.step(t, "binary garbage", term, []byte{0xff, 0xfe, 0x00, 0x01})
	r.step(t, "good 2", term, e2, w2)
}

// topicCases: a terminal may speak only for itself.
func (r *biRun) topicCases(t *testing.T) {
	const term, other = "T_TOPIC", "T_OTHER"
	e1, w1 := r.good(t, term, 1)
	r.step(t, "good 1", term, e1, w1)
	spoof, _ := r.good(t, other, 2)
	r.step(t, "event of another terminal", term, spoof,
		biWant{seq: 2, status: wire.AckRejected, code: ingest.CodeTerminalMismatch, noPark: true})
	s2, _ := r.good(t, other, 2)
	s3, _ := r.good(t, other, 3)
	r.step(t, "batch of another terminal", term, biBatch(other, s2, s3),
		biWant{seq: 2, status: wire.AckRejected, code: ingest.CodeTerminalMismatch, noPark: true},
		biWant{seq: 3, status: wire.AckRejected, code: ingest.CodeTerminalMismatch, noPark: true})
	e2, w2 := r.good(t, term, 2)
	r.step(t, "good 2 after the spoofs", term, e2, w2)
	// The spoofs left no trace on the other terminal: its seq 1 is new, and the store then
	// expects its seq 2 (a terminal the ledger holds nothing of may start at any seq, the
	// gap recorded: docs/store-server.md "Backup and restore"; a known one may not jump).
	o1, wo1 := r.good(t, other, 1)
	r.step(t, "other terminal good 1", other, o1, wo1)
	r.step(t, "other terminal seq 3 next", other, s3, biOutOfOrder(3, 2))
}

// kindTypeCase: an envelope whose kind is a JSON number has a readable seq: it is a bad
// event like any other (wire_type), not an unreadable message.
func (r *biRun) kindTypeCase(t *testing.T) {
	const term = "T_KIND"
	e1, w1 := r.heartbeat(t, term, 1, 0)
	r.step(t, "good 1", term, e1, w1)
	e2, _ := r.heartbeat(t, term, 2, 0)
	r.step(t, "kind a number", term, biEdit(t, e2, map[string]any{"kind": `7`}), biRejected(2, wire.CodeType))
	e3, w3 := r.heartbeat(t, term, 3, 0)
	r.step(t, "good 3", term, e3, w3)
}

// oversizeEventCase: an event over wire.MaxEventBytes inside a batch of normal size is
// rejected alone (wire_oversize) and the batch's other events flow.
func (r *biRun) oversizeEventCase(t *testing.T) {
	const term = "T_BIG"
	e1, w1 := r.heartbeat(t, term, 1, 0)
	e2, _ := r.heartbeat(t, term, 2, 0)
	big := append([]byte("{"+strings.Repeat(" ", wire.MaxEventBytes)), e2[1:]...)
	if len(big) <= wire.MaxEventBytes {
		t.Fatalf("oversize event of %d bytes", len(big))
	}
	e3, w3 := r.heartbeat(t, term, 3, 0)
	r.step(t, "batch with an oversize event", term, biBatch(term, e1, big, e3), w1, biRejected(2, wire.CodeOversize), w3)
}

// sameBatchConflictCase: one key with two contents in one batch is a conflict for the second
// (invariant 2), as it is when the two arrive in separate messages.
func (r *biRun) sameBatchConflictCase(t *testing.T) {
	const term = "T_DUPB"
	a, wa := r.heartbeat(t, term, 1, 1)
	b, _ := r.heartbeat(t, term, 1, 2)
	// The second content, refused in the group that brings the first, is answered, not
	// parked; alone, once the first is in the ledger, it is parked.
	inGroup := biConflict(1)
	inGroup.noPark = true
	r.step(t, "two contents for one key", term, biBatch(term, a, b), wa, inGroup)
	r.step(t, "the second content alone", term, b, biConflict(1))
	e2, w2 := r.heartbeat(t, term, 2, 0)
	r.step(t, "good 2", term, e2, w2)

	// Once the first content is in the ledger: the other content and a resend of the
	// first in one batch. The other is a conflict (parked already above); the resend is a
	// duplicate of what the ledger holds, answered as such, not as a conflict: a till
	// told its accepted event conflicts would park an event the store has.
	again := biConflict(1)
	again.noPark = true
	r.step(t, "the other content, then the first again", term, biBatch(term, b, a), again, biDuplicate(1))
}

// farTimeCase: a sale whose business time is valid RFC 3339 but whose business date in the
// store's zone has five digits (9999-12-31T23:00-10:00 is 10000-01-01 in Shanghai). It must
// be answered with a final rejection like any bad event, and must not cost the terminal its
// lane or the store its Redis gate.
func (r *biRun) farTimeCase(t *testing.T) {
	const term = "T_TIME"
	e1, w1 := r.heartbeat(t, term, 1, 0)
	r.step(t, "good 1", term, e1, w1)
	far := time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("HST", -10*3600))
	env := wire.NewEnvelope(wire.KindSale, biStoreID, term, 2, far, biMarshal(t, biGoodSale("far", 0)))
	env.Offline = true
	r.step(t, "sale in year 10000 store time", term, biMarshal(t, env), biWant{seq: 2, status: wire.AckRejected, anyCode: true})
	e3, w3 := r.heartbeat(t, term, 3, 0)
	r.step(t, "good 3", term, e3, w3)
}

// checkNoStrayAcks: nothing was answered that no step expected.
func (r *biRun) checkNoStrayAcks(t *testing.T) {
	time.Sleep(300 * time.Millisecond)
	r.bus.mu.Lock()
	terms := slices.Sorted(maps.Keys(r.bus.in))
	r.bus.mu.Unlock()
	for _, term := range terms {
		for {
			d, ok := r.bus.next(term, 0)
			if !ok {
				break
			}
			t.Errorf("%s: unexpected down message %s", term, d.raw)
		}
	}
}

// checkLedger: exactly the good sales and refunds are in the ledger and in Redis, stock moved
// by exactly them, and every recorded rejection is parked with its code.
func (r *biRun) checkLedger(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ctx := r.srv.manager(), context.Background()
	totals := must[client.TotalsAnswer](t, "totals")(c.Totals(ctx, r.date))
	var whole client.Counters
	for _, c := range r.counters {
		whole.Add(*c)
	}
	if whole.Sales == 0 || !totals.Store.Equal(whole) {
		t.Errorf("totals of the store %+v, want %+v", totals.Store, whole)
	}
	got := map[string]client.TerminalTotals{}
	for _, tt := range totals.Terminals {
		got[tt.Terminal] = tt
	}
	for _, term := range slices.Sorted(maps.Keys(r.counters)) {
		want := *r.counters[term]
		tt, ok := got[term]
		if !ok {
			t.Errorf("totals: terminal %s missing, want %+v", term, want)
			continue
		}
		if !tt.Ledger.Equal(want) {
			t.Errorf("totals %s: ledger %+v, want %+v", term, tt.Ledger, want)
		}
		if tt.Redis == nil || tt.RedisDiff || !tt.Redis.Equal(want) {
			t.Errorf("totals %s: redis %+v (differs %v), want %+v", term, tt.Redis, tt.RedisDiff, want)
		}
	}
	for term, tt := range got {
		if _, ok := r.counters[term]; !ok {
			t.Errorf("totals: terminal %s has figures but no good sale: %+v", term, tt.Ledger)
		}
	}

	rows := r.srv.stock(t)
	for sku, open := range biOpening {
		if want := open + r.moved[sku]; rows[sku].Ledger != want {
			t.Errorf("stock %s: ledger %d, want %d (opening %d, moved %d)", sku, rows[sku].Ledger, want, open, r.moved[sku])
		}
	}
	if len(rows) != len(biOpening) {
		t.Errorf("stock has %d SKUs, want %d: %+v", len(rows), len(biOpening), rows)
	}

	parked := must[client.ParkedAnswer](t, "parked")(c.Parked(ctx, false))
	gotParked := map[string]string{}
	for _, p := range parked.Parked {
		gotParked[wire.Key(p.Terminal, p.Seq)] = p.Code
	}
	for _, key := range slices.Sorted(maps.Keys(r.parked)) {
		want := r.parked[key]
		if code, ok := gotParked[key]; !ok || code != want && (want != biAnyCode || code == "") {
			t.Errorf("parked %s: code %q (parked %v), want %q", key, code, ok, want)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(gotParked)) {
		if _, ok := r.parked[key]; !ok {
			t.Errorf("parked %s (%s) was not expected", key, gotParked[key])
		}
	}

	// The manager resolves the first: it leaves the open list, and stays in all=1.
	first := parked.Parked[0]
	resolved := must[client.ResolveParkedAnswer](t, "resolve")(c.ResolveParked(ctx, client.ResolveParkedRequest{
		Terminal: first.Terminal, Seq: first.Seq, Note: "voided with the customer"}))
	if !resolved.Applied || !resolved.Parked.Resolved || resolved.Parked.Resolution != "voided with the customer" ||
		resolved.Parked.BusinessDate == "" {
		t.Errorf("resolving %s: %+v", wire.Key(first.Terminal, first.Seq), resolved)
	}
	r.srv.problem(t, "no note", "POST", "/v1/parked/resolve", biToken, "application/json",
		[]byte(fmt.Sprintf(`{"terminal":%q,"seq":%d,"note":" "}`, first.Terminal, first.Seq)), http.StatusBadRequest,
		ledger.CodeParkedResolutionRequired)
	r.srv.problem(t, "no such parked event", "POST", "/v1/parked/resolve", biToken, "application/json",
		[]byte(`{"terminal":"T404","seq":1,"note":"x"}`), http.StatusNotFound, ledger.CodeParkedNotFound)
	open := must[client.ParkedAnswer](t, "open parked")(c.Parked(ctx, false))
	all := must[client.ParkedAnswer](t, "all parked")(c.Parked(ctx, true))
	if len(open.Parked) != len(parked.Parked)-1 || len(all.Parked) != len(parked.Parked) {
		t.Errorf("after one resolution: %d open and %d in all, of %d", len(open.Parked), len(all.Parked),
			len(parked.Parked))
	}

	overs := must[client.OversellsAnswer](t, "oversells")(c.Oversells(ctx, "", false))
	if len(overs.Oversells) != 0 {
		t.Errorf("oversells: %+v, want none", overs.Oversells)
	}
	refunds := must[client.RefundExceptionsAnswer](t, "refund exceptions")(c.RefundExceptions(ctx, "", false))
	if len(refunds.RefundExceptions) != 0 {
		t.Errorf("refund exceptions: %+v, want none (every refund sent is covered by its sale)", refunds.RefundExceptions)
	}

	mode := must[client.ModeAnswer](t, "mode")(c.Mode(ctx))
	if mode.Mode != client.ModeRedis || mode.Stats.GateErrors != 0 || mode.Stats.CommitError != 0 {
		t.Errorf("mode %q stats %+v: want redis without gate or commit errors", mode.Mode, mode.Stats)
	}
	t.Logf("ingest stats: %+v; %d parked, %d flow numbers", mode.Stats, len(gotParked), len(r.flowKey))
}
