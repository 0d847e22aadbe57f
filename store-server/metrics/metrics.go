// Package metrics exposes the store-server's state in the Prometheus text format: ingest's
// counters and gate mode, read when scraped; how long gate calls, ledger commits and acks
// take (ingest.Observer); each terminal's presence, last reported backlog and clock against
// the store's; how far the store's hq-sync uploader has got; when the listeners' TLS
// certificates expire; and the Go runtime's and the process's own figures.
package metrics

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/posgate/posgate/internal/disk"
	"github.com/posgate/posgate/store-server/client"
	"github.com/posgate/posgate/store-server/ingest"
	"github.com/posgate/posgate/store-server/ledger"
	"github.com/posgate/posgate/store-server/presence"
	"github.com/posgate/posgate/store-server/uploadstate"
)

// Metrics is the store-server's registry. Its methods GateCall, Commit and Acked make it
// an ingest.Observer.
type Metrics struct {
	reg *prometheus.Registry

	gate, commit, ack         prometheus.Histogram
	gateEvents, commitRecords prometheus.Histogram
}

// latencyBuckets run from 0.5 ms to 5 s: an ack is due within tens of milliseconds, and a
// gate call over the breaker's 2 s counts as a failure.
var latencyBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}

// sizeBuckets count events per gate call and records per commit.
var sizeBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}

// New returns a registry with the timing histograms and the Go and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "posgate", Subsystem: "store",
			Name: name, Help: help, Buckets: buckets})
	}
	m.gate = hist("gate_call_seconds", "Time of one Redis script call deciding a group of events.", latencyBuckets)
	m.commit = hist("ledger_commit_seconds", "Time of one group commit to the ledger, fsync included.", latencyBuckets)
	m.ack = hist("ack_seconds", "Time from an up message's arrival to its acks handed to the broker.", latencyBuckets)
	m.gateEvents = hist("gate_call_events", "Events decided by one gate call.", sizeBuckets)
	m.commitRecords = hist("ledger_commit_records", "Records written by one ledger commit.", sizeBuckets)
	m.reg.MustRegister(m.gate, m.commit, m.ack, m.gateEvents, m.commitRecords,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// GateCall observes one gate call.
func (m *Metrics) GateCall(d time.Duration, events int) {
	m.gate.Observe(d.Seconds())
	m.gateEvents.Observe(float64(events))
}

// Commit observes one ledger commit.
func (m *Metrics) Commit(d time.Duration, records int) {
	m.commit.Observe(d.Seconds())
	m.commitRecords.Observe(float64(records))
}

// Acked observes one up message answered.
func (m *Metrics) Acked(d time.Duration) { m.ack.Observe(d.Seconds()) }

// Follow registers what is read when scraped: ingest's counters and mode, and per terminal
// its presence (board may be nil) and the backlog its last heartbeat reported.
func (m *Metrics) Follow(in *ingest.Ingest, led *ledger.Ledger, board *presence.Board, log *slog.Logger) {
	m.reg.MustRegister(&scraped{in: in, led: led, board: board, log: log})
}

// FollowUpload registers what is read of the store's hq-sync uploader when scraped, from
// its state at statePath beside the store's ledger: whether one has run, the rows HQ has not
// acknowledged, when it last acknowledged a batch, the failed sends of the pending batch and
// the days too large to declare.
func (m *Metrics) FollowUpload(statePath string, led *ledger.Ledger, log *slog.Logger) {
	m.reg.MustRegister(&uploadScraped{state: statePath, led: led, log: log})
}

// Register adds a collector of the store's own (the book of refusals) to /metrics.
func (m *Metrics) Register(c prometheus.Collector) { m.reg.MustRegister(c) }

// FollowCert registers the expiry of the TLS certificate a listener ("mqtt", "api") is
// serving, read when scraped: notAfter gives the certificate in service, after a look at
// its files (certfile.Pair.NotAfter), so that a renewal that did not take shows.
func (m *Metrics) FollowCert(listener string, notAfter func() time.Time) {
	m.reg.MustRegister(&certScraped{
		desc: prometheus.NewDesc(prometheus.BuildFQName("posgate", "store", "tls_cert_expiry_timestamp_seconds"),
			"When the TLS certificate the listener serves (its leaf) expires.", nil,
			prometheus.Labels{"listener": listener}),
		notAfter: notAfter,
	})
}

// certScraped reads a listener's certificate at scrape time.
type certScraped struct {
	desc     *prometheus.Desc
	notAfter func() time.Time
}

func (c *certScraped) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *certScraped) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.notAfter().Unix()))
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// modes are the gate modes, each a series of posgate_store_gate_mode.
var modes = []client.Mode{client.ModeStarting, client.ModeRedis, client.ModeRebuilding, client.ModeDegraded}

// counters are ingest's counters, each a Prometheus counter.
var counters = []struct {
	name, help string
	get        func(client.Stats) int64
}{
	{"messages_total", "Up messages taken from the broker.", func(s client.Stats) int64 { return s.Messages }},
	{"bad_messages_total", "Up messages that could not be read at all (no ack possible).", func(s client.Stats) int64 { return s.Bad }},
	{"events_total", "Events received (batches count each event).", func(s client.Stats) int64 { return s.Events }},
	{"accepted_total", "Events accepted.", func(s client.Stats) int64 { return s.Accepted }},
	{"replays_total", "Events answered from the ledger as duplicates.", func(s client.Stats) int64 { return s.Replays }},
	{"rejected_total", "Events rejected as bad input (parked).", func(s client.Stats) int64 { return s.Rejected }},
	{"refused_live_total", "Live events refused (rate limit, stock, a live event's bad input); the terminal may sell them offline.", func(s client.Stats) int64 { return s.Refused }},
	{"out_of_order_total", "Events answered out_of_order.", func(s client.Stats) int64 { return s.OutOfOrder }},
	{"price_mismatch_total", "Live scans and sales refused price_mismatch: a unit price that is not the store's catalog's.", func(s client.Stats) int64 { return s.PriceMismatch }},
	{"resends_total", "Requests to a till to send again the events the ledger lacks (catch-up).", func(s client.Stats) int64 { return s.Resends }},
	{"replayed_total", "Events tills sent again on the store's request and the ledger booked with the store's first answer.", func(s client.Stats) int64 { return s.Replayed }},
	{"held_behind_replays_total", "New events sent back to their till to wait until the replays of their group reach Redis.", func(s client.Stats) int64 { return s.HeldBehindReplays }},
	{"seq_gaps_total", "Gaps in a till's seq order taken (its first event after a restore from a backup, or in a ledger without its events, skipping events the ledger lost).", func(s client.Stats) int64 { return s.SeqGaps }},
	{"groups_total", "Groups decided and committed.", func(s client.Stats) int64 { return s.Groups }},
	{"rebuilds_total", "Rebuilds of the Redis projection from the ledger.", func(s client.Stats) int64 { return s.Rebuilds }},
	{"gate_errors_total", "Failed or slow gate calls.", func(s client.Stats) int64 { return s.GateErrors }},
	{"commit_errors_total", "Failed ledger commits (nothing acked; the terminals resend).", func(s client.Stats) int64 { return s.CommitError }},
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName("posgate", "store", name), help, labels, nil)
}

var (
	modeDesc    = desc("gate_mode", "1 for the gate's current mode (redis, degraded: ledger only, rebuilding, starting).", "mode")
	onlineDesc  = desc("terminal_online", "1 if the terminal's last status message said online, 0 if offline (its will).", "terminal")
	backlogDesc = desc("terminal_backlog_events", "Events the terminal held that the store had not acknowledged, at its last backlog report (an agent with reports off: its last heartbeat).", "terminal")
	oldestDesc  = desc("terminal_backlog_oldest_seconds", "Age of the terminal's oldest unacknowledged event: at its last backlog report (or heartbeat), plus the time since while it had a backlog.", "terminal")
	seenDesc    = desc("terminal_last_event_timestamp_seconds", "When the store received the terminal's last event.", "terminal")
	skewDesc    = desc("terminal_clock_skew_seconds", "The terminal's clock minus the store's (positive: ahead), from the messages it sent as it stamped them in the last 5 minutes (absent when none, or while it reads behind over less than --clock-behind-confirm); its sales take their business date from it.", "terminal")
	clockOff    = desc("terminal_clock_off", "1 if the terminal's clock is further from the store's than --clock-skew-warn (absent when the store heard no message to measure it by in the last 5 minutes).", "terminal")
	droppedDesc = desc("status_messages_dropped_total", "Status and backlog messages dropped as wrong (another store's topic, undecodable, naming another terminal).")
	ledgerBytes = desc("ledger_file_bytes", "Size of the ledger's files (database, write-ahead log and its index).")
	diskFree    = desc("ledger_disk_free_bytes", "Room left on the ledger's file system; when it is full nothing is acknowledged.")
	diskTotal   = desc("ledger_disk_total_bytes", "Size of the ledger's file system.")
	driftDesc   = desc("projection_drift_total", "Times Redis was found not to hold the ledger's projection (keys it dropped), each followed by a rebuild, by reason: marker_missing, epoch_mismatch, stock_missing, counters_missing, flow_missing (the scripts' marker check), audit_stock, audit_counters (the drift audit).", "reason")
	openDesc    = desc("open_exceptions", "Exceptions the ledger flagged that no manager has resolved yet: oversell (an offline sale took stock below zero), refund (a refund its sales do not cover), parked (an event refused for good that the till kept), price (an offline sale charged another price than the catalog's), flow (a replayed sale or refund whose flow number the store had given again).", "kind")
	counterDesc = func() map[string]*prometheus.Desc {
		d := map[string]*prometheus.Desc{}
		for _, c := range counters {
			d[c.name] = desc(c.name, c.help)
		}
		return d
	}()
)

var (
	uploaderDesc = desc("hq_uploader_found", "1 once an hq-sync uploader has run with the store's upload state.")
	hqBacklog    = desc("hq_backlog_rows", "Ledger rows headquarters has not acknowledged.")
	hqLastAck    = desc("hq_last_ack_timestamp_seconds", "When headquarters last acknowledged a batch.")
	hqAttempts   = desc("hq_pending_batch_failed_sends", "Failed sends of the batch waiting for headquarters.")
	hqTooLarge   = desc("hq_days_too_large_to_declare", "Business days left undeclared to headquarters: their declaration would take more than 1,000 parts.")
	hqInParts    = desc("hq_days_declaring_in_parts", "Business days whose declaration to headquarters is on its way in parts.")
)

// uploadScraped reads the uploader's state at scrape time.
type uploadScraped struct {
	state string
	led   *ledger.Ledger
	log   *slog.Logger
}

func (u *uploadScraped) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{uploaderDesc, hqBacklog, hqLastAck, hqAttempts, hqTooLarge, hqInParts} {
		ch <- d
	}
}

func (u *uploadScraped) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := uploadstate.ReadStatusOf(ctx, u.state, u.led)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ch <- prometheus.MustNewConstMetric(uploaderDesc, prometheus.GaugeValue, 0)
		return
	case err != nil:
		u.log.Warn("metrics: upload state", "err", err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(uploaderDesc, 1)
	gauge(hqBacklog, float64(st.Backlog))
	if !st.LastSentAt.IsZero() {
		gauge(hqLastAck, float64(st.LastSentAt.UnixMilli())/1000)
	}
	gauge(hqAttempts, float64(st.Attempts))
	gauge(hqTooLarge, float64(len(st.TooLarge)))
	gauge(hqInParts, float64(len(st.InParts)))
}

// scraped collects what is read at scrape time.
type scraped struct {
	in    *ingest.Ingest
	led   *ledger.Ledger
	board *presence.Board
	log   *slog.Logger
}

func (s *scraped) Describe(ch chan<- *prometheus.Desc) {
	ch <- modeDesc
	ch <- driftDesc
	ch <- onlineDesc
	ch <- backlogDesc
	ch <- oldestDesc
	ch <- seenDesc
	ch <- skewDesc
	ch <- clockOff
	ch <- droppedDesc
	ch <- ledgerBytes
	ch <- diskFree
	ch <- diskTotal
	ch <- openDesc
	for _, d := range counterDesc {
		ch <- d
	}
}

func (s *scraped) Collect(ch chan<- prometheus.Metric) {
	st := s.in.Stats()
	for _, c := range counters {
		ch <- prometheus.MustNewConstMetric(counterDesc[c.name], prometheus.CounterValue, float64(c.get(st)))
	}
	for _, r := range ingest.DriftReasons {
		ch <- prometheus.MustNewConstMetric(driftDesc, prometheus.CounterValue, float64(st.DriftReasons[r]), r)
	}
	mode := s.in.Mode()
	for _, m := range modes {
		v := 0.0
		if m == mode {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(modeDesc, prometheus.GaugeValue, v, string(m))
	}
	if s.board != nil {
		ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(s.board.Dropped()))
		for t, p := range s.board.All() {
			v := 0.0
			if p.Online {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(onlineDesc, prometheus.GaugeValue, v, t)
		}
		// Only the clocks the store has a reading of in the last 5 minutes: a till gone
		// quiet has no series (Prometheus marks them stale) rather than its last figure
		// standing. A till that reads behind over too short a time to tell from messages
		// held on their way (presence.Clock.Unconfirmed) is not off, and has no figure yet.
		for t, c := range s.board.Clocks() {
			off := 0.0
			if c.Off {
				off = 1
			}
			if !c.Unconfirmed {
				ch <- prometheus.MustNewConstMetric(skewDesc, prometheus.GaugeValue, c.Skew.Seconds(), t)
			}
			ch <- prometheus.MustNewConstMetric(clockOff, prometheus.GaugeValue, off, t)
		}
	}
	ch <- prometheus.MustNewConstMetric(ledgerBytes, prometheus.GaugeValue, float64(s.led.FileBytes()))
	if sp, err := disk.Of(s.led.Dir()); err == nil {
		ch <- prometheus.MustNewConstMetric(diskFree, prometheus.GaugeValue, float64(sp.Free))
		ch <- prometheus.MustNewConstMetric(diskTotal, prometheus.GaugeValue, float64(sp.Total))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if over, refunds, parked, err := s.led.OpenExceptions(ctx); err != nil {
		s.log.Warn("metrics: open exceptions from the ledger", "err", err)
	} else {
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(over), "oversell")
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(refunds), "refund")
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(parked), "parked")
	}
	if prices, err := s.led.OpenPriceExceptions(ctx); err != nil {
		s.log.Warn("metrics: open price exceptions", "err", err)
	} else {
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(prices), "price")
	}
	if flows, err := s.led.OpenFlowExceptions(ctx); err != nil {
		s.log.Warn("metrics: open flow exceptions", "err", err)
	} else {
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(flows), "flow")
	}
	terms, err := s.led.Terminals(ctx)
	if err != nil {
		// The per-terminal series are left out of this scrape; the rest (commit errors,
		// the gate mode) matter most exactly when the ledger cannot be read.
		s.log.Warn("metrics: terminals from the ledger", "err", err)
		return
	}
	var reports map[string]presence.Backlog
	if s.board != nil {
		reports = s.board.Backlogs()
	}
	now := time.Now()
	backlog := func(t string, events int64, oldest time.Duration) {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(events), t)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, oldest.Seconds(), t)
	}
	for _, t := range terms {
		ch <- prometheus.MustNewConstMetric(seenDesc, prometheus.GaugeValue,
			float64(t.LastReceived.UnixMilli())/1000, t.Terminal)
		r, ok := reports[t.Terminal]
		delete(reports, t.Terminal)
		if hb := t.Heartbeat; ok && (hb == nil || r.Supersedes(hb.Seq, hb.At)) {
			// The report goes beside the events; a heartbeat goes behind those it counts, so
			// they have all arrived by the time it has.
			backlog(t.Terminal, r.Events, r.OldestAge(now))
		} else if hb != nil {
			// An agent with reports off (--backlog-every 0) reports only in heartbeats;
			// aged as a report is.
			old := presence.Backlog{Events: hb.Backlog, OldestMs: hb.OldestAgeMs, Heard: hb.Received}
			backlog(t.Terminal, hb.Backlog, old.OldestAge(now))
		}
	}
	for t, r := range reports { // nothing in the ledger yet
		backlog(t, r.Events, r.OldestAge(now))
	}
}
