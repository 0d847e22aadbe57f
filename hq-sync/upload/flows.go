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
)

// The store's flow exceptions go to HQ beside the batches, on a route of their own
// (hqwire.FlowsPath, next to the batches' path), as its stock moves do: a v0.1.0 serve
// refuses a batch holding an exception kind it does not know, so they never go in a batch.
// The uploader sends the state of each flow exception changed after the last change HQ
// acknowledged (the state's flows_through), whenever it has no batch to send. A v0.1.0 serve
// answers the route 404: the flow exceptions wait and are tried again every RefusedRetry;
// the batches, with the rows and the other exceptions, go on as before.

// flowsPath is the path of HQ's flow exceptions route beside the batches' path.
func flowsPath(batches string) string {
	return strings.TrimSuffix(strings.TrimSuffix(batches, "/"), "/batches") + "/flow-exceptions"
}

// sendFlows sends the flow exception states HQ does not hold yet, if it is time to. It
// returns when they are all sent or HQ did not take them.
func (u *Uploader) sendFlows(ctx context.Context) error {
	if time.Now().Before(u.flowsAt) {
		return nil
	}
	u.flowsAt = time.Now().Add(movesEvery)
	kv, err := u.kv(ctx)
	if err != nil {
		return err
	}
	through := atoi(kv["flows_through"])
	u.ledgerMu.RLock()
	l := u.ledger
	u.ledgerMu.RUnlock()
	top, err := l.MaxFlowChange(ctx)
	if err != nil {
		return err
	}
	if top == 0 {
		return nil // none yet, or a ledger not migrated to them yet
	}
	if top < through {
		// A ledger restored from a backup: send its flow exceptions again (HQ keeps the
		// state of the highest change number of each).
		through = 0
	}
	for ctx.Err() == nil {
		xs, last, _, err := l.FlowExceptionsAfter(ctx, through, hqwire.MaxFlowBatch)
		if err != nil || last == through {
			return err
		}
		if len(xs) > 0 {
			for i := range xs {
				xs[i].Resolution = fitText(xs[i].Resolution) // as an exception's: a refused batch would hold back the rest
			}
			b := hqwire.FlowBatch{V: hqwire.Version, Store: u.cfg.Store, ID: fmt.Sprintf("f-%d-%d", xs[0].Change, last),
				Exceptions: xs, SentAt: u.cfg.Now().UTC()}
			var rc hqwire.FlowReceipt
			status, err := u.postSigned(ctx, flowsPath, b.ID, &b, &rc)
			if status == http.StatusNotFound {
				u.flowsAt = time.Now().Add(u.cfg.RefusedRetry)
				u.log.Info("HQ does not take flow exceptions yet (a serve before v0.2.0); trying again later",
					"retry_in", u.cfg.RefusedRetry)
				return nil
			}
			if err != nil {
				return err
			}
			u.log.Info("flow exceptions sent to HQ", "flow_exceptions", len(xs), "stored", rc.Stored, "through", last)
		}
		through = last
		if err := inTx(ctx, u.state.W, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES ('flows_through', ?)
				ON CONFLICT (k) DO UPDATE SET v = excluded.v`, strconv.FormatInt(through, 10))
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// postSigned sends v as JSON to the HQ route path gives beside the batches' path, signed
// with id as its idempotency key, and reads HQ's signed receipt into rc. It returns HQ's
// status.
func (u *Uploader) postSigned(ctx context.Context, path func(batches string) string, id string, v, rc any) (int, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	dest, err := url.Parse(u.cfg.HQURL)
	if err != nil {
		return 0, err
	}
	dest.Path = path(dest.Path)
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
