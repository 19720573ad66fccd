// Package postgres is tide's production store: PostgreSQL through pgx, so
// several server replicas share one state. Update runs SERIALIZABLE
// transactions and retries them on serialization failures and deadlocks, so
// replicas writing at once behave as if they wrote one after the other.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tideml/tide/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the pg_advisory_xact_lock key that serializes migrations
// of replicas starting together ("tide" in ASCII).
const migrationLock = 0x74696465

// maxConns caps the connections of one Store.
const maxConns = 10

// maxAttempts caps how often Update runs fn when transactions keep
// conflicting; each retry waits a little longer, with jitter.
const maxAttempts = 50

// Store is a store.Store on a PostgreSQL database.
type Store struct {
	log  *slog.Logger
	pool *pool
	// writer lets one Update of this replica run at a time, as SQLite's
	// one writer does. Serializable transactions of the same replica
	// otherwise abort each other: PostgreSQL locks the index pages they
	// read, and an agent's report, a turn's placements and a batch of
	// submissions touch the same few pages of nodes and jobs (in a
	// 2,000-job dispatch run, 0.4 retries per job, some transactions 20
	// times with growing waits). Replicas still run theirs concurrently,
	// and conflicts between them are retried.
	writer chan struct{}

	closeOnce sync.Once
	closeErr  error
	// statements counts what the connections send (Statements).
	statements *counter
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (postgres://user@host:port/db?...)
// and applies the migrations it lacks.
func Open(ctx context.Context, url string, log *slog.Logger) (*Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	c := &counter{}
	cfg.Tracer = c
	s := &Store{log: log, pool: newPool(cfg, maxConns), writer: make(chan struct{}, 1), statements: c}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("migrating postgres database %s on %s: %w", cfg.Database, cfg.Host, err)
	}
	return s, nil
}

// Update runs fn in a SERIALIZABLE transaction, running it again when
// PostgreSQL reports a serialization failure (40001) or a deadlock (40P01).
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.run(ctx, beginWrite, fn)
		if err == nil || !retryable(err) || attempt == maxAttempts {
			return err
		}
		s.log.DebugContext(ctx, "retrying store transaction", slog.Int("attempt", attempt), slog.Any("err", err))
		// Jittered exponential backoff, so conflicting replicas spread out.
		d := min(time.Millisecond<<min(attempt, 7), 100*time.Millisecond)
		d = d/2 + rand.N(d/2+1)
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("retrying a conflicting transaction: %w", ctx.Err())
		case <-timer.C:
		}
	}
}

// View runs fn in a read-only REPEATABLE READ transaction: one consistent
// snapshot, and no serialization failures to retry.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	return s.run(ctx, beginRead, fn)
}

// run runs fn in a transaction and, when it committed a write, the
// functions fn queued with OnCommit.
func (s *Store) run(ctx context.Context, begin string, fn func(store.Tx) error) error {
	x, err := s.runTx(ctx, begin, fn)
	if err != nil {
		return err
	}
	if begin == beginWrite {
		for _, f := range x.after {
			f()
		}
	}
	return nil
}

// runTx runs fn in a transaction, a write one holding the writer.
func (s *Store) runTx(ctx context.Context, begin string, fn func(store.Tx) error) (*tx, error) {
	if begin == beginWrite {
		select {
		case s.writer <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for this replica's other write transaction: %w", ctx.Err())
		}
		defer func() { <-s.writer }()
	}
	l := &lazyTx{s: s, begin: begin}
	defer l.release()
	x := &tx{tx: l}
	if err := fn(x); err != nil {
		// Roll back even when ctx is canceled, so the connection is reusable.
		if rerr := l.rollback(context.WithoutCancel(ctx)); rerr != nil {
			s.log.WarnContext(ctx, "rolling back transaction", slog.Any("err", rerr))
		}
		return nil, lostConn(l.conn, err)
	}
	if err := l.commit(ctx); err != nil {
		return nil, lostConn(l.conn, fmt.Errorf("committing transaction: %w", err))
	}
	return x, nil
}

// lostConn marks err as store.ErrUnavailable when the connection broke
// under it, so that callers answer "retry later" rather than "bug".
func lostConn(conn *pgx.Conn, err error) error {
	if conn != nil && conn.IsClosed() && !errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// retryable reports whether err is a conflict with another transaction.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Close closes the connections. Calling it again does nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.pool.close() })
	return s.closeErr
}

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded migrations. Their names start with the
// version number: 0001_init.sql.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a version number, as in 0001_init.sql", e.Name())
		}
		b, err := migrations.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s have the same version", out[i-1].name, out[i].name)
		}
	}
	return out, nil
}

// migrate applies the missing migrations in one transaction that first
// takes an advisory lock, so replicas starting together apply them once:
// the second waits for the lock, then finds them recorded.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	conn, err := s.pool.acquire(ctx)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer s.pool.release(conn)
	// READ COMMITTED (the default): statements after the lock see what the
	// replica that held it committed.
	t, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer t.Rollback(context.WithoutCancel(ctx))
	if _, err := t.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	if _, err := t.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return err
	}
	rows, err := t.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	applied := map[int]bool{}
	latest := 0
	for _, v := range versions {
		applied[int(v)] = true
		latest = max(latest, int(v))
	}
	if known := ms[len(ms)-1].version; latest > known {
		return fmt.Errorf("database schema version %d is newer than this tide knows (%d); upgrade tide", latest, known)
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		// No arguments: pgx sends the file with the simple protocol, which
		// runs several statements.
		if _, err := t.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("applying %s: %w", m.name, err)
		}
		if _, err := t.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return fmt.Errorf("recording %s: %w", m.name, err)
		}
		s.log.InfoContext(ctx, "applied store migration", slog.Int("version", m.version), slog.String("name", m.name))
	}
	return t.Commit(ctx)
}
