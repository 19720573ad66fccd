package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// tx implements store.Tx on one database/sql transaction.
type tx struct {
	tx    *sql.Tx
	after []func()
	// stmts are the database's prepared statements; missed the texts
	// this transaction ran unprepared, to prepare once it has ended.
	stmts  *stmts
	missed []string
	// rev is the last revision this transaction took (0: none yet) and
	// saved the one the revision row holds: the first is taken from the
	// row, the others counted here and the row set to the last before
	// the commit (saveRevision), one statement per transaction instead
	// of one per write. SQLite has one writer, so no other transaction
	// takes one meanwhile.
	rev, saved int64
}

// OnCommit queues fn to run after Update commits.
func (t *tx) OnCommit(fn func()) { t.after = append(t.after, fn) }

var _ store.Tx = (*tx)(nil)

// Savepoint implements store.Tx.
func (t *tx) Savepoint(ctx context.Context, fn func() error) error {
	return store.InSavepoint(func(q string) error {
		_, err := t.exec(ctx, q)
		return err
	}, &t.after, fn)
}

// timeLayout has a fixed width so that stored times sort as text. Times are
// kept to the microsecond, the precision PostgreSQL has, so both backends
// give back the same value.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Truncate(time.Microsecond).Format(timeLayout) }

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	return t.UTC(), err
}

// nextRevision returns a new database-wide revision number, used as etag
// and as a job's creation order.
func (x *tx) nextRevision(ctx context.Context) (int64, error) {
	if x.rev > 0 {
		x.rev++
		return x.rev, nil
	}
	var v int64
	err := x.queryRow(ctx, `UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("taking a revision: %w", err)
	}
	x.rev, x.saved = v, v
	return v, nil
}

// saveRevision stores the last revision the transaction took, before it
// commits. (A savepoint rolled back may have undone the row's first
// update; the revisions it took are not given again, and none of its
// writes is left.)
func (x *tx) saveRevision(ctx context.Context) error {
	if x.rev == x.saved {
		return nil
	}
	if _, err := x.exec(ctx, `UPDATE revision SET value = ? WHERE id = 1`, x.rev); err != nil {
		return fmt.Errorf("saving the revision: %w", err)
	}
	x.saved = x.rev
	return nil
}

// checkEtag compares the stored etag (found reports whether a row exists)
// with ifMatch, per the contract of the Put methods.
func checkEtag(kind, name string, found bool, stored int64, ifMatch string) error {
	if ifMatch == "" {
		return nil
	}
	if !found {
		return store.NotFound(kind, name)
	}
	if strconv.FormatInt(stored, 10) != ifMatch {
		return fmt.Errorf("%s %q: %w (stored %d, given %s); read it again and retry", kind, name, store.ErrPrecondition, stored, ifMatch)
	}
	return nil
}

func (x *tx) requireWorkspace(ctx context.Context, name string) error {
	var one int
	err := x.queryRow(ctx, `SELECT 1 FROM workspaces WHERE name = ?`, name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return store.NotFound("workspace", name)
	}
	if err != nil {
		return fmt.Errorf("looking up workspace %s: %w", name, err)
	}
	return nil
}

// GetWorkspace implements store.Tx.
func (x *tx) GetWorkspace(ctx context.Context, name string) (*api.Workspace, error) {
	var doc string
	err := x.queryRow(ctx, `SELECT doc FROM workspaces WHERE name = ?`, name).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound("workspace", name)
	}
	if err != nil {
		return nil, fmt.Errorf("getting workspace %s: %w", name, err)
	}
	var w api.Workspace
	if err := json.Unmarshal([]byte(doc), &w); err != nil {
		return nil, fmt.Errorf("decoding workspace %s: %w", name, err)
	}
	return &w, nil
}

// ListWorkspaces implements store.Tx.
func (x *tx) ListWorkspaces(ctx context.Context) ([]api.Workspace, error) {
	rows, err := x.query(ctx, `SELECT doc FROM workspaces ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing workspaces: %w", err)
	}
	return scanDocs(rows, "workspaces", func(w *api.Workspace, _ int64) {})
}

// PutWorkspace implements store.Tx.
func (x *tx) PutWorkspace(ctx context.Context, w *api.Workspace) error {
	if w.Name == "" {
		return errors.New("workspace: name is empty")
	}
	c := *w
	c.CreatedOn = c.CreatedOn.UTC()
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding workspace %s: %w", w.Name, err)
	}
	_, err = x.exec(ctx, `INSERT INTO workspaces (name, doc) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET doc = excluded.doc`, w.Name, string(doc))
	if err != nil {
		return fmt.Errorf("putting workspace %s: %w", w.Name, err)
	}
	return nil
}

// GetCompute implements store.Tx.
func (x *tx) GetCompute(ctx context.Context, workspace, name string) (*api.Compute, error) {
	var doc string
	var etag int64
	err := x.queryRow(ctx, `SELECT etag, doc FROM computes WHERE workspace = ? AND name = ?`,
		workspace, name).Scan(&etag, &doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound("compute", name)
	}
	if err != nil {
		return nil, fmt.Errorf("getting compute %s: %w", name, err)
	}
	var c api.Compute
	if err := json.Unmarshal([]byte(doc), &c); err != nil {
		return nil, fmt.Errorf("decoding compute %s: %w", name, err)
	}
	c.Etag = strconv.FormatInt(etag, 10)
	return &c, nil
}

// ListComputes implements store.Tx.
func (x *tx) ListComputes(ctx context.Context, workspace string) ([]api.Compute, error) {
	var rows *sql.Rows
	var err error
	if workspace == "" {
		rows, err = x.query(ctx, `SELECT etag, doc FROM computes ORDER BY name, workspace`)
	} else {
		rows, err = x.query(ctx, `SELECT etag, doc FROM computes WHERE workspace = ? ORDER BY name`, workspace)
	}
	if err != nil {
		return nil, fmt.Errorf("listing computes: %w", err)
	}
	return scanDocs(rows, "computes", func(c *api.Compute, etag int64) { c.Etag = strconv.FormatInt(etag, 10) })
}

// PutCompute implements store.Tx.
func (x *tx) PutCompute(ctx context.Context, c *api.Compute, ifMatch string) error {
	if c.Name == "" || c.Workspace == "" {
		return fmt.Errorf("compute %q in workspace %q: name and workspace must be set", c.Name, c.Workspace)
	}
	var stored int64
	err := x.queryRow(ctx, `SELECT etag FROM computes WHERE workspace = ? AND name = ?`,
		c.Workspace, c.Name).Scan(&stored)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("putting compute %s: %w", c.Name, err)
	}
	if err := checkEtag("compute", c.Name, found, stored, ifMatch); err != nil {
		return err
	}
	if !found {
		if err := x.requireWorkspace(ctx, c.Workspace); err != nil {
			return fmt.Errorf("compute %s: %w", c.Name, err)
		}
	}
	doc, err := json.Marshal(utcCompute(*c))
	if err != nil {
		return fmt.Errorf("encoding compute %s: %w", c.Name, err)
	}
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return err
	}
	_, err = x.exec(ctx, `INSERT INTO computes (workspace, name, etag, doc) VALUES (?, ?, ?, ?)
		ON CONFLICT (workspace, name) DO UPDATE SET etag = excluded.etag, doc = excluded.doc`,
		c.Workspace, c.Name, rev, string(doc))
	if err != nil {
		return fmt.Errorf("putting compute %s: %w", c.Name, err)
	}
	c.Etag = strconv.FormatInt(rev, 10)
	return nil
}

// ComputeCursor implements store.Tx: the last revision this transaction
// sees (see JobCursor); a compute's etag is the revision of its last write.
func (x *tx) ComputeCursor(ctx context.Context) (string, error) { return x.JobCursor(ctx) }

// ChangedComputes implements store.Tx.
func (x *tx) ChangedComputes(ctx context.Context, cursor string) ([]api.Compute, int, string, error) {
	after, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil {
		return nil, 0, "", fmt.Errorf("listing changed computes: cursor %q is not one ComputeCursor returned", cursor)
	}
	next, err := x.ComputeCursor(ctx)
	if err != nil {
		return nil, 0, "", err
	}
	var total int
	if err := x.queryRow(ctx, `SELECT count(*) FROM computes`).Scan(&total); err != nil {
		return nil, 0, "", fmt.Errorf("counting computes: %w", err)
	}
	rows, err := x.query(ctx, changedComputesQuery, after)
	if err != nil {
		return nil, 0, "", fmt.Errorf("listing changed computes: %w", err)
	}
	cs, err := scanDocs(rows, "computes", func(c *api.Compute, etag int64) { c.Etag = strconv.FormatInt(etag, 10) })
	return cs, total, next, err
}

// changedComputesQuery lists the computes written after an etag; "+name"
// keeps SQLite on computes_by_etag instead of scanning the table in name
// order.
const changedComputesQuery = `SELECT etag, doc FROM computes WHERE etag > ? ORDER BY +name, workspace`

// DeleteCompute implements store.Tx.
func (x *tx) DeleteCompute(ctx context.Context, workspace, name string) error {
	return x.deleteOne(ctx, "compute", name, `DELETE FROM computes WHERE workspace = ? AND name = ?`, workspace, name)
}

func (x *tx) deleteOne(ctx context.Context, kind, name, query string, args ...any) error {
	res, err := x.exec(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", kind, name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", kind, name, err)
	}
	if n == 0 {
		return store.NotFound(kind, name)
	}
	return nil
}

// GetToken implements store.Tx.
func (x *tx) GetToken(ctx context.Context, hash string) (*store.Token, error) {
	var doc string
	err := x.queryRow(ctx, `SELECT doc FROM tokens WHERE hash = ?`, hash).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		// The hash is not secret, but it is not a name either: keep it out.
		return nil, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("getting token: %w", err)
	}
	var t store.Token
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return nil, fmt.Errorf("decoding token: %w", err)
	}
	return &t, nil
}

// PutToken implements store.Tx.
func (x *tx) PutToken(ctx context.Context, t *store.Token) error {
	if t.Hash == "" {
		return errors.New("token: hash is empty")
	}
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encoding token %s: %w", t.Name, err)
	}
	_, err = x.exec(ctx, `INSERT INTO tokens (hash, doc) VALUES (?, ?)
		ON CONFLICT (hash) DO UPDATE SET doc = excluded.doc`, t.Hash, string(doc))
	if err != nil {
		return fmt.Errorf("putting token %s: %w", t.Name, err)
	}
	return nil
}

// DeleteToken implements store.Tx.
func (x *tx) DeleteToken(ctx context.Context, hash string) error {
	res, err := x.exec(ctx, `DELETE FROM tokens WHERE hash = ?`, hash)
	if err != nil {
		return fmt.Errorf("deleting token: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("deleting token: %w", err)
	} else if n == 0 {
		return fmt.Errorf("token: %w", store.ErrNotFound)
	}
	return nil
}

// GetSetting implements store.Tx.
func (x *tx) GetSetting(ctx context.Context, key string) (string, error) {
	var v string
	err := x.queryRow(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", store.NotFound("setting", key)
	}
	if err != nil {
		return "", fmt.Errorf("getting setting %s: %w", key, err)
	}
	return v, nil
}

// PutSetting implements store.Tx.
func (x *tx) PutSetting(ctx context.Context, key, value string) error {
	_, err := x.exec(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return fmt.Errorf("putting setting %s: %w", key, err)
	}
	return nil
}

// scanDocs decodes rows of (doc) or (etag, doc) into values of T, calling
// fix on each with the etag (0 when the query has none).
func scanDocs[T any](rows *sql.Rows, what string, fix func(*T, int64)) ([]T, error) {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	var out []T
	for rows.Next() {
		var doc string
		var etag int64
		if len(cols) == 2 {
			err = rows.Scan(&etag, &doc)
		} else {
			err = rows.Scan(&doc)
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", what, err)
		}
		var v T
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", what, err)
		}
		fix(&v, etag)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	return out, nil
}

// utcCompute returns the document to store: times in UTC, no etag (the
// column is the truth). c is a copy; slices are copied before changing.
func utcCompute(c api.Compute) api.Compute {
	c.Etag = ""
	c.CreatedOn, c.ModifiedOn = c.CreatedOn.UTC(), c.ModifiedOn.UTC()
	if c.Errors != nil {
		errs := make([]api.ErrorDetail, len(c.Errors))
		for i, e := range c.Errors {
			e.Time = e.Time.UTC()
			errs[i] = e
		}
		c.Errors = errs
	}
	return c
}
