package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
)

// DayClosed returns the totals day close event seq carries, as queued for the store
// (perr.NotFound if the event is pruned or is not a day close).
func (s *Store) DayClosed(ctx context.Context, seq int64) (wire.DayClosePayload, error) {
	var p wire.DayClosePayload
	var body []byte
	err := s.readRow(ctx, `SELECT payload FROM events WHERE seq = ? AND kind = ?`, seq, string(wire.KindDayClose)).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return p, perr.New(perr.NotFound, "event_not_found", "no day close event %d", seq)
	}
	if err != nil {
		return p, err
	}
	return p, json.Unmarshal(body, &p)
}

// Sale returns a sale by id.
func (s *Store) Sale(ctx context.Context, id string) (client.Sale, error) {
	var v client.Sale
	var opened string
	var completed, date sql.NullString
	var seq, flow sql.NullInt64
	err := s.readRow(ctx, `SELECT id, state, opened_at, completed_at, business_date, change, seq, flow_no
		FROM sales WHERE id = ?`, id).Scan(&v.ID, &v.State, &opened, &completed, &date, &v.Change, &seq, &flow)
	if errors.Is(err, sql.ErrNoRows) {
		return v, errSaleNotFound(id)
	}
	if err != nil {
		return v, fmt.Errorf("sale %s: %w", id, err)
	}
	v.OpenedAt, _ = time.Parse(time.RFC3339Nano, opened)
	if completed.Valid {
		t, _ := time.Parse(time.RFC3339Nano, completed.String)
		v.CompletedAt = &t
	}
	v.BusinessDate, v.Seq, v.FlowNo = date.String, seq.Int64, flow.Int64
	rows, err := s.readRows(ctx, `SELECT l.line, l.sku, l.name, l.qty, l.unit_price, l.amount, coalesce((
			SELECT sum(rl.qty) FROM refund_lines rl JOIN refunds r ON r.id = rl.refund_id
			WHERE r.sale_id = l.sale_id AND r.state = 'done' AND rl.line = l.line), 0)
		FROM sale_lines l WHERE l.sale_id = ? AND l.removed = 0 ORDER BY l.line`, id)
	if err != nil {
		return v, fmt.Errorf("sale %s: %w", id, err)
	}
	v.Lines = []client.SaleLine{}
	for rows.Next() {
		var l client.SaleLine
		if err := rows.Scan(&l.Line, &l.SKU, &l.Name, &l.Qty, &l.UnitPrice, &l.Amount, &l.Refunded); err != nil {
			rows.Close()
			return v, err
		}
		v.Lines = append(v.Lines, l)
		v.Total += l.Amount
	}
	// Close before the next query: holding one reader connection while asking for another
	// can exhaust the reader pool under concurrent requests.
	if err := rows.Close(); err != nil {
		return v, err
	}
	prows, err := s.readRows(ctx, `SELECT n, method, amount, reference, voided FROM payments WHERE sale_id = ? ORDER BY n`, id)
	if err != nil {
		return v, fmt.Errorf("sale %s: %w", id, err)
	}
	defer prows.Close()
	v.Payments = []client.SalePayment{}
	for prows.Next() {
		var p client.SalePayment
		if err := prows.Scan(&p.N, &p.Method, &p.Amount, &p.Reference, &p.Voided); err != nil {
			return v, err
		}
		if !p.Voided {
			v.Paid += p.Amount
		}
		v.Payments = append(v.Payments, p)
	}
	if v.Due = v.Total - v.Paid; v.Due < 0 {
		v.Due = 0
	}
	return v, nil
}

// Refund returns a refund by id.
func (s *Store) Refund(ctx context.Context, id string) (client.Refund, error) {
	var r client.Refund
	var at string
	var flow sql.NullInt64
	err := s.readRow(ctx, `SELECT id, sale_id, state, at, business_date, amount, method, restock, seq, flow_no, approved_by
		FROM refunds WHERE id = ?`, id).Scan(&r.ID, &r.SaleID, &r.State, &at, &r.BusinessDate, &r.Amount, &r.Method,
		&r.Restock, &r.Seq, &flow, &r.ApprovedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("refund %s not found", id)
	}
	r.At, _ = time.Parse(time.RFC3339Nano, at)
	r.FlowNo = flow.Int64
	return r, err
}

// CatalogVersion returns the version of the cached catalog (0: none yet).
func (s *Store) CatalogVersion(ctx context.Context) (int64, error) {
	return s.KV(ctx, KVCatalogVersion)
}

// Item returns a catalog item by SKU.
func (s *Store) Item(ctx context.Context, sku string) (wire.CatalogItem, bool, error) {
	var it wire.CatalogItem
	var bc sql.NullString
	err := s.readRow(ctx, `SELECT sku, barcode, name, price FROM catalog WHERE sku = ?`, sku).
		Scan(&it.SKU, &bc, &it.Name, &it.Price)
	if errors.Is(err, sql.ErrNoRows) {
		return it, false, nil
	}
	it.Barcode = bc.String
	return it, err == nil, err
}

// datesApartWindow is how many of the latest events DatesApart reads: a bounded read
// whatever the outbox's size, and recent enough that a zone set right shows at once.
const datesApartWindow = 5000

// DatesApart returns what the latest acks say of the till's business dates, or nil when the
// store dated every event it dated among the latest ones as the till did.
//
// An event the till dated under another zone than its --tz now (its time's offset is not the
// zone's then: the zone was set right, and the agent started again) is not counted: it says
// what the till did, not what it does, and the warning would stay until 5,000 later events
// had pushed it out of the window. An event whose dates differ was dated at an offset other
// than the store zone's, so once the till is in the store's zone every one of them is left
// out, at once.
func (s *Store) DatesApart(ctx context.Context) (*client.DatesApart, error) {
	rows, err := s.readRows(ctx, `SELECT seq, at, business_date, store_date FROM events
		WHERE seq > (SELECT coalesce(max(seq), 0) FROM events) - ? AND store_date IS NOT NULL
			AND store_date <> business_date
		ORDER BY seq DESC`, datesApartWindow)
	if err != nil {
		return nil, fmt.Errorf("dates apart: %w", err)
	}
	defer rows.Close()
	var d *client.DatesApart
	for rows.Next() {
		var seq int64
		var at, tillDate, storeDate string
		if err := rows.Scan(&seq, &at, &tillDate, &storeDate); err != nil {
			return nil, fmt.Errorf("dates apart: %w", err)
		}
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			_, then := t.Zone()
			if _, now := t.In(s.cfg.Location).Zone(); then != now {
				continue // dated under the zone the till had
			}
		}
		if d == nil {
			d = &client.DatesApart{TillZone: s.cfg.Location.String(), Seq: seq, TillDate: tillDate, StoreDate: storeDate}
		}
		d.Events++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("dates apart: %w", err)
	}
	return d, nil
}
