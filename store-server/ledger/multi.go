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
