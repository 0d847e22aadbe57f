package upload

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/store-server/ledger"
)

// Beside the batches, the uploader sends HQ on routes of their own what a v0.1.0 serve does
// not take in a batch: the store's stock adjustments (moves.go) and its flow exceptions
// (flows.go). The ledger numbers each route's items; the uploader sends those after the last
// HQ acknowledged (kept in its state), whenever it has no batch to send or its batch waits
// refused by HQ, and looks again every sideEvery. A v0.1.0 serve answers such a route 404:
// its items wait and are tried again every RefusedRetry, and the batches go on as before.

// sideEvery is how often an idle uploader looks for new items of a side route.
const sideEvery = 2 * time.Second

// sideRoute is one route beside the batches, and when the uploader looks at it next.
type sideRoute struct {
	what    string    // what it sends, in the log: "stock moves"
	segment string    // its path beside the batches' path: "stock-moves" (…/v1/stock-moves)
	through string    // the state's key of the last item number HQ acknowledged
	at      time.Time // when to look for items to send next
	// top returns the number of the ledger's last item, 0 when it has none.
	top func(ctx context.Context, l *ledger.Ledger) (int64, error)
	// next reads the items after through into one batch; its last is through when none is
	// left.
	next func(ctx context.Context, u *Uploader, l *ledger.Ledger, through int64) (sideBatch, error)
}

// sideBatch is one request of a side route: its id, its body, where HQ's receipt goes, how
// many items it holds, and the number of the last item read.
type sideBatch struct {
	id            string
	body, receipt any
	items         int
	last          int64
}

// sendSides sends what waits on each side route, if it is time to look; with now, whatever
// the time (Once's end).
func (u *Uploader) sendSides(ctx context.Context, now bool) {
	for _, r := range u.side {
		if now {
			r.at = time.Time{}
		}
		if err := u.sendSide(ctx, r); err != nil && ctx.Err() == nil {
			u.log.Warn(r.what+" not sent; trying again shortly", "err", err)
		}
	}
}

// sideWait waits d or until ctx is done, sending what waits on the side routes meanwhile
// (a batch HQ refused waits this way); it reports whether the wait ran to its end.
func (u *Uploader) sideWait(ctx context.Context, d time.Duration) bool {
	end := time.Now().Add(d)
	for {
		u.sendSides(ctx, false)
		left := time.Until(end)
		if left <= 0 {
			return ctx.Err() == nil
		}
		if !sleep(ctx, min(left, sideEvery)) {
			return false
		}
	}
}

// sendSide sends the items of r HQ does not hold yet, if it is time to. It returns when they
// are all sent or HQ did not take them.
func (u *Uploader) sendSide(ctx context.Context, r *sideRoute) error {
	if time.Now().Before(r.at) {
		return nil
	}
	r.at = time.Now().Add(sideEvery)
	kv, err := u.kv(ctx)
	if err != nil {
		return err
	}
	through := atoi(kv[r.through])
	u.ledgerMu.RLock()
	l := u.ledger
	u.ledgerMu.RUnlock()
	top, err := r.top(ctx, l)
	if err != nil || top == 0 {
		return err
	}
	if top < through {
		// A ledger restored from a backup, or refilled: send its items again (HQ keeps one
		// state of each).
		through = 0
	}
	for ctx.Err() == nil {
		b, err := r.next(ctx, u, l, through)
		if err != nil || b.last == through {
			return err
		}
		status, err := u.postSigned(ctx, r.segment, b.id, b.body, b.receipt)
		if status == http.StatusNotFound {
			r.at = time.Now().Add(u.cfg.RefusedRetry)
			u.log.Info("HQ does not take "+r.what+" yet (a serve before v0.2.0); trying again later",
				"retry_in", u.cfg.RefusedRetry)
			return nil
		}
		if err != nil {
			return err
		}
		through = b.last
		if err := inTx(ctx, u.state.W, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)
				ON CONFLICT (k) DO UPDATE SET v = excluded.v`, r.through, strconv.FormatInt(through, 10))
			return err
		}); err != nil {
			return err
		}
		u.log.Info(r.what+" sent to HQ", "items", b.items, "through", through)
	}
	return nil
}

// postSigned sends v as JSON to HQ's route segment beside the batches' path, signed with id
// as its idempotency key, and reads HQ's signed receipt into rc. It returns HQ's status.
func (u *Uploader) postSigned(ctx context.Context, segment, id string, v, rc any) (int, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	dest, err := url.Parse(u.cfg.HQURL)
	if err != nil {
		return 0, err
	}
	dest.Path = strings.TrimSuffix(strings.TrimSuffix(dest.Path, "/"), "/batches") + "/" + segment
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dest.String(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	hqwire.SignRequest(req, u.cfg.Secret, dest.EscapedPath(), u.cfg.Store, id, u.cfg.Now(), body)
	resp, err := u.cfg.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read HQ's answer to %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("HQ answered %s %d %s", id, resp.StatusCode, short(raw))
	}
	var head struct {
		BatchID string `json:"batch_id"`
	}
	if !hqwire.VerifyReceipt(u.cfg.Secret, resp.Header.Get(hqwire.HeaderSignature), u.cfg.Store, id, raw) ||
		json.Unmarshal(raw, &head) != nil || head.BatchID != id || json.Unmarshal(raw, rc) != nil {
		return resp.StatusCode, fmt.Errorf("HQ's answer to %s is not its signed receipt: %s", id, short(raw))
	}
	return resp.StatusCode, nil
}
