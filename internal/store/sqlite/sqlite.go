// Package sqlite is tide's embedded store: one SQLite file, pure Go
// (modernc.org/sqlite), nothing to install. It runs in WAL mode with a single
// writer connection, so Update transactions are serialized inside the
// process and never conflict, and a pool of read-only connections for View,
// which read a consistent snapshot while a write is in progress.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/internal/store"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrations embed.FS

// busyTimeout is how long a connection waits for a lock held by another
// process (a second tide server on the same file, or a backup tool) before
// failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// Store is a store.Store on one SQLite file.
type Store struct {
	log *slog.Logger
	// writer has exactly one connection, so at most one Update runs at a
	// time and its transaction can begin IMMEDIATE without ever meeting a
	// competing writer from this process.
	writer *sql.DB
	// readers are query_only connections for View.
	readers *sql.DB
	// writerStmts and readerStmts are the statements each has prepared.
	writerStmts, readerStmts *stmts

	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// Open opens (creating it if needed) the database at path and applies the
// migrations it lacks.
func Open(ctx context.Context, path string, log *slog.Logger) (*Store, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite database path %q: must not contain '?' or '#'", path)
	}
	// The database holds secrets and the key that signs node tokens: only
	// its owner may read it (SQLite gives its -wal and -shm files the
	// database file's mode).
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600); err == nil {
		f.Close()
		_ = os.Chmod(path, 0o600)
	}
	common := url.Values{}
	common.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	common.Add("_pragma", "foreign_keys(1)")
	// NORMAL is the documented pairing with WAL: a commit survives a crash
	// of tide; only a power loss can lose the last transactions, never
	// corrupt the file.
	common.Add("_pragma", "synchronous(NORMAL)")

	w := url.Values{}
	for k, v := range common {
		w[k] = append([]string(nil), v...)
	}
	w.Add("_pragma", "journal_mode(WAL)")
	w.Set("_txlock", "immediate")
	writer, err := sql.Open("sqlite", "file:"+path+"?"+w.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening sqlite database %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxIdleTime(0)
	writer.SetConnMaxLifetime(0)
	// The writer connects first: it switches the file to WAL, which readers
	// need in order to read while a write is in progress. Switching needs
	// an exclusive lock, for which SQLite may answer SQLITE_BUSY at once
	// (without its busy handler) while another process opens the same file
	// (seen in the ConcurrentOpen conformance test): try again until the
	// busy timeout.
	if err := pingUntilFree(ctx, writer); err != nil {
		writer.Close()
		return nil, fmt.Errorf("opening sqlite database %s: %w", path, err)
	}

	r := common
	r.Add("_pragma", "query_only(1)")
	readers, err := sql.Open("sqlite", "file:"+path+"?"+r.Encode())
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("opening sqlite database %s: %w", path, err)
	}
	n := max(4, runtime.NumCPU())
	readers.SetMaxOpenConns(n)
	readers.SetMaxIdleConns(n)

	s := &Store{log: log, writer: writer, readers: readers, writerStmts: newStmts(writer), readerStmts: newStmts(readers)}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("migrating sqlite database %s: %w", path, err)
	}
	return s, nil
}

// pingUntilFree connects db, retrying while the file is locked, for at
// most busyTimeout.
func pingUntilFree(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(busyTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := db.PingContext(ctx)
		if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Update runs fn in a write transaction. Writes are serialized, so fn runs
// exactly once. fn must not call Update itself (it would wait for its own
// connection forever).
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	t, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning write transaction: %w", err)
	}
	// A panic in fn must not leave the only writer connection inside a
	// transaction: every later Update would wait for it forever.
	defer func() {
		if p := recover(); p != nil {
			t.Rollback()
			panic(p)
		}
	}()
	x := &tx{tx: t, stmts: s.writerStmts}
	s.writerStmts.ran.Add(2) // BEGIN, and COMMIT or ROLLBACK
	if err := fn(x); err != nil {
		if rerr := t.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			s.log.ErrorContext(ctx, "rolling back write transaction", slog.Any("err", rerr))
		}
		s.writerStmts.prepare(ctx, x.missed)
		return err
	}
	if err := x.saveRevision(ctx); err != nil {
		t.Rollback()
		s.writerStmts.prepare(ctx, x.missed)
		return err
	}
	if err := t.Commit(); err != nil {
		return fmt.Errorf("committing write transaction: %w", err)
	}
	s.writerStmts.prepare(ctx, x.missed)
	for _, f := range x.after {
		f()
	}
	return nil
}

// View runs fn in a read-only transaction on a snapshot of the database.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	t, err := s.readers.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("beginning read transaction: %w", err)
	}
	// A read transaction has nothing to commit; rolling back ends it
	// (the deferred call when fn panics).
	defer t.Rollback()
	x := &tx{tx: t, stmts: s.readerStmts}
	s.readerStmts.ran.Add(2) // BEGIN, ROLLBACK
	err = fn(x)
	t.Rollback()
	s.readerStmts.prepare(ctx, x.missed)
	return err
}

// Statements counts the SQL statements the store's transactions have run
// since it was opened, each transaction's beginning and end included: what
// a request costs the database, which tests hold down.
func (s *Store) Statements() int64 { return s.writerStmts.ran.Load() + s.readerStmts.ran.Load() }

// Close closes the database. Calling it again does nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.readerStmts.close()
		s.writerStmts.close()
		s.closeErr = errors.Join(s.readers.Close(), s.writer.Close())
	})
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

// migrate applies the missing migrations in one IMMEDIATE transaction, so a
// second process opening the same file waits and then finds them applied.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	t, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer t.Rollback()
	if _, err := t.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL
	) STRICT`); err != nil {
		return err
	}
	applied := map[int]bool{}
	latest := 0
	rows, err := t.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v] = true
		latest = max(latest, v)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if known := ms[len(ms)-1].version; latest > known {
		return fmt.Errorf("database schema version %d is newer than this tide knows (%d); upgrade tide", latest, known)
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		if _, err := t.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("applying %s: %w", m.name, err)
		}
		if _, err := t.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, formatTime(time.Now())); err != nil {
			return fmt.Errorf("recording %s: %w", m.name, err)
		}
		s.log.InfoContext(ctx, "applied store migration", slog.Int("version", m.version), slog.String("name", m.name))
	}
	return t.Commit()
}
