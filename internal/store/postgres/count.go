package postgres

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// counter is a pgx tracer that counts the statements sent, each of a
// batch (BEGIN sent with a transaction's first statement) included, and
// the round trips: a statement alone or a batch.
type counter struct{ n, trips atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	c.trips.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) { c.n.Add(1) }

func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Statements counts the SQL statements the store has sent since it was
// opened, transactions' BEGIN and COMMIT included: what a request costs
// the database, which tests hold down.
func (s *Store) Statements() int64 { return s.statements.n.Load() }

// RoundTrips counts the times the store has sent statements and waited for
// their answers (a batch of statements is one): within a write
// transaction, what this replica's other writes wait for.
func (s *Store) RoundTrips() int64 { return s.statements.trips.Load() }
