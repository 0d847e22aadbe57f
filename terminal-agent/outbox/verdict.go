package outbox

import (
	"context"
	"database/sql"

	"github.com/posgate/posgate/internal/perr"
)

// CodeVerdictPending refuses a payment or refund built on a step of the sale that the store
// may still refuse: its live verdict has not come.
const CodeVerdictPending = "verdict_pending"

// selUndecided lists a sale's events sent live whose verdict has not come: its scans, and
// its completion. The store may still refuse one, which undoes it.
const selUndecided = `SELECT seq FROM events WHERE state = 'pending' AND offline = 0 AND seq IN (
	SELECT scan_seq FROM sale_lines WHERE sale_id = ? AND scan_seq IS NOT NULL
	UNION ALL SELECT seq FROM sales WHERE id = ? AND seq IS NOT NULL) ORDER BY seq`

// Undecided returns the seqs of the sale's events that wait for the store's live verdict.
func (s *Store) Undecided(ctx context.Context, saleID string) ([]int64, error) {
	rows, err := s.readRows(ctx, selUndecided, saleID, saleID)
	if err != nil {
		return nil, err
	}
	return scanSeqs(rows)
}

// UndecidedSteps returns the seqs of sale and refund events that wait for the store's live
// verdict, of any sale: a day close waits for them.
func (s *Store) UndecidedSteps(ctx context.Context) ([]int64, error) {
	rows, err := s.readRows(ctx, `SELECT seq FROM events WHERE state = 'pending' AND offline = 0
		AND kind IN ('sale', 'refund') ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	return scanSeqs(rows)
}

// settled refuses a step built on a step of the sale whose live verdict has not come: a
// payment taken on a line the store then refuses, or a refund of a sale it then refuses,
// could not be undone with it, and the till and the store would hold different sales.
func (t *Tx) settled(saleID string) error {
	rows, err := t.query(selUndecided, saleID, saleID)
	if err != nil {
		return err
	}
	seqs, err := scanSeqs(rows)
	if err != nil {
		return err
	}
	if len(seqs) > 0 {
		return perr.New(perr.Refused, CodeVerdictPending,
			"a step of sale %q (event %d) still waits for the store's verdict; try again in a moment", saleID, seqs[0])
	}
	return nil
}

func scanSeqs(rows *sql.Rows) ([]int64, error) {
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, err
		}
		seqs = append(seqs, seq)
	}
	return seqs, rows.Err()
}
