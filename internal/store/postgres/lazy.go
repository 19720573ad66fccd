package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tideml/tide/internal/store"
)

// lazyTx is a transaction that begins with its first statement: BEGIN is
// sent with that statement, in one round trip (a pgx batch), not in one of
// its own. Most of tide's transactions are a few statements, so this saves
// about one round trip in five.
type lazyTx struct {
	s     *Store
	begin string // BEGIN ... with the transaction's options
	conn  *pgx.Conn
}

var (
	beginWrite = "BEGIN ISOLATION LEVEL SERIALIZABLE"
	beginRead  = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
)

// send sends BEGIN and the batch b that follows it (on the open
// transaction when it has begun) and returns the results of b. Idle
// connections may have died with a database restart: when the first send
// finds its connection closed, nothing of the transaction was committed,
// so it is sent again on the next one, and store.ErrUnavailable is
// reported when none works.
func (l *lazyTx) send(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	if l.conn != nil && l.conn.PgConn().TxStatus() != 'I' {
		return l.conn.SendBatch(ctx, b), nil
	}
	var err error
	for range maxConns + 1 {
		if l.conn == nil {
			if l.conn, err = l.s.pool.acquire(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				return nil, fmt.Errorf("connecting to postgres: %w: %w", store.ErrUnavailable, err)
			}
		}
		withBegin := &pgx.Batch{}
		withBegin.Queue(l.begin)
		for _, q := range b.QueuedQueries {
			// New queued queries each time: pgx keeps what it prepared
			// on a connection in them. (The store queues no callbacks.)
			withBegin.Queue(q.SQL, q.Arguments...)
		}
		br := l.conn.SendBatch(ctx, withBegin)
		if _, err = br.Exec(); err == nil {
			return br, nil
		}
		_ = br.Close()
		if ctx.Err() != nil || !l.conn.IsClosed() {
			return nil, fmt.Errorf("beginning transaction: %w", err)
		}
		l.s.pool.release(l.conn)
		l.conn = nil
	}
	return nil, fmt.Errorf("beginning transaction: %w: %w", store.ErrUnavailable, err)
}

// first sends the statement that begins the transaction, with BEGIN.
func (l *lazyTx) first(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return l.send(ctx, b)
}

// Exec runs one statement.
func (l *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if l.begun() {
		return l.conn.Exec(ctx, sql, args...)
	}
	br, err := l.first(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	return tag, closeBatch(br, err)
}

// QueryRow runs one statement that returns at most a row.
func (l *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if l.begun() {
		return l.conn.QueryRow(ctx, sql, args...)
	}
	br, err := l.first(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br.QueryRow(), br}
}

// Query runs one statement that returns rows.
func (l *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if l.begun() {
		return l.conn.Query(ctx, sql, args...)
	}
	br, err := l.first(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, closeBatch(br, err)
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// SendBatch runs the statements of b.
func (l *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br, err := l.send(ctx, b)
	if err != nil {
		return errBatch{err: err}
	}
	return br
}

func (l *lazyTx) begun() bool { return l.conn != nil && l.conn.PgConn().TxStatus() != 'I' }

// commit commits what the transaction wrote (nothing when no statement
// began it). A transaction that failed commits nothing: PostgreSQL
// answers COMMIT with ROLLBACK.
func (l *lazyTx) commit(ctx context.Context) error {
	if !l.begun() {
		return nil
	}
	tag, err := l.conn.Exec(ctx, "COMMIT")
	if err == nil && strings.EqualFold(tag.String(), "ROLLBACK") {
		return pgx.ErrTxCommitRollback
	}
	return err
}

func (l *lazyTx) rollback(ctx context.Context) error {
	if !l.begun() {
		return nil
	}
	_, err := l.conn.Exec(ctx, "ROLLBACK")
	return err
}

// release gives the connection back to the pool (which closes one left
// in a transaction).
func (l *lazyTx) release() {
	if l.conn != nil {
		l.s.pool.release(l.conn)
		l.conn = nil
	}
}

// batchRow is the row of a statement sent with BEGIN: scanning it reads
// the rest of the batch.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	return closeBatch(r.br, r.row.Scan(dest...))
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// batchRows are the rows of a statement sent with BEGIN: closing them
// reads the rest of the batch.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.err = r.br.Close()
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// errBatch is a batch that could not be sent (its other methods, which
// the store does not call, are the nil interface's).
type errBatch struct {
	pgx.BatchResults
	err error
}

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b errBatch) Close() error                     { return b.err }

// closeBatch closes br after a statement of it returned err, and returns
// err, or Close's error if the statement had none: Close returns again the
// error a statement returned, which joined would be said twice.
func closeBatch(br pgx.BatchResults, err error) error {
	if cerr := br.Close(); err == nil {
		return cerr
	}
	return err
}
