//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/sqlitedb"
	"github.com/posgate/posgate/internal/stack"
	"github.com/posgate/posgate/internal/storesim"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/api"
	"github.com/posgate/posgate/terminal-agent/client"
	"github.com/posgate/posgate/terminal-agent/outbox"
	"github.com/posgate/posgate/terminal-agent/uplink"
)

// Backlog drain settings: the agent's defaults (--window, --batch), used by the raw
// reference too.
const (
	drainEvents = 100_000
	drainWindow = 2000
	drainBatch  = 250
	basketLines = 5 // scans per sale in the filled backlog; each sale adds a sale event
)

var benchCatalog = wire.Catalog{V: 1, Store: "S1", Version: 1, Items: []wire.CatalogItem{
	{SKU: "MILK", Barcode: "6901234567890", Name: "Milk 1L", Price: 1250},
	{SKU: "BREAD", Name: "Bread", Price: 899},
	{SKU: "EGGS", Name: "Eggs x10", Price: 1590},
}}

// drainRuns alternates, across -count runs, whether the agent or the raw reference goes first.
var drainRuns atomic.Int64

// BenchmarkBacklogDrain measures how fast an agent that was offline delivers a backlog of
// 100,000 events through real mosquitto to the store (storesim), and, in the same run, the
// raw reference: a bare paho client publishing the same events, pre-encoded in batches of
// the same size with the same window of unacked events, and waiting for every ack.
//
// The agent runs with the real wiring (Main) while mosquitto is stopped; its outbox is filled
// through package outbox (offline sales: 5 scans and a cash payment each); then mosquitto is
// started again. The drain is timed from the agent's reconnection (the time in the online
// presence it publishes) until storesim has accepted every event and the agent's status shows
// a backlog of 0. The reconnection delay itself (paho's retry interval) is reported apart as
// reconnect-ms.
//
// Metrics: agent-ev/s, raw-ev/s, agent-x-raw (their ratio); ns/op is the agent's drain time.
func BenchmarkBacklogDrain(b *testing.B) {
	ctx := context.Background()
	s := stack.Run(b, stack.Options{MQTT: true})
	r := benchStartStore(b, s)
	defer func() { r.Close() }()
	source := benchSourceEvents(b, drainEvents) // the raw reference's events, same mix as the agent's

	var agentDur, rawDur, reconnect time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		n := drainRuns.Add(1)
		raw := fmt.Sprintf("R%d", n)
		term := fmt.Sprintf("T%d", n)
		msgs := benchEncodeBatches(b, source, raw)
		runRaw := func() { rawDur += benchRawDrain(b, s.MQTTURL(), raw, msgs) }
		if n%2 == 0 {
			runRaw()
		}

		// Offline: the broker is down while the agent runs and its outbox fills.
		r.Close()
		if err := s.Mosquitto.Stop(); err != nil {
			b.Fatal(err)
		}
		// The outbox is filled before the agent starts (an outbox has one process at a
		// time), and the agent starts offline with that backlog.
		dataDir := b.TempDir()
		benchFill(b, filepath.Join(dataDir, "outbox.db"), term, drainEvents)
		addr, stop := benchStartAgent(b, s.MQTTURL(), dataDir, term)
		for benchStatus(b, addr).OfflineSince == nil {
			time.Sleep(5 * time.Millisecond)
		}
		if st := benchStatus(b, addr); st.Online || st.Backlog != drainEvents {
			b.Fatalf("before the drain: online %v, backlog %d, want offline with %d", st.Online, st.Backlog, drainEvents)
		}

		// Online again: the store comes back first, then the agent reconnects on its own.
		b.StartTimer()
		if err := s.Mosquitto.Start(ctx); err != nil {
			b.Fatal(err)
		}
		up := time.Now()
		r = benchStartStore(b, s)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := r.WaitAccepted(wctx, term, drainEvents)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		for {
			st := benchStatus(b, addr)
			if st.Online && st.Backlog == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		done := time.Now()
		b.StopTimer()
		online := benchOnlineAt(b, s.MQTTURL(), term)
		if online.Before(up) || online.After(done) {
			b.Fatalf("agent online at %v, outside broker start %v .. drained %v", online, up, done)
		}
		agentDur += done.Sub(online)
		reconnect += online.Sub(up)
		if st := benchStatus(b, addr); st.Parked != 0 || r.AcceptedCount(term) != drainEvents {
			b.Fatalf("after the drain: %d parked, %d accepted", st.Parked, r.AcceptedCount(term))
		}
		stop()

		if n%2 != 0 {
			runRaw()
		}
	}
	b.StopTimer()
	agentRate := float64(drainEvents*b.N) / agentDur.Seconds()
	rawRate := float64(drainEvents*b.N) / rawDur.Seconds()
	b.ReportMetric(float64(agentDur.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(agentRate, "agent-ev/s")
	b.ReportMetric(rawRate, "raw-ev/s")
	b.ReportMetric(agentRate/rawRate, "agent-x-raw")
	b.ReportMetric(float64(reconnect.Milliseconds())/float64(b.N), "reconnect-ms")
}

// benchStartStore starts the store test double on the stack's broker with the test catalog.
func benchStartStore(tb testing.TB, s *stack.Stack) *storesim.Responder {
	tb.Helper()
	r, err := storesim.Start(context.Background(), storesim.Options{BrokerURL: s.MQTTURL(), Store: "S1"})
	if err != nil {
		tb.Fatal(err)
	}
	if err := r.PublishCatalog(benchCatalog); err != nil {
		tb.Fatal(err)
	}
	return r
}

// benchToken is the API token of the agents the benchmarks run behind httptest.
const benchToken = "bench-token-0123456789abcdefghijklmnop"

// benchAPI is an agent's API: its address and token.
type benchAPI struct{ addr, token string }

// benchStartAgent runs the agent in-process with the real wiring and its default sync settings,
// and returns its API and a function that stops it.
func benchStartAgent(tb testing.TB, broker, dataDir, terminal string) (benchAPI, func()) {
	tb.Helper()
	m := NewMain()
	if err := m.ParseFlags([]string{"--store", "S1", "--terminal", terminal, "--broker", broker,
		"--data-dir", dataDir, "--listen", "127.0.0.1:0", "--heartbeat", "0", "--log-level", "warn"}); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := m.Run(ctx)
		if ctx.Err() == nil {
			tb.Errorf("agent %s stopped by itself: %v", terminal, err)
		}
		done <- err
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)
	select {
	case addr := <-m.Addr:
		tok, err := client.ReadToken(filepath.Join(dataDir, TokenFile))
		if err != nil {
			tb.Fatal(err)
		}
		return benchAPI{addr, tok}, stop
	case err := <-done:
		tb.Fatalf("agent stopped: %v", err)
	}
	return benchAPI{}, nil
}

// benchFill queues n offline events in the outbox at path through package outbox, as the
// POS app's requests would: sales of basketLines scans paid in cash (a scan event per line
// and a sale event per sale), 1,000 events per transaction to keep the fill short.
func benchFill(tb testing.TB, path, terminal string, n int) {
	tb.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: terminal})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	if _, err := s.ReplaceCatalog(ctx, benchCatalog); err != nil {
		tb.Fatal(err)
	}
	items := benchCatalog.Items[:3]
	mode := outbox.Mode{Disconnected: true, OfflineSince: time.Now()}
	for left := n; left > 0; {
		chunk := min(left, 1000)
		_, _, _, err := s.Do(ctx, "", "", mode, func(t *outbox.Tx) (string, error) {
			for k := chunk; k > 0; {
				id, err := t.OpenSale()
				if err != nil {
					return "", err
				}
				lines := min(basketLines, k-1)
				var total money.Fen
				for j := range max(lines, 1) {
					it := items[(k+j)%len(items)]
					if _, err := t.AddLine(id, it.SKU, "", 1); err != nil {
						return "", err
					}
					total += it.Price
				}
				if lines == 0 { // one event left: a scan on a sale left open
					k--
					continue
				}
				if err := t.Pay(id, wire.MethodCash, total, ""); err != nil {
					return "", err
				}
				k -= lines + 1
			}
			return "", nil
		})
		if err != nil {
			tb.Fatal(err)
		}
		left -= chunk
	}
	b, err := s.Backlog(ctx)
	if err != nil || b.Count != int64(n) {
		tb.Fatalf("filled backlog %d (%v), want %d", b.Count, err, n)
	}
}

// sourceEvents caches benchSourceEvents across -count runs: filling takes longer than the raw
// drain it feeds.
var sourceEvents struct {
	sync.Mutex
	evs []outbox.Event
}

// benchSourceEvents fills a scratch outbox as benchFill does and returns its events, so that the
// raw reference publishes the same mix and sizes of payloads as the agent.
func benchSourceEvents(tb testing.TB, n int) []outbox.Event {
	tb.Helper()
	sourceEvents.Lock()
	defer sourceEvents.Unlock()
	if len(sourceEvents.evs) == n {
		return sourceEvents.evs
	}
	ctx := context.Background()
	path := filepath.Join(tb.TempDir(), "source.db")
	benchFill(tb, path, "SRC", n)
	s, err := outbox.Open(ctx, path, outbox.Config{Store: "S1", Terminal: "SRC"})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	evs, err := s.Pending(ctx, 0, n)
	if err != nil || len(evs) != n {
		tb.Fatalf("source events: %d (%v), want %d", len(evs), err, n)
	}
	sourceEvents.evs = evs
	return evs
}

// benchEncodeBatches seals the events as terminal's (seq, key and hash of that terminal) and
// encodes them as batch messages of drainBatch events.
func benchEncodeBatches(tb testing.TB, evs []outbox.Event, terminal string) [][]byte {
	tb.Helper()
	var msgs [][]byte
	for i := 0; i < len(evs); i += drainBatch {
		part := evs[i:min(i+drainBatch, len(evs))]
		raw := make([]json.RawMessage, len(part))
		for j, e := range part {
			env := wire.NewEnvelope(e.Kind, "S1", terminal, e.Seq, e.At, e.Payload)
			env.Offline = true
			b, err := json.Marshal(env)
			if err != nil {
				tb.Fatal(err)
			}
			raw[j] = b
		}
		m, err := wire.MarshalBatch("S1", terminal, raw)
		if err != nil {
			tb.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// benchRawDrain publishes msgs (batches of drainBatch events of terminal) with a bare paho client,
// keeping at most drainWindow events unacked, and returns the time until every event is
// acked accepted by the store.
func benchRawDrain(tb testing.TB, broker, terminal string, msgs [][]byte) time.Duration {
	tb.Helper()
	var acked atomic.Int64
	var bad atomic.Int64
	progress := make(chan struct{}, 1)
	client := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(broker).SetClientID("bench-raw-" + terminal).
		SetCleanSession(true).SetOrderMatters(true).SetAutoReconnect(false).SetWriteTimeout(5 * time.Second))
	if tok := client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("raw client connect: %v", tok.Error())
	}
	defer client.Disconnect(100)
	onAcks := func(_ mqtt.Client, m mqtt.Message) {
		a, err := wire.DecodeAcks(m.Payload())
		if err != nil {
			bad.Add(1)
			return
		}
		for _, ack := range a.Acks {
			if ack.Status == wire.AckAccepted {
				acked.Add(1)
			} else {
				bad.Add(1)
			}
		}
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	if tok := client.Subscribe(wire.DownTopic("S1", terminal), 1, onAcks); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("raw client subscribe: %v", tok.Error())
	}
	total := int64(len(msgs)-1)*drainBatch + int64(benchBatchLen(tb, msgs[len(msgs)-1]))
	topic := wire.UpTopic("S1", terminal)
	deadline := time.After(2 * time.Minute)
	wait := func() {
		select {
		case <-progress:
		case <-deadline:
			tb.Fatalf("raw drain: %d of %d events acked, %d bad", acked.Load(), total, bad.Load())
		}
	}
	t0 := time.Now()
	var sent int64
	for _, m := range msgs {
		for sent-acked.Load() >= drainWindow {
			wait()
		}
		client.Publish(topic, 1, false, m) // like the agent: only the store's ack counts
		sent += drainBatch
	}
	for acked.Load() < total {
		wait()
	}
	d := time.Since(t0)
	if bad.Load() != 0 {
		tb.Fatalf("raw drain: %d acks not accepted", bad.Load())
	}
	return d
}

func benchBatchLen(tb testing.TB, m []byte) int {
	var bt wire.Batch
	if err := json.Unmarshal(m, &bt); err != nil {
		tb.Fatal(err)
	}
	return len(bt.Events)
}

// benchOnlineAt returns the time in the retained online presence the agent published when it
// (re)connected.
func benchOnlineAt(tb testing.TB, broker, terminal string) time.Time {
	tb.Helper()
	got := make(chan wire.Presence, 1)
	client := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(broker).SetClientID("bench-presence-" + terminal))
	if tok := client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("presence client connect: %v", tok.Error())
	}
	defer client.Disconnect(100)
	client.Subscribe(wire.StatusTopic("S1", terminal), 1, func(_ mqtt.Client, m mqtt.Message) {
		var p wire.Presence
		if json.Unmarshal(m.Payload(), &p) == nil && p.Online {
			select {
			case got <- p:
			default:
			}
		}
	})
	select {
	case p := <-got:
		return p.At
	case <-time.After(10 * time.Second):
		tb.Fatal("no online presence from the agent")
	}
	return time.Time{}
}

// BenchmarkScanHTTP measures a scan as the POS app sees it, POST /v1/sales/{id}/lines through
// the real API handler over loopback HTTP with an Idempotency-Key, next to a raw single-row
// SQLite commit (WAL, synchronous=FULL, through sqlitedb) in the same run, interleaved.
//
//   - offline: the uplink cannot reach its broker; the answer follows the outbox commit.
//   - live: the agent is online (real mosquitto, storesim) and waits for the store's verdict
//     before answering, so the latency includes the MQTT round trip.
//
// It reports the p50 and p99 of each and their ratios; ns/op is the mean scan latency. It
// runs max(b.N, 2000) rounds.
func BenchmarkScanHTTP(b *testing.B) {
	b.Run("offline", func(b *testing.B) {
		dir := b.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		store, err := outbox.Open(ctx, filepath.Join(dir, "outbox.db"), outbox.Config{Store: "S1", Terminal: "T1"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.ReplaceCatalog(ctx, benchCatalog); err != nil {
			b.Fatal(err)
		}
		up := uplink.New(uplink.Config{BrokerURL: "tcp://127.0.0.1:1", Store: "S1", Terminal: "T1"}, store)
		done := make(chan struct{})
		go func() { defer close(done); up.Run(ctx) }()
		srv := httptest.NewServer(api.New(store, up, nil, api.Access{Token: benchToken}))
		b.Cleanup(func() { srv.Close(); cancel(); <-done; store.Close() })
		for up.Status().OfflineSince.IsZero() {
			time.Sleep(5 * time.Millisecond)
		}
		benchScanLatency(b, benchAPI{strings.TrimPrefix(srv.URL, "http://"), benchToken}, dir, false)
	})
	b.Run("live", func(b *testing.B) {
		s := stack.Run(b, stack.Options{MQTT: true})
		r := benchStartStore(b, s)
		b.Cleanup(func() { r.Close() })
		dir := b.TempDir()
		addr, _ := benchStartAgent(b, s.MQTTURL(), dir, "T1")
		benchWaitCatalog(b, addr)
		for !benchStatus(b, addr).Online {
			time.Sleep(5 * time.Millisecond)
		}
		benchScanLatency(b, addr, dir, true)
	})
}

// benchWaitCatalog waits until the agent has the catalog.
func benchWaitCatalog(tb testing.TB, addr benchAPI) {
	tb.Helper()
	for range 400 {
		if benchStatus(tb, addr).CatalogVersion > 0 {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	tb.Fatal("the agent never received the catalog")
}

// benchScanLatency times scans against the agent's API at addr against raw commits on a database
// in dir. live checks that each scan got the store's verdict (not decided offline).
func benchScanLatency(b *testing.B, agent benchAPI, dir string, live bool) {
	b.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, "raw.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if _, err := db.W.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, payload BLOB NOT NULL, created_ms INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"sale_id":"T1-0123456789abcdef","line":1,"sku":"MILK","qty":1,"unit_price":1250}`)
	raw := func() error {
		tx, err := db.W.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (payload, created_ms) VALUES (?, ?)`, payload, time.Now().UnixMilli()); err != nil {
			return err
		}
		return tx.Commit()
	}

	hc := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + agent.addr
	n := 0
	post := func(path, body string) ([]byte, error) {
		n++
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), n))
		req.Header.Set("Authorization", "Bearer "+agent.token)
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		if err == nil && res.StatusCode >= 300 {
			err = fmt.Errorf("POST %s: %d %s", path, res.StatusCode, out)
		}
		return out, err
	}
	var sale string
	lines := 0
	newSale := func() {
		out, err := post("/v1/sales", "")
		if err != nil {
			b.Fatal(err)
		}
		var a client.SaleAnswer
		if err := json.Unmarshal(out, &a); err != nil {
			b.Fatal(err)
		}
		sale, lines = a.Sale.ID, 0
	}
	scan := func() error {
		out, err := post("/v1/sales/"+sale+"/lines", `{"sku":"MILK","qty":1}`)
		if err != nil {
			return err
		}
		lines++
		if live {
			var a client.SaleAnswer
			if err := json.Unmarshal(out, &a); err != nil || a.Event == nil || a.Event.Offline {
				return fmt.Errorf("live scan decided offline: %s", out)
			}
		}
		return nil
	}
	newSale()
	rounds := max(b.N, 2000)
	scans := make([]time.Duration, 0, rounds)
	refs := make([]time.Duration, 0, rounds)
	timeOne := func(f func() error, into *[]time.Duration) {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(t0))
	}
	for range 20 { // warm up
		if err := scan(); err != nil {
			b.Fatal(err)
		}
		if err := raw(); err != nil {
			b.Fatal(err)
		}
	}
	newSale()
	b.ResetTimer()
	for i := range rounds {
		if i%2 == 0 {
			timeOne(scan, &scans)
			timeOne(raw, &refs)
		} else {
			timeOne(raw, &refs)
			timeOne(scan, &scans)
		}
		if lines == 20 { // the next customer's sale; not timed
			newSale()
		}
	}
	b.StopTimer()
	slices.Sort(scans)
	slices.Sort(refs)
	var sum time.Duration
	for _, d := range scans {
		sum += d
	}
	sp50, sp99 := benchPercentile(scans, 50), benchPercentile(scans, 99)
	rp50, rp99 := benchPercentile(refs, 50), benchPercentile(refs, 99)
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(scans)), "ns/op")
	b.ReportMetric(float64(sp50.Nanoseconds()), "scan-p50-ns")
	b.ReportMetric(float64(sp99.Nanoseconds()), "scan-p99-ns")
	b.ReportMetric(float64(rp50.Nanoseconds()), "raw-p50-ns")
	b.ReportMetric(float64(rp99.Nanoseconds()), "raw-p99-ns")
	b.ReportMetric(float64(sp50)/float64(rp50), "p50-x-raw")
	b.ReportMetric(float64(sp99)/float64(rp99), "p99-x-raw")
}

// benchPercentile returns the p-th percentile (nearest rank) of sorted durations.
func benchPercentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i, 1)-1]
}

// benchStatus returns the agent's GET /v1/status answer.
func benchStatus(tb testing.TB, agent benchAPI) client.StatusAnswer {
	tb.Helper()
	st, err := (&client.Client{BaseURL: "http://" + agent.addr, Token: agent.token}).Status(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
