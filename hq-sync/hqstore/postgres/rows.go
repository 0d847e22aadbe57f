package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/posgate/posgate/hq-sync/hqstore"
	"github.com/posgate/posgate/internal/hqwire"
)

// rowCols are the columns of rows a batch's rows are COPYed into.
var rowCols = []string{"store", "terminal", "seq", "kind", "business_date", "flow_no", "at", "hash",
	"amount", "cash", "card", "qr", "methods", "payload", "batch_id", "received_ms"}

// rowKey is a row's key within its store.
type rowKey struct {
	terminal string
	seq      int64
}

// insertRows stores the rows HQ does not hold yet and returns how many those were. A row
// HQ holds with another hash (or a batch listing one key twice with different content) is
// a row_conflict. The caller holds the store's lock: no other transaction stores rows of
// the store meanwhile.
//
// A row above its terminal's highest seq HQ holds (terminal_seqs) is new: a store's rows of
// one terminal come in seq order, so that is nearly every row. The others (a resend, a live
// refusal the till sent again and the store accepted later, a key reused with other content)
// are looked for among the rows HQ holds: first in their own day's partition, where a resend
// is, then, for those not there, in every day's. Rows of a day HQ dropped (serve --retain)
// count as held. The new rows are COPYed, into their day's partition when they are all of
// one day (the usual batch), and terminal_seqs is raised.
func insertRows(ctx context.Context, tx pgx.Tx, b *hqwire.Batch, at time.Time, p *partitions) (int, error) {
	if len(b.Rows) == 0 {
		return 0, nil
	}
	rows, err := distinctRows(b)
	if err != nil {
		return 0, err
	}
	top, err := heldSeqs(ctx, tx, b.Store, rows)
	if err != nil {
		return 0, fmt.Errorf("put batch: terminals' seqs: %w", err)
	}
	var fresh, below []*hqwire.Row
	for _, r := range rows {
		if r.Seq > top[r.Terminal] {
			fresh = append(fresh, r)
		} else {
			below = append(below, r)
		}
	}
	if len(below) > 0 {
		more, err := unheld(ctx, tx, b.Store, below, p)
		if err != nil {
			return 0, err
		}
		fresh = append(fresh, more...)
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	if err := copyRows(ctx, tx, b, fresh, at); err != nil {
		return 0, err
	}
	if err := raiseSeqs(ctx, tx, b.Store, fresh); err != nil {
		return 0, fmt.Errorf("put batch: raise terminals' seqs: %w", err)
	}
	return len(fresh), nil
}

// distinctRows returns the batch's rows without their twins (the same key listed again with
// the same hash), and a row_conflict if a key is listed with two hashes.
func distinctRows(b *hqwire.Batch) ([]*hqwire.Row, error) {
	seen := make(map[rowKey]*hqwire.Row, len(b.Rows))
	out := make([]*hqwire.Row, 0, len(b.Rows))
	for i := range b.Rows {
		r := &b.Rows[i]
		k := rowKey{r.Terminal, r.Seq}
		if first, ok := seen[k]; ok {
			if first.Hash != r.Hash {
				return nil, hqstore.ErrRowConflict(b.Store, r.Terminal, r.Seq)
			}
			continue
		}
		seen[k] = r
		out = append(out, r)
	}
	return out, nil
}

// heldSeqs returns the highest seq HQ holds of each terminal of rows (0: none).
func heldSeqs(ctx context.Context, tx pgx.Tx, store string, rows []*hqwire.Row) (map[string]int64, error) {
	var terms []string
	for _, r := range rows {
		if !slices.Contains(terms, r.Terminal) {
			terms = append(terms, r.Terminal)
		}
	}
	out := make(map[string]int64, len(terms))
	q, err := tx.Query(ctx, `SELECT terminal, max_seq FROM terminal_seqs WHERE store = $1 AND terminal = ANY($2)`,
		store, terms)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	for q.Next() {
		var t string
		var seq int64
		if err := q.Scan(&t, &seq); err != nil {
			return nil, err
		}
		out[t] = seq
	}
	return out, q.Err()
}

// unheld returns the rows of below that HQ does not hold, and a row_conflict for one HQ
// holds with another hash.
func unheld(ctx context.Context, tx pgx.Tx, store string, below []*hqwire.Row, p *partitions) ([]*hqwire.Row, error) {
	var ask []*hqwire.Row
	for _, r := range below {
		if !p.dropped(r.BusinessDate) {
			ask = append(ask, r)
		}
	}
	if len(ask) == 0 {
		return nil, nil
	}
	// First where a resend is: each row's own day.
	held, err := lookRows(ctx, tx, store, ask, true)
	if err != nil {
		return nil, err
	}
	var elsewhere []*hqwire.Row
	for _, r := range ask {
		if _, ok := held[rowKey{r.Terminal, r.Seq}]; !ok {
			elsewhere = append(elsewhere, r)
		}
	}
	if len(elsewhere) > 0 {
		more, err := lookRows(ctx, tx, store, elsewhere, false)
		if err != nil {
			return nil, err
		}
		for k, h := range more {
			held[k] = h
		}
	}
	var out []*hqwire.Row
	for _, r := range ask {
		h, ok := held[rowKey{r.Terminal, r.Seq}]
		switch {
		case !ok:
			out = append(out, r)
		case h != r.Hash:
			return nil, hqstore.ErrRowConflict(store, r.Terminal, r.Seq)
		}
	}
	return out, nil
}

// lookRows returns the hashes HQ holds of the keys of rows: in each row's own day's
// partition when ownDay, otherwise in any day's.
func lookRows(ctx context.Context, tx pgx.Tx, store string, rows []*hqwire.Row, ownDay bool) (map[rowKey]string, error) {
	terms := make([]string, len(rows))
	seqs := make([]int64, len(rows))
	dates := make([]string, len(rows))
	for i, r := range rows {
		terms[i], seqs[i], dates[i] = r.Terminal, r.Seq, r.BusinessDate
	}
	q := `SELECT r.terminal, r.seq, r.hash FROM unnest($2::text[], $3::bigint[]) AS k(terminal, seq)
		JOIN rows r ON r.store = $1 AND r.terminal = k.terminal COLLATE "C" AND r.seq = k.seq`
	args := []any{store, terms, seqs}
	if ownDay {
		q = `SELECT r.terminal, r.seq, r.hash FROM unnest($2::text[], $3::bigint[], $4::text[]) AS k(terminal, seq, d)
			JOIN rows r ON r.store = $1 AND r.terminal = k.terminal COLLATE "C" AND r.seq = k.seq
				AND r.business_date = k.d COLLATE "C"
			WHERE r.business_date = ANY($4::text[])`
		args = append(args, dates)
	}
	res, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("put batch: look up rows held: %w", err)
	}
	defer res.Close()
	out := make(map[rowKey]string, len(rows))
	for res.Next() {
		var k rowKey
		var h string
		if err := res.Scan(&k.terminal, &k.seq, &h); err != nil {
			return nil, fmt.Errorf("put batch: look up rows held: %w", err)
		}
		out[k] = h
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("put batch: look up rows held: %w", err)
	}
	return out, nil
}

// copyRows COPYs rows into their day's partition when they are all of one day, or into
// rows (which routes each to its day's partition).
func copyRows(ctx context.Context, tx pgx.Tx, b *hqwire.Batch, rows []*hqwire.Row, at time.Time) error {
	table := pgx.Identifier{"rows"}
	oneDay := true
	for _, r := range rows[1:] {
		if r.BusinessDate != rows[0].BusinessDate {
			oneDay = false
			break
		}
	}
	if oneDay {
		table = pgx.Identifier{partitionName("rows", rows[0].BusinessDate)}
	}
	src := &rowSource{rows: rows, store: b.Store, batch: b.ID, ms: at.UnixMilli()}
	if _, err := tx.CopyFrom(ctx, table, rowCols, src); err != nil {
		return fmt.Errorf("put batch: copy rows: %w", err)
	}
	return nil
}

// raiseSeqs raises each terminal's highest seq HQ holds to that of rows.
func raiseSeqs(ctx context.Context, tx pgx.Tx, store string, rows []*hqwire.Row) error {
	top := map[string]int64{}
	for _, r := range rows {
		top[r.Terminal] = max(top[r.Terminal], r.Seq)
	}
	terms := make([]string, 0, len(top))
	seqs := make([]int64, 0, len(top))
	for t, s := range top {
		terms, seqs = append(terms, t), append(seqs, s)
	}
	_, err := tx.Exec(ctx, `INSERT INTO terminal_seqs (store, terminal, max_seq)
		SELECT $1, t, s FROM unnest($2::text[], $3::bigint[]) AS k(t, s) ORDER BY t
		ON CONFLICT (store, terminal) DO UPDATE SET max_seq = EXCLUDED.max_seq
		WHERE terminal_seqs.max_seq < EXCLUDED.max_seq`, store, terms, seqs)
	return err
}

// rowSource feeds rows to COPY in rowCols order. It fills one slice of values again for
// each row: pgx encodes a row's values before it asks for the next.
type rowSource struct {
	rows         []*hqwire.Row
	store, batch string
	ms           int64
	i            int
	vals         []any
}

func (s *rowSource) Next() bool { s.i++; return s.i <= len(s.rows) }

func (s *rowSource) Err() error { return nil }

func (s *rowSource) Values() ([]any, error) {
	r := s.rows[s.i-1]
	m, _ := hqstore.Split(r.ByMethod) // checked by hqstore.Check
	var payload []byte                // a sale's or refund's payload stays in the store ledger
	if r.Kind == hqwire.KindDayClose && r.Payload != nil {
		payload = r.Payload
	}
	s.vals = append(s.vals[:0], s.store, r.Terminal, r.Seq, r.Kind, r.BusinessDate, r.FlowNo,
		r.At.UTC().Format(time.RFC3339Nano), r.Hash, int64(r.Amount), m.Cash, m.Card, m.QR, m.Mask, payload,
		s.batch, s.ms)
	return s.vals, nil
}
