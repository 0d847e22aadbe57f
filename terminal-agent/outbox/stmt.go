package outbox

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache keeps statements prepared: mattn/go-sqlite3 otherwise prepares every statement
// again on every call, which was a fifth of the CPU of a durable enqueue.
//
// The writer pool has one connection, and a transaction holds it: preparing on the pool from
// inside a transaction would wait for that connection forever. So a statement first met
// inside a transaction is prepared on the transaction for that one use and remembered, and
// warm prepares the remembered ones on the pool once the transaction is over.
type stmtCache struct {
	db      *sql.DB
	mu      sync.Mutex
	m       map[string]*sql.Stmt
	pending map[string]bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: map[string]*sql.Stmt{}, pending: map[string]bool{}}
}

// get returns the cached statement, preparing it on the pool if prepare is true; otherwise a
// miss returns nil and is remembered for warm.
func (c *stmtCache) get(ctx context.Context, query string, prepare bool) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	if !prepare {
		c.pending[query] = true
		return nil, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.m[query] = st
	return st, nil
}

// warm prepares the statements remembered by get. Call it with no transaction open. It
// does not hold the cache's lock while it prepares: preparing waits for the writer
// connection, which a transaction on another goroutine may hold while it needs the cache.
func (c *stmtCache) warm(ctx context.Context) {
	c.mu.Lock()
	var todo []string
	for q := range c.pending {
		todo = append(todo, q)
		delete(c.pending, q)
	}
	c.mu.Unlock()
	for _, q := range todo {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if _, ok := c.m[q]; ok || c.m == nil {
			st.Close()
		} else {
			c.m[q] = st
		}
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}

// txStmts runs cached statements inside one write transaction. The writer pool has a
// single connection, so tx.StmtContext reuses the statement prepared on it.
type txStmts struct {
	ctx   context.Context
	tx    *sql.Tx
	cache *stmtCache
}

func (t txStmts) stmt(query string) (*sql.Stmt, error) {
	st, err := t.cache.get(t.ctx, query, false)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return t.tx.PrepareContext(t.ctx, query) // closed with the transaction
	}
	return t.tx.StmtContext(t.ctx, st), nil
}

func (t txStmts) exec(query string, args ...any) (sql.Result, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(t.ctx, args...)
}

func (t txStmts) queryRow(query string, args ...any) *sql.Row {
	st, err := t.stmt(query)
	if err != nil {
		return t.tx.QueryRowContext(t.ctx, query, args...) // reports the same error on Scan
	}
	return st.QueryRowContext(t.ctx, args...)
}

func (t txStmts) query(query string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(t.ctx, args...)
}

// read runs a cached statement on the reader pool.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := s.rstmts.get(ctx, query, true)
	if err != nil {
		return s.db.R.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (s *Store) readRows(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.rstmts.get(ctx, query, true)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}
