package sqlitedb

import (
	"context"
	"database/sql"
)

// Querier is what Each queries: a *sql.DB, *sql.Tx or *sql.Conn.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Each runs query on q and calls fn for every row.
func Each(ctx context.Context, q Querier, query string, args []any, fn func(*sql.Rows) error) error {
	return EachRow(q.QueryContext(ctx, query, args...))(fn)
}

// EachRow takes a query's answer and returns what calls fn for each of its rows, then closes
// them: the query's error, fn's, or the rows'.
func EachRow(rows *sql.Rows, err error) func(fn func(*sql.Rows) error) error {
	return func(fn func(*sql.Rows) error) error {
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := fn(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
}
