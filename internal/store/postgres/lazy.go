package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tideml/tide/internal/store"
)

// lazyTx is a transaction that begins with its first statement: BEGIN is
// sent with that statement, in one round trip (a pgx batch), not in one of
// its own. Most of tide's transactions are a few statements, so this saves
// about one round trip in five. Statements whose answer nothing waits for
// (a savepoint's SAVEPOINT, RELEASE and ROLLBACK TO, and writes that
// return nothing, as a node's release) are held likewise and go with the
// next statement, or with COMMIT: a batch of submissions, each in its
// savepoint, costs no round trip for them.
type lazyTx struct {
	s     *Store
	begin string // BEGIN ... with the transaction's options
	conn  *pgx.Conn
	// held are the statements sent before the next.
	held []held
}

// held is a statement sent with the next one.
type held struct {
	sql   string
	args  []any
	write bool   // a write's (not a savepoint's)
	what  string // a write's resource, for its error ("putting node n1")
}

var (
	beginWrite = "BEGIN ISOLATION LEVEL SERIALIZABLE"
	beginRead  = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
)

// hold queues a savepoint's statement q to be sent before the
// transaction's next statement.
func (l *lazyTx) hold(q string) { l.held = append(l.held, held{sql: q}) }

// holdWrite queues a write, which returns nothing, to be sent before the
// transaction's next statement: its error, named by what ("putting node
// n1"), is that statement's (or the commit's). Savepoint sends it before
// its RELEASE, so that it is said to the savepoint that made it.
func (l *lazyTx) holdWrite(what, q string, args ...any) {
	l.held = append(l.held, held{sql: q, args: args, write: true, what: what})
}

// holdsWrites reports whether a write is held.
func (l *lazyTx) holdsWrites() bool {
	for _, h := range l.held {
		if h.write {
			return true
		}
	}
	return false
}

// dropWrites forgets the held writes: those of a savepoint rolled back,
// which would be undone (Savepoint sends the held writes at each of its
// statements, so those held are the savepoint's).
func (l *lazyTx) dropWrites() {
	l.held = slices.DeleteFunc(l.held, func(h held) bool { return h.write })
}

// flush sends the held statements now.
func (l *lazyTx) flush(ctx context.Context) error {
	if len(l.held) == 0 {
		return nil
	}
	br, err := l.send(ctx, &pgx.Batch{})
	if err != nil {
		return err
	}
	return br.Close()
}

// healthyAfterHeld reports whether the transaction takes statements once
// the held ones ran: no statement failed, or one did in a savepoint that a
// held ROLLBACK TO undoes (a failed statement makes PostgreSQL refuse
// every other until then).
func (l *lazyTx) healthyAfterHeld() bool {
	if l.conn == nil || l.conn.PgConn().TxStatus() != 'E' {
		return true
	}
	for _, h := range l.held {
		if strings.HasPrefix(h.sql, "ROLLBACK") {
			return true
		}
	}
	return false
}

// send sends BEGIN, the held statements and the batch b that follows them
// (on the open transaction when it has begun) and returns the results of
// b; an error of a held statement is returned instead. Idle
// connections may have died with a database restart: when the first send
// finds its connection closed, nothing of the transaction was committed,
// so it is sent again on the next one, and store.ErrUnavailable is
// reported when none works.
func (l *lazyTx) send(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	if l.begun() {
		if n := l.savepointsFirst(); n > 0 && l.conn.PgConn().TxStatus() == 'E' {
			// A statement failed: PostgreSQL refuses to prepare the
			// statements that follow until the held ROLLBACK TO has
			// run (pgx prepares a batch's new statements before it
			// runs any), so the held savepoint statements go first,
			// alone, in one simple query (a failed savepoint's cost).
			qs := make([]string, n)
			for i, h := range l.held[:n] {
				qs[i] = h.sql
			}
			l.held = l.held[n:]
			if _, err := l.conn.Exec(ctx, strings.Join(qs, "; ")); err != nil {
				return nil, fmt.Errorf("%s: %w", strings.Join(qs, "; "), err)
			}
		}
		if len(l.held) == 0 {
			return l.conn.SendBatch(ctx, b), nil
		}
		br := l.conn.SendBatch(ctx, l.prefixed(nil, b))
		if err := l.readHeld(br); err != nil {
			return nil, err
		}
		return br, nil
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
		br := l.conn.SendBatch(ctx, l.prefixed([]string{l.begin}, b))
		if _, err = br.Exec(); err == nil {
			if err := l.readHeld(br); err != nil {
				return nil, err
			}
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

// savepointsFirst counts the savepoint statements held before any write.
func (l *lazyTx) savepointsFirst() int {
	n := 0
	for n < len(l.held) && !l.held[n].write {
		n++
	}
	return n
}

// prefixed is a new batch of first, the held statements and b's.
func (l *lazyTx) prefixed(first []string, b *pgx.Batch) *pgx.Batch {
	out := &pgx.Batch{}
	for _, q := range first {
		out.Queue(q)
	}
	for _, h := range l.held {
		out.Queue(h.sql, h.args...)
	}
	for _, q := range b.QueuedQueries {
		// New queued queries each time: pgx keeps what it prepared
		// on a connection in them. (The store queues no callbacks.)
		out.Queue(q.SQL, q.Arguments...)
	}
	return out
}

// readHeld reads the results of the held statements sent in br, and
// closes br when one failed.
func (l *lazyTx) readHeld(br pgx.BatchResults) error {
	hs := l.held
	l.held = nil
	for _, h := range hs {
		if _, err := br.Exec(); err != nil {
			if h.write {
				return closeBatch(br, fmt.Errorf("%s: %w", h.what, err))
			}
			return closeBatch(br, fmt.Errorf("%s: %w", h.sql, err))
		}
	}
	return nil
}

// first sends a statement that must go with BEGIN or held statements.
func (l *lazyTx) first(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return l.send(ctx, b)
}

// direct reports whether a statement can go alone: the transaction has
// begun and holds nothing.
func (l *lazyTx) direct() bool { return l.begun() && len(l.held) == 0 }

// Exec runs one statement.
func (l *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if l.direct() {
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
	if l.direct() {
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
	if l.direct() {
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

// commit commits what the transaction wrote, held writes included
// (nothing when no statement began it and no write is held: then the held
// statements are savepoints of nothing). A transaction that failed
// commits nothing: PostgreSQL answers COMMIT with ROLLBACK.
func (l *lazyTx) commit(ctx context.Context) error {
	if !l.begun() && !l.holdsWrites() {
		l.held = nil
		return nil
	}
	tag, err := l.Exec(ctx, "COMMIT")
	if err == nil && strings.EqualFold(tag.String(), "ROLLBACK") {
		return pgx.ErrTxCommitRollback
	}
	return err
}

func (l *lazyTx) rollback(ctx context.Context) error {
	l.held = nil
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
