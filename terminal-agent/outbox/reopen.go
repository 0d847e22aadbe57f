package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/posgate/posgate/internal/perr"
	"github.com/posgate/posgate/internal/wire"
	"github.com/posgate/posgate/terminal-agent/client"
)

// Codes of a supervisor's reopen of a closed business day (DayReopen).
const (
	// CodeDayNotClosed refuses a reopen of a business day that is not closed at this terminal.
	CodeDayNotClosed = "day_not_closed"
	// CodeReopenReasonRequired refuses a reopen that gives no reason.
	CodeReopenReasonRequired = "reopen_reason_required"
	// CodeReopenReasonTooLong refuses a reopen whose reason is over MaxReopenReason characters.
	CodeReopenReasonTooLong = "reopen_reason_too_long"
	// CodeReopenTooOld refuses a reopen of a business day before the close lookback.
	CodeReopenTooOld = "day_reopen_too_old"
)

// MaxReopenReason is the longest reason a reopen takes, in characters.
const MaxReopenReason = 500

// DayReopen reopens a business day closed at this terminal: the till trades on it again,
// and the day's next close (named or naming no day) counts every sale and refund of the day
// and is queued as a new day_close event with a higher seq, which the store keeps in place
// of the one reopened. The close reopened is kept with the reason (DayReopens); its event is
// not withdrawn. Only a closed day (day_not_closed), not in the future
// (business_date_future) and within the close lookback (day_reopen_too_old: a day further
// back was closed long ago, and its totals may already be reconciled) is reopened, and only
// with a reason (reopen_reason_required) and approved by supervisor, whose PIN the caller
// checked (Approve). The ref returned names the reopen (DayReopenByRef).
func (t *Tx) DayReopen(date, reason, supervisor string) (ref string, err error) {
	if _, err := time.Parse(wire.BusinessDate, date); err != nil {
		return "", perr.New(perr.Invalid, "business_date_invalid", "business date %q is not YYYY-MM-DD", date)
	}
	reason = strings.TrimSpace(reason)
	switch {
	case supervisor == "":
		return "", forbidden(CodeSupervisorRequired, "a day's reopen needs a supervisor's approval")
	case reason == "":
		return "", perr.New(perr.Invalid, CodeReopenReasonRequired, "say why the day is reopened (reason)")
	case utf8.RuneCountInString(reason) > MaxReopenReason || utf8.RuneCountInString(supervisor) > MaxReopenReason:
		return "", perr.New(perr.Invalid, CodeReopenReasonTooLong,
			"the reason and the supervisor may be at most %d characters each", MaxReopenReason)
	}
	today := t.s.BusinessDate(t.now)
	d, _ := time.Parse(wire.BusinessDate, today)
	from := d.AddDate(0, 0, -t.s.closeLookbackDays()).Format(wire.BusinessDate) // as openDays
	switch {
	case date > today: // YYYY-MM-DD orders as text
		return "", perr.New(perr.Refused, CodeDayNotStarted, "business day %s has not begun (today is %s)", date, today)
	case date < from:
		return "", perr.New(perr.Refused, CodeReopenTooOld,
			"business day %s is more than %d days back (today is %s): its close stands; call the store's office",
			date, t.s.closeLookbackDays(), today)
	}
	var seq int64
	var body []byte
	err = t.queryRow(`SELECT seq, payload FROM day_closes WHERE business_date = ?`, date).Scan(&seq, &body)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", perr.New(perr.Refused, CodeDayNotClosed, "business day %s is not closed at this terminal", date)
	case err != nil:
		return "", err
	}
	res, err := t.exec(`INSERT INTO day_reopens (business_date, close_seq, close_payload, reason, supervisor, reopened_at)
		VALUES (?, ?, ?, ?, ?, ?)`, date, seq, body, reason, supervisor, t.now.Format(time.RFC3339Nano))
	if err != nil {
		return "", fmt.Errorf("record reopen: %w", err)
	}
	n, err := res.LastInsertId()
	if err != nil {
		return "", fmt.Errorf("record reopen: %w", err)
	}
	if _, err := t.exec(`DELETE FROM day_closes WHERE business_date = ?`, date); err != nil {
		return "", fmt.Errorf("reopen day: %w", err)
	}
	return strconv.FormatInt(n, 10), nil
}

const selReopen = `SELECT business_date, close_seq, close_payload, reason, supervisor, reopened_at FROM day_reopens`

func scanReopen(sc interface{ Scan(...any) error }) (client.DayReopen, error) {
	var r client.DayReopen
	var body []byte
	var at string
	if err := sc.Scan(&r.BusinessDate, &r.CloseSeq, &body, &r.Reason, &r.Supervisor, &at); err != nil {
		return r, err
	}
	r.ReopenedAt, _ = time.Parse(time.RFC3339Nano, at)
	return r, json.Unmarshal(body, &r.ClosedTotals)
}

// DayReopenByRef returns the reopen a DayReopen's ref names.
func (s *Store) DayReopenByRef(ctx context.Context, ref string) (client.DayReopen, error) {
	r, err := scanReopen(s.readRow(ctx, selReopen+` WHERE n = ?`, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return r, perr.New(perr.NotFound, "reopen_not_found", "no reopen %q", ref)
	}
	return r, err
}

// DayReopens returns the reopens of a business day at this terminal, oldest first.
func (s *Store) DayReopens(ctx context.Context, date string) ([]client.DayReopen, error) {
	rows, err := s.readRows(ctx, selReopen+` WHERE business_date = ? ORDER BY n`, date)
	if err != nil {
		return nil, fmt.Errorf("day reopens: %w", err)
	}
	defer rows.Close()
	var out []client.DayReopen
	for rows.Next() {
		r, err := scanReopen(rows)
		if err != nil {
			return nil, fmt.Errorf("day reopens: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DayCloseSeq returns the seq of the day_close event that closes a business day at this
// terminal now, or 0 while the day is open (never closed, or reopened since).
func (s *Store) DayCloseSeq(ctx context.Context, date string) (int64, error) {
	var seq int64
	err := s.readRow(ctx, `SELECT seq FROM day_closes WHERE business_date = ?`, date).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return seq, err
}
