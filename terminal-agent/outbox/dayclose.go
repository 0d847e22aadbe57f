package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/posgate/posgate/internal/money"
	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
)

// Codes of a day close, and of steps on a closed day.
const (
	// CodeDayClosed refuses a step that would add to the totals of a business day this
	// terminal has closed.
	CodeDayClosed = "day_closed"
	// CodeDayNotStarted refuses a close of a business day that has not begun.
	CodeDayNotStarted = "business_date_future"
	// CodeSalePaidOpen refuses closing the day while a sale has payments taken and is not
	// complete: it could not be completed on the closed day.
	CodeSalePaidOpen = "sale_paid_open"
)

// dayOpen refuses a step that would add to the totals of a business day this terminal has
// closed. The close declared them to the store and headquarters, once: a sale after it made
// the declaration short for good, and the day never reconciled.
func (t *Tx) dayOpen() error {
	date := t.s.BusinessDate(t.now)
	var seq int64
	err := t.queryRow(`SELECT seq FROM day_closes WHERE business_date = ?`, date).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return perr.New(perr.Refused, CodeDayClosed,
		"business day %s is closed at this terminal (its totals are declared); sales and refunds go on the next business day, "+
			"or a supervisor reopens the day", date)
}

// CodeNothingToClose refuses a day close that names no day when no business day with sales
// or refunds is open at the terminal within the close lookback.
const CodeNothingToClose = "nothing_to_close"

// CodeDayAmbiguous refuses a day close that names no day while more than one business day
// with sales or refunds is open at the terminal within the close lookback: the cashier names
// the one to close.
const CodeDayAmbiguous = "day_to_close_ambiguous"

// DefaultCloseLookbackDays is how many days before today a close that names no day looks
// for an open business day, unless Config.CloseLookbackDays says otherwise (DayToClose).
const DefaultCloseLookbackDays = 7

// DayToClose returns the business day a close that names none closes: the one business day
// from CloseLookbackDays (7) days before today up to today (now, in the store's zone) with a
// completed sale or a refund at this terminal that is not closed. With none it is
// nothing_to_close; with several it is day_to_close_ambiguous, naming them, since closing the
// wrong one locks the till out of a day's trade until a supervisor reopens it. Every default tried
// guessed wrong somewhere: today's date closed the new, empty day after midnight; the latest
// open day closed the new day after a sale at 00:01; the oldest lagged a day behind for good
// after one missed close; an hour of the day locked a night shift out of the morning.
//
// An open day older than the lookback is no candidate (OldOpenDays lists it, and a
// supervisor closes it by name): a till whose clock, reset by a dead RTC, dated an offline
// sale years back would otherwise make every close ambiguous until someone named that day.
// The cashier's evening close is about the days just traded, and a week covers a close
// missed over a long weekend; a day missed for longer needs someone who knows why.
func (s *Store) DayToClose(ctx context.Context, now time.Time) (string, error) {
	open, old, err := s.openDays(ctx, now)
	if err != nil {
		return "", err
	}
	var also string
	if len(old) > 0 {
		also = fmt.Sprintf("; open more than %d days back, left for a supervisor to close by date: %s",
			s.closeLookbackDays(), strings.Join(old, ", "))
	}
	switch len(open) {
	case 0:
		return "", perr.New(perr.Refused, CodeNothingToClose,
			"no business day with sales or refunds is open at this terminal; name the day to close (business_date)%s", also)
	case 1:
		return open[0], nil
	}
	return "", perr.New(perr.Refused, CodeDayAmbiguous,
		"business days %s are open at this terminal; name the one to close (business_date)%s", strings.Join(open, ", "), also)
}

// OldOpenDays returns the business days, in order, with a completed sale or a refund at this
// terminal that are not closed and are older than the lookback of a close that names no day
// (DayToClose): they are closed by naming them.
func (s *Store) OldOpenDays(ctx context.Context, now time.Time) ([]string, error) {
	_, old, err := s.openDays(ctx, now)
	return old, err
}

func (s *Store) closeLookbackDays() int {
	if s.cfg.CloseLookbackDays > 0 {
		return s.cfg.CloseLookbackDays
	}
	return DefaultCloseLookbackDays
}

// openDays returns the business days up to today (now, in the store's zone) with a completed
// sale or a refund at this terminal that are not closed, in order: those within the close
// lookback (recent), and those before it (old).
func (s *Store) openDays(ctx context.Context, now time.Time) (recent, old []string, err error) {
	today := s.BusinessDate(now)
	d, err := time.Parse(wire.BusinessDate, today)
	if err != nil {
		return nil, nil, err
	}
	from := d.AddDate(0, 0, -s.closeLookbackDays()).Format(wire.BusinessDate) // dates, not instants: no DST
	// Each traded day is found by one seek from the one before (indexes sales_day and
	// refunds_day), not by reading every sale and refund the till has made.
	rows, err := s.readRows(ctx, `WITH RECURSIVE
			s(day) AS (SELECT min(business_date) FROM sales WHERE state = 'completed'
				UNION ALL SELECT (SELECT min(business_date) FROM sales WHERE state = 'completed' AND business_date > s.day)
				FROM s WHERE s.day IS NOT NULL),
			r(day) AS (SELECT min(business_date) FROM refunds WHERE state = 'done'
				UNION ALL SELECT (SELECT min(business_date) FROM refunds WHERE state = 'done' AND business_date > r.day)
				FROM r WHERE r.day IS NOT NULL)
		SELECT day FROM (SELECT day FROM s UNION SELECT day FROM r)
		WHERE day IS NOT NULL AND day <= ? AND day NOT IN (SELECT business_date FROM day_closes)
		ORDER BY day`, today)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var day string
		if err := rows.Scan(&day); err != nil {
			return nil, nil, err
		}
		if day < from { // YYYY-MM-DD orders as text
			old = append(old, day)
		} else {
			recent = append(recent, day)
		}
	}
	return recent, old, rows.Err()
}

// DayClose queues the terminal's totals for a business day, which are then final: no sale,
// payment or refund is taken on that day at this terminal any more (day_closed), until a
// supervisor reopens the day (DayReopen); its next close is then a new close of all the
// day's trade. Closing a closed day again returns its close. A day that has not begun cannot be closed, nor one
// while a sale or refund waits for the store's live verdict (verdict_pending: its refusal
// would undo it under the close), nor today while a sale has payments taken and is not
// complete.
func (t *Tx) DayClose(date string) (wire.DayClosePayload, error) {
	var p wire.DayClosePayload
	if _, err := time.Parse(wire.BusinessDate, date); err != nil {
		return p, perr.New(perr.Invalid, "business_date_invalid", "business date %q is not YYYY-MM-DD", date)
	}
	var body []byte
	err := t.queryRow(`SELECT seq, payload FROM day_closes WHERE business_date = ?`, date).Scan(&t.Seq, &body)
	if err == nil {
		return p, json.Unmarshal(body, &p)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return p, err
	}
	today := t.s.BusinessDate(t.now)
	if date > today { // YYYY-MM-DD orders as text
		return p, perr.New(perr.Refused, CodeDayNotStarted, "business day %s has not begun (today is %s)", date, today)
	}
	var seq int64
	err = t.queryRow(`SELECT seq FROM events WHERE state = 'pending' AND offline = 0 AND kind IN ('sale', 'refund')
		ORDER BY seq LIMIT 1`).Scan(&seq)
	switch {
	case err == nil:
		return p, perr.New(perr.Refused, CodeVerdictPending,
			"event %d still waits for the store's verdict; close the day again in a moment", seq)
	case !errors.Is(err, sql.ErrNoRows):
		return p, err
	}
	if date == today {
		var id string
		err = t.queryRow(`SELECT s.id FROM sales s WHERE s.state = 'open' AND EXISTS (
			SELECT 1 FROM payments p WHERE p.sale_id = s.id AND p.voided = 0) LIMIT 1`).Scan(&id)
		switch {
		case err == nil:
			return p, perr.New(perr.Refused, CodeSalePaidOpen,
				"sale %q has payments taken and is not complete: complete or cancel it before closing the day", id)
		case !errors.Is(err, sql.ErrNoRows):
			return p, err
		}
	}
	if p, err = dayTotals(t.ctx, t.tx, date); err != nil {
		return p, err
	}
	if seq, err = t.enqueue(wire.KindDayClose, p, 0); err != nil {
		return p, err
	}
	body, _ = json.Marshal(p)
	_, err = t.exec(`INSERT INTO day_closes (business_date, seq, payload) VALUES (?, ?, ?)`, date, seq, body)
	return p, err
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// DayTotals returns the terminal's own totals for a business day: completed sales (per
// payment method, cash net of change) and refunds.
func (s *Store) DayTotals(ctx context.Context, date string) (wire.DayClosePayload, error) {
	return dayTotals(ctx, s.db.R, date)
}

func dayTotals(ctx context.Context, q querier, date string) (wire.DayClosePayload, error) {
	p := wire.DayClosePayload{BusinessDate: date, Methods: []wire.MethodTotal{}}
	by := map[string]*wire.MethodTotal{}
	get := func(m string) *wire.MethodTotal {
		if by[m] == nil {
			by[m] = &wire.MethodTotal{Method: m}
		}
		return by[m]
	}
	rows, err := q.QueryContext(ctx, `SELECT p.method, count(DISTINCT s.id), sum(p.amount)
		FROM sales s JOIN payments p ON p.sale_id = s.id AND p.voided = 0
		WHERE s.state = 'completed' AND s.business_date = ? GROUP BY p.method`, date)
	if err != nil {
		return p, fmt.Errorf("day totals: %w", err)
	}
	for rows.Next() {
		var m string
		var n int64
		var amt money.Fen
		if err := rows.Scan(&m, &n, &amt); err != nil {
			rows.Close()
			return p, err
		}
		mt := get(m)
		mt.SaleCount, mt.SaleAmount = n, amt
	}
	rows.Close()
	// Change is given in cash: take it off the cash figure.
	var change, count, total money.Fen
	if err := scanOne(ctx, q, `SELECT coalesce(sum(change), 0), count(*), coalesce(sum(total), 0) FROM sales
		WHERE state = 'completed' AND business_date = ?`, []any{date}, &change, &count, &total); err != nil {
		return p, err
	}
	if change > 0 {
		get(wire.MethodCash).SaleAmount -= change
	}
	p.SaleCount, p.SaleAmount = int64(count), total
	rows, err = q.QueryContext(ctx, `SELECT method, count(*), sum(amount) FROM refunds
		WHERE state = 'done' AND business_date = ? GROUP BY method`, date)
	if err != nil {
		return p, fmt.Errorf("day totals: %w", err)
	}
	for rows.Next() {
		var m string
		var n int64
		var amt money.Fen
		if err := rows.Scan(&m, &n, &amt); err != nil {
			rows.Close()
			return p, err
		}
		mt := get(m)
		mt.RefundCount, mt.RefundAmount = n, amt
		p.RefundCount += n
		p.RefundAmount += amt
	}
	rows.Close()
	for _, m := range []string{wire.MethodCash, wire.MethodCard, wire.MethodQR} {
		if by[m] != nil {
			p.Methods = append(p.Methods, *by[m])
		}
	}
	return p, nil
}

func scanOne(ctx context.Context, q querier, query string, args []any, dest ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Err()
}
