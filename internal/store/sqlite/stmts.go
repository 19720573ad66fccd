package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// maxStmts bounds how many statements a database keeps prepared. The store
// uses a few dozen texts; filters (lists of statuses, limits) add some.
const maxStmts = 512

// stmts keeps the statements one database has prepared, by text, so that a
// query is parsed once per connection instead of on every call: preparing
// each statement anew was 12 % of the server's CPU while it dispatched
// jobs. A statement is prepared after the transaction that first missed it,
// because the writer has one connection, which that transaction holds.
type stmts struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
	// ran counts the statements run on this database's transactions,
	// their beginnings and ends included (Store.Statements).
	ran atomic.Int64
}

func newStmts(db *sql.DB) *stmts { return &stmts{db: db, m: map[string]*sql.Stmt{}} }

// get returns the prepared statement for q, or nil when there is none yet.
func (c *stmts) get(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[q]
}

// prepare prepares the texts a transaction missed. It runs once that
// transaction has ended; a text that fails to prepare stays uncached (its
// callers see the error when they run it).
func (c *stmts) prepare(ctx context.Context, qs []string) {
	for _, q := range qs {
		c.mu.Lock()
		_, ok := c.m[q]
		full := len(c.m) >= maxStmts
		c.mu.Unlock()
		if ok || full {
			continue
		}
		st, err := c.db.PrepareContext(context.WithoutCancel(ctx), q)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if _, ok := c.m[q]; ok {
			st.Close()
		} else {
			c.m[q] = st
		}
		c.mu.Unlock()
	}
}

func (c *stmts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.m {
		st.Close()
		delete(c.m, q)
	}
}

// stmt returns q prepared on this transaction's connection, or nil (the
// caller runs q unprepared) when the database has not prepared it yet.
func (x *tx) stmt(ctx context.Context, q string) *sql.Stmt {
	if x.stmts == nil {
		return nil
	}
	x.stmts.ran.Add(1)
	st := x.stmts.get(q)
	if st == nil {
		x.missed = append(x.missed, q)
		return nil
	}
	return x.tx.StmtContext(ctx, st)
}

func (x *tx) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := x.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return x.tx.QueryContext(ctx, q, args...)
}

func (x *tx) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if st := x.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return x.tx.QueryRowContext(ctx, q, args...)
}

func (x *tx) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := x.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return x.tx.ExecContext(ctx, q, args...)
}
