package upload

// The uploader's Prometheus metrics (Config.Metrics), so that HQ's operations can alert on
// a store whose upload is stuck from the store's side: what it sent and how its sends failed
// since the process started, counted as they happen; and how far HQ has the store's rows and
// days, read from the ledger and the state when scraped (right after a restart too).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/store-server/ledger"
)

// Reasons a send of a batch failed: the reason label of posgate_upload_batch_failures_total.
const (
	// FailHQDown: no answer from HQ (refused or broken connection, timeout), or one that says
	// try again later (5xx, 408, 429). The batch goes again with backoff.
	FailHQDown = "hq_down"
	// FailHQRefused: HQ refused the batch (a 4xx other than 408 and 429). The batch stays
	// pending and every later row waits (see CodeRefused).
	FailHQRefused = "hq_refused"
	// FailOther: any other answer (200 without a receipt for the batch, a redirect).
	FailOther = "other"
	// FailResent: HQ refused the batch in a way the uploader mends itself by sending its
	// rows again under a new id: HQ holds the batch id with other content (the state
	// restored from a backup). Nothing waits for an operator.
	FailResent = "resent"
)

// metrics are the counters the uploader keeps as it goes.
type metrics struct {
	rows, batches prometheus.Counter
	failures      *prometheus.CounterVec
	stepErrors    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, u *Uploader) (*metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "posgate", Subsystem: "upload", Name: name, Help: help})
	}
	m := &metrics{
		rows: counter("rows_sent_total", "Ledger rows in batches HQ acknowledged (a row sent again after a "+
			"restart counts again)."),
		batches: counter("batches_sent_total", "Batches HQ acknowledged."),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "posgate", Subsystem: "upload",
			Name: "batch_failures_total", Help: "Failed sends of a batch, by reason: hq_down (no answer, 5xx, 408, " +
				"429), hq_refused (another 4xx: the batch stays pending and later rows wait), resent (refused for a batch " +
				"id HQ holds with other content: its rows go again under a new id), other."},
			[]string{"reason"}),
		stepErrors: counter("step_errors_total", "Upload steps that failed before or after a send: the ledger or "+
			"the state could not be read or written, or the ledger no longer holds the last row HQ acknowledged."),
	}
	for _, r := range []string{FailHQDown, FailHQRefused, FailResent, FailOther} {
		m.failures.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.rows, m.batches, m.failures, m.stepErrors, &scraped{u: u}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// sent counts a batch HQ acknowledged.
func (m *metrics) sent(b *batch) {
	if m != nil {
		m.batches.Inc()
		m.rows.Add(float64(b.rows))
	}
}

// failed counts a failed send.
func (m *metrics) failed(err error) {
	if m != nil {
		m.failures.WithLabelValues(failReason(err)).Inc()
	}
}

// resent counts a failed send whose rows go again under a new id (FailResent).
func (m *metrics) resent() {
	if m != nil {
		m.failures.WithLabelValues(FailResent).Inc()
	}
}

// stepFailed counts a failed step.
func (m *metrics) stepFailed() {
	if m != nil {
		m.stepErrors.Inc()
	}
}

// failReason is the reason label of a failed send's error.
func failReason(err error) string {
	var se *sendError
	switch {
	case !errors.As(err, &se):
		return FailHQDown // no answer at all
	case se.badReceipt:
		return FailOther
	case se.status >= 500, se.status == http.StatusRequestTimeout, se.status == http.StatusTooManyRequests:
		return FailHQDown
	case se.status >= 400:
		return FailHQRefused
	}
	return FailOther
}

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName("posgate", "upload", name), help, nil, nil)
}

var (
	backlogDesc  = desc("backlog_rows", "Ledger rows HQ has not acknowledged (while ledger_behind_hq, those after the last row of a sent batch the ledger still holds).")
	oldestDesc   = desc("oldest_unsent_age_seconds", "Age of the oldest ledger row HQ has not acknowledged, by the time of its event (the till's clock; 0 when there is none).")
	lastSentDesc = desc("last_success_timestamp_seconds", "When HQ last acknowledged a batch (absent until it has).")
	pendingDesc  = desc("pending_batch_failed_sends", "Failed sends of the batch waiting for HQ (0 when none waits).")
	dayDesc      = desc("last_declared_day_timestamp_seconds", "Start (00:00, the store's time zone) of the latest business day HQ acknowledged the store's declaration of (absent until one).")
	behindDesc   = desc("ledger_behind_hq", "1 while the ledger does not hold the last row HQ acknowledged (restored from an older backup, or another ledger): nothing is sent.")
	xWaitingDesc = desc("exception_changes_waiting", "Changes of the ledger's exceptions (oversells, refund exceptions, parked events, seq gaps, their resolutions) HQ has not acknowledged.")
	movesDesc    = desc("stock_moves_waiting", "The ledger's stock adjustments HQ has not acknowledged (they wait while HQ has no stock moves route).")
	flowsDesc    = desc("flow_exception_changes_waiting", "Changes of the ledger's flow exceptions HQ has not acknowledged (they wait while HQ has no flow exceptions route).")
)

// scraped reads the ledger and the state when scraped. One that cannot be read fails the
// scrape, so that an alert on the backlog cannot resolve itself while the ledger is away.
type scraped struct{ u *Uploader }

func (c *scraped) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{backlogDesc, oldestDesc, lastSentDesc, pendingDesc, dayDesc, behindDesc,
		xWaitingDesc, movesDesc, flowsDesc} {
		ch <- d
	}
}

func (c *scraped) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := c.u
	u.ledgerMu.RLock()
	defer u.ledgerMu.RUnlock()
	fail := func(err error) {
		u.log.Warn("metrics: read the upload's progress", "err", err)
		ch <- prometheus.NewInvalidMetric(backlogDesc, err)
	}
	st, after, err := u.status(ctx)
	if err != nil {
		fail(err)
		return
	}
	var oldest time.Duration
	err = u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
		rows, err := r.OutboxAfter(ctx, after, 1) // the oldest of the backlog
		if len(rows) == 1 {
			oldest = max(u.cfg.Now().Sub(rows[0].Row.At), 0)
		}
		return err
	})
	if err != nil {
		fail(err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(backlogDesc, float64(st.Backlog))
	gauge(oldestDesc, oldest.Seconds())
	if !st.LastSentAt.IsZero() {
		gauge(lastSentDesc, float64(st.LastSentAt.UnixMilli())/1000)
	}
	gauge(pendingDesc, float64(st.Attempts))
	var last string
	for d := range st.Declared {
		last = max(last, d)
	}
	if day, err := time.ParseInLocation(wire.BusinessDate, last, u.cfg.Location); err == nil {
		gauge(dayDesc, float64(day.Unix()))
	}
	behind := 0.0
	if st.LedgerBehindHQ {
		behind = 1
	}
	gauge(behindDesc, behind)
	gauge(xWaitingDesc, float64(st.ExceptionsWaiting))
	gauge(movesDesc, float64(st.MovesWaiting))
	gauge(flowsDesc, float64(st.FlowsWaiting))
}
