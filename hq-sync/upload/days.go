package upload

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/posgate/posgate/internal/hqwire"
	"github.com/posgate/posgate/internal/wire"
)

type undeclaredDay struct {
	date     string
	revision int64 // the last revision HQ acknowledged
	sentRows int64 // rows of the date HQ acknowledged
}

// undeclared returns the business dates before today with rows HQ acknowledged since the
// date's last declaration (or that were never declared), then the days the store did not
// trade (see emptyDays).
func (u *Uploader) undeclared(ctx context.Context, today string) ([]undeclaredDay, error) {
	rows, err := u.state.R.QueryContext(ctx, `SELECT business_date, revision, sent_rows FROM days
		WHERE business_date < ? AND sent_rows > declared_rows AND sent_rows <> skipped_rows
		ORDER BY business_date`, today)
	if err != nil {
		return nil, fmt.Errorf("read days: %w", err)
	}
	defer rows.Close()
	var out []undeclaredDay
	for rows.Next() {
		var d undeclaredDay
		if err := rows.Scan(&d.date, &d.revision, &d.sentRows); err != nil {
			return nil, fmt.Errorf("read days: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	empty, err := u.emptyDays(ctx, today)
	return append(out, empty...), err
}

// maxEmptyDays bounds the days without trade the uploader declares: those of the last
// maxEmptyDays days before today. One sale dated years back (a till whose clock had reset)
// had it declare every day since as empty, thousands of them, and walk them all at every
// poll.
const maxEmptyDays = 31

// retiredAfter is how long a terminal unheard of stops counting as one of the store's: as
// long as the days declared empty go back, so that a till cut off for weeks still holds
// back every day it may have sold on.
const retiredAfter = maxEmptyDays * 24 * time.Hour

// emptyDays returns the days, of the last maxEmptyDays before today and after the first day
// the store had rows of, of which HQ acknowledged no row and that were never declared: the
// store did not trade (a holiday, a refit). Without their declarations HQ's reconcile could
// not tell a store closed for the day from one whose upload is stuck, and reported the day
// NOT OK every night. A day is taken for one without trade only once a terminal has been
// heard from since it ended and every terminal heard from in the maxEmptyDays before it has
// too: tills cut off from the store all day hold its sales, and the day declared empty read
// as OK at HQ. (build also checks that no row of the day waits in the ledger.)
func (u *Uploader) emptyDays(ctx context.Context, today string) ([]undeclaredDay, error) {
	var first sql.NullString
	if err := u.state.R.QueryRowContext(ctx, `SELECT min(business_date) FROM days`).Scan(&first); err != nil {
		return nil, fmt.Errorf("read days: %w", err)
	}
	if !first.Valid {
		return nil, nil
	}
	end, err := time.ParseInLocation(wire.BusinessDate, today, u.cfg.Location)
	if err != nil {
		return nil, err
	}
	from := end.AddDate(0, 0, -maxEmptyDays).Format(wire.BusinessDate)
	if first.String >= from {
		from = first.String // and after it
	}
	known := map[string]bool{first.String: true}
	rows, err := u.state.R.QueryContext(ctx, `SELECT business_date FROM days WHERE business_date >= ? AND business_date < ?`,
		from, today)
	if err != nil {
		return nil, fmt.Errorf("read days: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, fmt.Errorf("read days: %w", err)
		}
		known[d] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var missing []time.Time
	start, err := time.ParseInLocation(wire.BusinessDate, from, u.cfg.Location)
	if err != nil {
		return nil, err
	}
	for d := start; d.Before(end); d = d.AddDate(0, 0, 1) {
		if !known[d.Format(wire.BusinessDate)] {
			missing = append(missing, d)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	seen, err := u.ledger.Terminals(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the ledger's terminals: %w", err)
	}
	var out []undeclaredDay
	for _, d := range missing {
		dayEnd := d.AddDate(0, 0, 1)
		heard, silent := false, false
		for _, ts := range seen {
			// By the time of the terminal's last event (a heartbeat, while it is online).
			switch {
			case ts.LastAt.After(u.cfg.Now().Add(time.Hour)):
				silent = true // a till clock ahead says nothing of when it was last heard
			case !ts.LastAt.Before(dayEnd):
				heard = true
			case ts.LastAt.After(d.Add(-retiredAfter)):
				silent = true // a till of the store not heard from since the day ended
			}
		}
		if heard && !silent { // some till heard since, and none of the store's silent
			out = append(out, undeclaredDay{date: d.Format(wire.BusinessDate)})
		}
	}
	return out, nil
}

// partOf is the part of a declaration in parts that a batch carries. A batch records its
// parts apart from its whole declarations (days): its receipt declares a day of its days,
// and a day of its parts only with the last part.
type partOf struct {
	Revision int64 `json:"revision"`
	Part     int   `json:"part"`
	Parts    int   `json:"parts"`
	// Covered is the day's sent_rows when its list was taken: the last part's receipt
	// makes it declared_rows, so rows sent since are declared by the next revision.
	Covered int64 `json:"covered"`
}

// splitParts cuts a declaration into parts whose JSON takes at most limit bytes each, in
// the list's order, all with a new split id. A transaction larger than limit on its own
// still makes a part.
func splitParts(d hqwire.StoreDay, limit int) ([]hqwire.StoreDay, error) {
	d.Split = crand.Text()[:16] // 80 random bits
	head := d
	head.Txns = nil
	head.Part, head.Parts = hqwire.MaxDayParts, hqwire.MaxDayParts // the widest numbers a part can have
	base, err := jsonSize(&head)
	if err != nil {
		return nil, err
	}
	var out []hqwire.StoreDay
	from, size := 0, base
	for i := range d.Txns {
		n, err := jsonSize(&d.Txns[i])
		if err != nil {
			return nil, err
		}
		if size+n > limit && i > from {
			out = append(out, d)
			out[len(out)-1].Txns = d.Txns[from:i:i]
			from, size = i, base
		}
		size += n
	}
	out = append(out, d)
	out[len(out)-1].Txns = d.Txns[from:]
	for i := range out {
		out[i].Part, out[i].Parts = i+1, len(out)
	}
	return out, nil
}

// splitDay is a day split into parts by build, to be kept in the state.
type splitDay struct {
	parts   []hqwire.StoreDay
	covered int64
}

// keepParts records the parts of days split for a declaration in parts, in one transaction.
func (u *Uploader) keepParts(ctx context.Context, days []splitDay) error {
	if len(days) == 0 {
		return nil
	}
	tx, err := u.state.W.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("keep day parts: %w", err)
	}
	defer tx.Rollback()
	for _, sd := range days {
		for _, d := range sd.parts {
			txns, err := json.Marshal(d.Txns)
			if err != nil {
				return fmt.Errorf("keep day parts: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO day_parts (business_date, part, parts, revision, covered_rows,
				closed_at, split, txns) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, d.BusinessDate, d.Part, d.Parts, d.Revision,
				sd.covered, d.ClosedAt.UTC().Format(time.RFC3339Nano), d.Split, txns); err != nil {
				return fmt.Errorf("keep day parts of %s: %w", d.BusinessDate, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("keep day parts: %w", err)
	}
	return nil
}

// waitingPart is the next part of a day being declared in parts.
type waitingPart struct {
	day     hqwire.StoreDay
	covered int64 // see partOf
	size    int   // its JSON in a batch body
}

// waitingList is the next part of each day being declared in parts, in date order.
type waitingList []waitingPart

func (l waitingList) has(date string) bool {
	return slices.ContainsFunc(l, func(w waitingPart) bool { return w.day.BusinessDate == date })
}

// waitingParts returns the next part to send of each day being declared in parts.
func (u *Uploader) waitingParts(ctx context.Context) (waitingList, error) {
	rows, err := u.state.R.QueryContext(ctx, `SELECT business_date, min(part), parts, revision, covered_rows,
		closed_at, split, txns FROM day_parts GROUP BY business_date ORDER BY business_date`)
	if err != nil {
		return nil, fmt.Errorf("read day parts: %w", err)
	}
	defer rows.Close()
	var out waitingList
	for rows.Next() {
		var w waitingPart
		var closed string
		var txns []byte
		if err := rows.Scan(&w.day.BusinessDate, &w.day.Part, &w.day.Parts, &w.day.Revision, &w.covered, &closed,
			&w.day.Split, &txns); err != nil {
			return nil, fmt.Errorf("read day parts: %w", err)
		}
		if w.day.ClosedAt, err = time.Parse(time.RFC3339Nano, closed); err != nil {
			return nil, fmt.Errorf("read day parts of %s: %w", w.day.BusinessDate, err)
		}
		if err := json.Unmarshal(txns, &w.day.Txns); err != nil {
			return nil, fmt.Errorf("read day parts of %s: %w", w.day.BusinessDate, err)
		}
		if w.size, err = jsonSize(&w.day); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}
