package ledger

import (
	"strings"
	"sync"
)

// multiRows is the most rows one statement of a multi covers.
const multiRows = 64

// multi is a statement over many rows: a multi-row INSERT ("… VALUES (?, ?), (?, ?) …") or a
// query with an IN list ("… IN (?, ?, …)"). n rows take ⌈n/64⌉ statements, one shape per
// row count, each built and prepared on the writer connection the first time it is used.
type multi struct {
	head, row, tail string
	width           int // parameters per row

	mu     sync.Mutex
	shapes [multiRows + 1]string // by row count
}

// newMulti returns the multi head row, row, … tail.
func newMulti(head, row, tail string) *multi {
	return &multi{head: head, row: row, tail: tail, width: strings.Count(row, "?")}
}

// newInsert returns a multi-row INSERT into table of cols, followed by tail.
func newInsert(table, cols, tail string) *multi {
	row := "(?" + strings.Repeat(", ?", strings.Count(cols, ",")) + ")"
	return newMulti("INSERT INTO "+table+" ("+cols+") VALUES ", row, tail)
}

// shape returns the statement for rows rows.
func (m *multi) shape(rows int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shapes[rows] == "" {
		var b strings.Builder
		b.WriteString(m.head)
		for j := range rows {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(m.row)
		}
		b.WriteString(m.tail)
		m.shapes[rows] = b.String()
	}
	return m.shapes[rows]
}

// chunks calls fn for each statement that covers rows [from, to) of n.
func (m *multi) chunks(n int, fn func(query string, from, to int) error) error {
	for from := 0; from < n; {
		to := min(n, from+multiRows)
		if err := fn(m.shape(to-from), from, to); err != nil {
			return err
		}
		from = to
	}
	return nil
}

// The statements of the staged commit. The column lists are the ones commitOne writes.
var (
	insEvents = newInsert("events", `terminal, seq, kind, hash, at, business_date, offline, status, final,
		code, message, flow_no, oversold, received_ms, payload`, "")
	insSales       = newInsert("sales", "terminal, seq, sale_id, at, business_date, flow_no, total, change, offline, oversold", "")
	insSaleLines   = newInsert("sale_lines", "terminal, seq, n, line, sku, name, qty, unit_price, amount", "")
	insPayments    = newInsert("payments", "business_date, flow_no, n, terminal, seq, method, amount, reference", "")
	insRefunds     = newInsert("refunds", "terminal, seq, refund_id, sale_id, sale_seq, at, business_date, flow_no, amount, method, reference, restock", "")
	insRefundLines = newInsert("refund_lines", "terminal, seq, n, line, sku, qty, amount", "")
	insMoves       = newInsert("stock_moves", "sku, delta, reason, ref, at", "")
	insOversells   = newInsert("oversells", "terminal, seq, sku, qty_short, at, business_date", "")
	insOutbox      = newInsert("hq_outbox", "kind, terminal, seq, business_date, flow_no", "")
	// Σ deltas per SKU, as commitOne's one upsert per move adds them up.
	upsStock = newInsert("stock", "sku, qty", " ON CONFLICT (sku) DO UPDATE SET qty = qty + excluded.qty")

	selEvents = newMulti(`SELECT terminal, seq, kind, hash, status, final, code, message, coalesce(flow_no, 0),
		business_date, oversold FROM events WHERE (terminal, seq) IN (VALUES `, "(?, ?)", ")")
	selStock = newMulti(`SELECT sku, qty FROM stock WHERE sku IN (`, "?", ")")
	// flow_no IN (…) and flow_no = ? imply flow_no IS NOT NULL: SQLite then seeks in the
	// partial index events_flow (spelled out, the term turned the seeks into a range scan).
	selFlows = newMulti(`SELECT flow_no FROM events WHERE business_date = ? AND flow_no IN (`, "?", ")")
)

// Statements both ways of committing run one row at a time (rare rows: replaced live
// refusals, parked events, day closes).
const (
	deleteNonFinal = `DELETE FROM events WHERE terminal = ? AND seq = ? AND final = 0`
	// insParked parks a content under its key, once per hash (the arguments: terminal, seq,
	// hash, kind, code, message, payload, at, parked_ms, business_date). Its sku, its
	// identity at HQ, is '' for the first content parked under the key and its hash for
	// each later one.
	insParked = `INSERT INTO parked (terminal, seq, hash, sku, kind, code, message, payload, at, parked_ms,
		business_date) VALUES (?1, ?2, ?3,
		CASE WHEN EXISTS (SELECT 1 FROM parked WHERE terminal = ?1 AND seq = ?2) THEN ?3 ELSE '' END,
		?4, ?5, ?6, ?7, ?8, ?9, ?10)`
	// upsertParked parks a final rejection; the same content parked again takes its new
	// verdict.
	upsertParked = insParked + ` ON CONFLICT (terminal, seq, hash) DO UPDATE SET kind = excluded.kind,
		code = excluded.code, message = excluded.message, payload = excluded.payload, at = excluded.at,
		parked_ms = excluded.parked_ms, business_date = excluded.business_date`
	// parkConflict parks a conflict's content unless that content is parked already:
	// redelivered, it changes nothing (no exception change for HQ). Each other content of
	// the key is parked beside the ones before (a key parked as a rejection keeps it too):
	// the till kept every one.
	parkConflict   = insParked + ` ON CONFLICT (terminal, seq, hash) DO NOTHING`
	upsertDayClose = `INSERT INTO day_closes (terminal, business_date, seq, payload) VALUES (?, ?, ?, ?)
		ON CONFLICT (terminal, business_date) DO UPDATE SET seq = excluded.seq, payload = excluded.payload
		WHERE excluded.seq > day_closes.seq`
)

// selMaxFlow reads a business date's highest flow number; selFlowTaken whether one is taken.
const (
	selMaxFlow   = `SELECT coalesce(max(flow_no), 0) FROM events WHERE business_date = ? AND flow_no IS NOT NULL`
	selFlowTaken = `SELECT count(*) FROM events WHERE business_date = ? AND flow_no = ?`
)
