package upload

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/store-server/ledger"
)

// ledgerHoldsBatch reports whether the ledger's outbox rows from the batch's first id to its
// last are the batch's rows, every one in order. The last alone matched when terminals sent
// again, after a restore, events the batch held, and a new row at one of its ids was skipped.
func (u *Uploader) ledgerHoldsBatch(ctx context.Context, b *batch) (bool, error) {
	// Only the rows' keys are compared: decoding the rows' content, and reading it back from
	// the ledger, cost more than building the batch did.
	var sent struct {
		Rows []struct {
			Terminal string `json:"terminal"`
			Seq      int64  `json:"seq"`
			Hash     string `json:"hash"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b.body, &sent); err != nil {
		return false, fmt.Errorf("batch %s body: %w", b.id, err)
	}
	var keys []ledger.OutboxKey
	if err := u.ledger.ViewHQ(ctx, func(r *ledger.HQReader) error {
		var err error
		keys, err = r.OutboxKeysAfter(ctx, b.firstID-1, len(sent.Rows))
		return err
	}); err != nil {
		return false, err
	}
	if len(keys) != len(sent.Rows) || len(keys) == 0 || keys[0].ID != b.firstID || keys[len(keys)-1].ID != b.lastID {
		return false, nil
	}
	for i, k := range keys {
		if r := &sent.Rows[i]; k.Terminal != r.Terminal || k.Seq != r.Seq || k.Hash != r.Hash {
			return false, nil
		}
	}
	return true, nil
}

// markSent records HQ's receipt: the batch is sent, the watermark moves to its last row,
// its rows count for their dates, its declarations are acknowledged, and so are its
// exceptions' changes.
func (u *Uploader) markSent(ctx context.Context, b *batch, rc *hqwire.Receipt, receipt []byte) error {
	// The watermark moves to the batch's last row only while the ledger still holds that row:
	// a ledger restored from a backup under a waiting batch has other rows at its ids (sold
	// after the restore), and a watermark past them skipped them for good. The batch's rows
	// happened all the same, and HQ has them now.
	advance := b.rows > 0
	if advance {
		if err := u.followLedger(ctx); err != nil { // HQ may have been away for days
			return fmt.Errorf("mark batch %s sent: %w", b.id, err)
		}
		held, err := u.ledgerHoldsBatch(ctx, b)
		if err != nil {
			return fmt.Errorf("mark batch %s sent: %w", b.id, err)
		}
		if !held {
			u.log.Warn("HQ took a batch whose rows the ledger no longer holds (restored from a backup?); "+
				"the rows now at its ids go next", "batch", b.id, "last_id", b.lastID, "last_key", b.lastKey)
			advance = false
		}
	}
	tx, err := u.state.W.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mark batch %s sent: %w", b.id, err)
	}
	defer tx.Rollback()
	now := u.stamp()
	exec := func(query string, args ...any) {
		if err == nil {
			_, err = tx.ExecContext(ctx, query, args...)
		}
	}
	exec(`UPDATE batches SET state = 'sent', sent_at = ?, receipt = ?, body = NULL WHERE batch_id = ? AND state = 'pending'`,
		now, string(receipt), b.id)
	exec(`INSERT INTO kv (k, v) VALUES ('batches_sent', '1') ON CONFLICT (k) DO UPDATE SET v = CAST(v AS INTEGER) + 1`)
	// Nothing reads a sent batch but for the time of the last one (Status): the state keeps
	// a week of them, for an operator to look back, and no more.
	exec(`DELETE FROM batches WHERE state = 'sent' AND sent_at < ?`,
		u.cfg.Now().Add(-KeepSentBatches).UTC().Format(time.RFC3339Nano))
	if advance {
		exec(`INSERT INTO kv (k, v) VALUES ('sent_through', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`,
			strconv.FormatInt(b.lastID, 10))
		exec(`INSERT INTO kv (k, v) VALUES ('sent_key', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, b.lastKey)
	}
	if b.xThrough > 0 {
		exec(`INSERT INTO kv (k, v) VALUES ('exceptions_through', ?)
			ON CONFLICT (k) DO UPDATE SET v = excluded.v WHERE CAST(excluded.v AS INTEGER) > CAST(v AS INTEGER)`,
			strconv.FormatInt(b.xThrough, 10))
	}
	for date, n := range b.dates {
		if !advance { // rows of another ledger: the day's count is of this one's
			break
		}
		exec(`INSERT INTO days (business_date, sent_rows) VALUES (?, ?)
			ON CONFLICT (business_date) DO UPDATE SET sent_rows = sent_rows + excluded.sent_rows`, date, n)
	}
	for date := range b.days { // a day without trade has no row yet
		exec(`INSERT INTO days (business_date, sent_rows) VALUES (?, 0) ON CONFLICT (business_date) DO NOTHING`, date)
	}
	for date, rev := range b.days {
		if held, ok := rc.DaysHeld[date]; ok && held >= rev {
			// HQ holds the day at this revision or a later one, declared by a state this one
			// replaced: the day stays due, and its next declaration goes above HQ's.
			u.log.Warn("HQ holds a later declaration of the day than this upload state knows; declaring it again",
				"batch", b.id, "business_date", date, "revision", rev, "hq_revision", held)
			exec(`UPDATE days SET revision = ? WHERE business_date = ?`, held, date)
			continue
		}
		exec(`UPDATE days SET revision = ?, declared_rows = sent_rows, declared_at = ? WHERE business_date = ?`,
			rev, now, date)
	}
	for date, p := range b.parts {
		switch held, heldOK := rc.DaysHeld[date]; {
		case heldOK && held >= p.Revision: // as for a whole declaration, and its parts go
			u.log.Warn("HQ holds a later declaration of the day than this upload state knows; declaring it again",
				"batch", b.id, "business_date", date, "revision", p.Revision, "hq_revision", held)
			exec(`UPDATE days SET revision = ? WHERE business_date = ?`, held, date)
			exec(`DELETE FROM day_parts WHERE business_date = ?`, date)
		case rc.PartsDropped[date] != 0:
			// HQ did not keep the part: it does not hold the parts before it (a state that
			// started over, or HQ's database restored). The day stays due and is declared
			// again from part 1, from the ledger as it is then.
			u.log.Warn("HQ did not keep a part of the day's declaration; declaring the day again from its first part",
				"batch", b.id, "business_date", date, "revision", p.Revision, "part", p.Part, "parts", p.Parts)
			exec(`DELETE FROM day_parts WHERE business_date = ?`, date)
		default:
			exec(`DELETE FROM day_parts WHERE business_date = ? AND part = ?`, date, p.Part)
			if p.Part == p.Parts { // the last part: the revision stands at HQ
				exec(`UPDATE days SET revision = ?, declared_rows = ?, declared_at = ? WHERE business_date = ?`,
					p.Revision, p.Covered, now, date)
			}
		}
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("mark batch %s sent: %w", b.id, err)
	}
	return nil
}

// deliver sends a recorded batch until HQ acknowledges it. In once mode a refusal ends it
// with an error; otherwise a refusal is retried every RefusedRetry.
func (u *Uploader) deliver(ctx context.Context, b *batch, once bool) error {
	log := u.log.With("batch", b.id)
	for attempt := 0; ; attempt++ {
		receipt, raw, err := u.post(ctx, b)
		if err == nil {
			if u.afterSend != nil {
				if err := u.afterSend(b.id); err != nil {
					return err
				}
			}
			if err := u.markSent(ctx, b, &receipt, raw); err != nil {
				return err
			}
			u.met.sent(b)
			if attempt > 0 || b.attempts > 0 {
				log.Info("HQ acknowledged the batch after retries", "attempts", b.attempts+attempt+1)
			}
			log.Debug("batch sent", "rows", b.rows, "new", receipt.New, "duplicate", receipt.Duplicate,
				"days", len(b.days), "exceptions", receipt.Exceptions)
			u.prog.sent(u, ctx, b)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var wait time.Duration
		var se *sendError
		errors.As(err, &se)
		if _, uerr := u.state.W.ExecContext(ctx, `UPDATE batches SET attempts = attempts + 1, last_error = ?
			WHERE batch_id = ?`, err.Error(), b.id); uerr != nil && ctx.Err() == nil {
			log.Warn("cannot count the failed attempt", "err", uerr)
		}
		// HQ may stay away for days, and the ledger be restored meanwhile by moving a file
		// into its place: Status and the metrics read the file the path names (ledger_behind_hq
		// says so while the batch waits), not the one open before.
		if ferr := u.followLedger(ctx); ferr != nil && ctx.Err() == nil {
			log.Warn("cannot open the ledger's new file", "err", ferr)
		}
		if se != nil && se.refused && se.status == http.StatusUnprocessableEntity && se.code == hqwire.CodeBatchIDReused {
			log.Warn("HQ holds this batch id with other content: this upload state is not the only one of its "+
				"batch series (restored from a backup?); starting a new series, the batch's rows go again", "answer", se.body)
			u.met.resent()
			return u.newSeries(ctx, b)
		}
		u.met.failed(err)
		if se != nil && se.refused {
			// Never skip the batch: its rows would be missing at HQ and the day could not be
			// declared. It stays pending and the rows after it wait for an operator.
			log.Error("HQ REFUSED THE BATCH; it stays pending and every later row waits until the cause is fixed",
				"status", se.status, "answer", se.body, "attempts", b.attempts+attempt+1)
			// The side routes carry nothing of the batch's: the store's stock moves and flow
			// exceptions go on reaching HQ while the batch waits for an operator.
			if once {
				u.sendSides(ctx, true)
				return perr.Wrap(err, perr.Refused, CodeRefused, "HQ refused batch %s (status %d)", b.id, se.status)
			}
			if !u.sideWait(ctx, u.cfg.RefusedRetry/2+jitter(u.cfg.RefusedRetry/2)) {
				return ctx.Err()
			}
			continue
		} else {
			wait = u.backoff(attempt)
			if se != nil && se.retryAfter > wait {
				wait = min(se.retryAfter, max(u.cfg.RetryCap, wait))
			}
			lvl := slog.LevelWarn
			if se != nil && se.badReceipt {
				lvl = slog.LevelError
			}
			log.Log(ctx, lvl, "send failed; will retry", "err", err, "attempt", attempt+1, "wait", wait)
		}
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// newSeries forgets pending batch b, whose id HQ holds with other content, and starts a
// new batch series: a state restored from a backup (or copied from another store's) goes
// on numbering batches HQ already took from the state it was copied from, and every one of
// them would be refused, the rows behind it held back for ever. The batch's rows are after
// the watermark still and go again under new ids; HQ keeps one of each row, and answers a
// declaration older than the one it holds with the revision it holds.
func (u *Uploader) newSeries(ctx context.Context, b *batch) error {
	return u.dropBatch(ctx, b, `UPDATE kv SET v = CASE k WHEN 'batch_series' THEN ? ELSE '0' END
		WHERE k IN ('batch_series', 'next_batch')`, strings.ToLower(crand.Text()[:8]))
}

// dropBatch deletes pending batch b and runs stmt with args in the same transaction.
func (u *Uploader) dropBatch(ctx context.Context, b *batch, stmt string, args ...any) error {
	tx, err := u.state.W.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("drop batch %s: %w", b.id, err)
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `DELETE FROM batches WHERE batch_id = ? AND state = 'pending'`, b.id)
	if err == nil {
		_, err = tx.ExecContext(ctx, stmt, args...)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("drop batch %s: %w", b.id, err)
	}
	return nil
}

// backoff returns the wait after the n-th failure in a row (from 0): full jitter over an
// exponentially growing window, capped.
func (u *Uploader) backoff(n int) time.Duration {
	window := u.cfg.RetryCap
	if n < 40 {
		if w := u.cfg.RetryBase << n; w > 0 && w < window {
			window = w
		}
	}
	return jitter(window)
}

// jitter returns a uniformly random duration in [0, d].
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// sleep waits d or until ctx is done; it reports whether the wait ran to its end.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sendError is a failed send that reached HQ and got an answer that is not a receipt.
type sendError struct {
	status     int
	body       string
	refused    bool // a 4xx other than 408 and 429: sending it again as it is fails again
	badReceipt bool // 200 without a receipt for this batch
	retryAfter time.Duration
	// The code of HQ's problem document, if the answer is one.
	code string
}

func (e *sendError) Error() string {
	switch {
	case e.badReceipt:
		return fmt.Sprintf("HQ answered 200 without a receipt for the batch: %s", e.body)
	case e.refused:
		return fmt.Sprintf("HQ refused the batch: %d %s", e.status, e.body)
	}
	return fmt.Sprintf("HQ answered %d %s", e.status, e.body)
}

// post sends a batch once, signed, and returns HQ's receipt for it.
func (u *Uploader) post(ctx context.Context, b *batch) (hqwire.Receipt, []byte, error) {
	var rec hqwire.Receipt
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.cfg.HQURL, bytes.NewReader(b.body))
	if err != nil {
		return rec, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	hqwire.SignRequest(req, u.cfg.Secret, u.path, u.cfg.Store, b.id, u.cfg.Now(), b.body)
	resp, err := u.cfg.Client.Do(req)
	if err != nil {
		return rec, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rec, nil, fmt.Errorf("read HQ's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		// 5xx, 408 and 429 are worth retrying as they are. Any other 4xx will be answered
		// the same way again, and so will a 2xx or 3xx that is not 200 with a receipt (an
		// endpoint that is not hq-sync serve's).
		se := &sendError{status: resp.StatusCode, body: short(raw), refused: resp.StatusCode < 500 &&
			resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			se.retryAfter = time.Duration(s) * time.Second
		}
		var p struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(raw, &p) == nil {
			se.code = p.Code
		}
		return rec, nil, se
	}
	// A receipt counts only signed by HQ with the store's secret: anything between the
	// uploader and HQ could answer 200 with a receipt, and the batch's rows would never go.
	if !hqwire.VerifyReceipt(u.cfg.Secret, resp.Header.Get(hqwire.HeaderSignature), u.cfg.Store, b.id, raw) {
		return rec, nil, &sendError{status: resp.StatusCode, body: "a receipt not signed by HQ: " + short(raw), badReceipt: true}
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.BatchID != b.id || (rec.Store != "" && rec.Store != u.cfg.Store) {
		return rec, nil, &sendError{status: resp.StatusCode, body: short(raw), badReceipt: true}
	}
	return rec, raw, nil
}

func short(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
