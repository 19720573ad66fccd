package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// tx implements store.Tx on one transaction.
type tx struct {
	tx    *lazyTx
	after []func()
}

// OnCommit queues fn to run after the transaction commits.
func (t *tx) OnCommit(fn func()) { t.after = append(t.after, fn) }

var _ store.Tx = (*tx)(nil)

// Savepoint implements store.Tx. Its statements are held and sent with the
// next one (lazyTx.hold): a savepoint costs no round trip of its own. On a
// transaction that has not failed, or that a held ROLLBACK TO will bring
// back, SAVEPOINT and RELEASE do not fail (but with the connection, which
// the commit then finds broken), so their answers can wait. One that
// failed under an fn that returned nil, where the release would fail, is
// said to be broken at once. Writes held in fn (lazyTx.holdWrite) are sent
// with its RELEASE, at once, so that their error is fn's; a savepoint
// rolled back drops them unsent.
func (t *tx) Savepoint(ctx context.Context, fn func() error) error {
	err := store.InSavepoint(func(q string) error {
		rollback := strings.HasPrefix(q, "ROLLBACK")
		if rollback {
			t.tx.dropWrites()
		} else if !t.tx.healthyAfterHeld() {
			return errors.New("a statement failed in this transaction, outside of a savepoint rolled back")
		}
		t.tx.hold(q)
		if t.tx.holdsWrites() {
			return t.tx.flush(ctx)
		}
		return nil
	}, &t.after, fn)
	if err != nil && retryable(err) && !errors.Is(err, store.ErrTxBroken) {
		// A serialization failure or deadlock is the whole
		// transaction's: Update retries it from the start.
		return fmt.Errorf("%w: %w", store.ErrTxBroken, err)
	}
	return err
}

// pgTime is t as PostgreSQL keeps it: to the microsecond. Truncating here,
// not rounding in the server, gives the same value as the SQLite backend.
func pgTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// nextRevision returns a new database-wide revision number, used as etag
// and as a job's creation order.
func (x *tx) nextRevision(ctx context.Context) (int64, error) {
	var v int64
	err := x.tx.QueryRow(ctx, `SELECT nextval('revision')`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("taking a revision: %w", err)
	}
	return v, nil
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
	err := x.tx.QueryRow(ctx, `SELECT 1 FROM workspaces WHERE name = $1`, name).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
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
	err := x.tx.QueryRow(ctx, `SELECT doc FROM workspaces WHERE name = $1`, name).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
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
	rows, err := x.tx.Query(ctx, `SELECT doc FROM workspaces ORDER BY name`)
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
	_, err = x.tx.Exec(ctx, `INSERT INTO workspaces (name, doc) VALUES ($1, $2)
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
	err := x.tx.QueryRow(ctx, `SELECT etag, doc FROM computes WHERE workspace = $1 AND name = $2`,
		workspace, name).Scan(&etag, &doc)
	if errors.Is(err, pgx.ErrNoRows) {
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
	var rows pgx.Rows
	var err error
	if workspace == "" {
		rows, err = x.tx.Query(ctx, `SELECT etag, doc FROM computes ORDER BY name, workspace`)
	} else {
		rows, err = x.tx.Query(ctx, `SELECT etag, doc FROM computes WHERE workspace = $1 ORDER BY name`, workspace)
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
	err := x.tx.QueryRow(ctx, `SELECT etag FROM computes WHERE workspace = $1 AND name = $2`,
		c.Workspace, c.Name).Scan(&stored)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
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
	_, err = x.tx.Exec(ctx, `INSERT INTO computes (workspace, name, etag, doc, txid) VALUES ($1, $2, $3, $4, pg_current_xact_id())
		ON CONFLICT (workspace, name) DO UPDATE SET etag = excluded.etag, doc = excluded.doc, txid = excluded.txid`,
		c.Workspace, c.Name, rev, string(doc))
	if err != nil {
		return fmt.Errorf("putting compute %s: %w", c.Name, err)
	}
	c.Etag = strconv.FormatInt(rev, 10)
	return nil
}

// ComputeCursor implements store.Tx: the oldest transaction still running
// when this transaction's snapshot was taken (see JobCursor).
func (x *tx) ComputeCursor(ctx context.Context) (string, error) { return x.JobCursor(ctx) }

// ChangedComputes implements store.Tx. As ChangedJobs, it lists again the
// computes of transactions at or after the cursor that had committed
// already. (Etags come from a sequence and commit out of order: a compute
// with an etag below a later-read one may commit after it.)
func (x *tx) ChangedComputes(ctx context.Context, cursor string) ([]api.Compute, int, string, error) {
	if _, err := strconv.ParseUint(cursor, 10, 64); err != nil {
		return nil, 0, "", fmt.Errorf("listing changed computes: cursor %q is not one ComputeCursor returned", cursor)
	}
	next, err := x.ComputeCursor(ctx)
	if err != nil {
		return nil, 0, "", err
	}
	var total int
	if err := x.tx.QueryRow(ctx, `SELECT count(*) FROM computes`).Scan(&total); err != nil {
		return nil, 0, "", fmt.Errorf("counting computes: %w", err)
	}
	rows, err := x.tx.Query(ctx, `SELECT etag, doc FROM computes WHERE txid >= $1::xid8 ORDER BY name, workspace`, cursor)
	if err != nil {
		return nil, 0, "", fmt.Errorf("listing changed computes: %w", err)
	}
	cs, err := scanDocs(rows, "computes", func(c *api.Compute, etag int64) { c.Etag = strconv.FormatInt(etag, 10) })
	return cs, total, next, err
}

// DeleteCompute implements store.Tx.
func (x *tx) DeleteCompute(ctx context.Context, workspace, name string) error {
	return x.deleteOne(ctx, "compute", name, `DELETE FROM computes WHERE workspace = $1 AND name = $2`, workspace, name)
}

func (x *tx) deleteOne(ctx context.Context, kind, name, query string, args ...any) error {
	tag, err := x.tx.Exec(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", kind, name, err)
	}
	if tag.RowsAffected() == 0 {
		return store.NotFound(kind, name)
	}
	return nil
}

// pgLimit turns "0 or less: no limit" into LIMIT NULL, PostgreSQL's.
func pgLimit(limit int) any {
	if limit <= 0 {
		return nil
	}
	return limit
}

// GetToken implements store.Tx.
func (x *tx) GetToken(ctx context.Context, hash string) (*store.Token, error) {
	var doc string
	err := x.tx.QueryRow(ctx, `SELECT doc FROM tokens WHERE hash = $1`, hash).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
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
	_, err = x.tx.Exec(ctx, `INSERT INTO tokens (hash, doc) VALUES ($1, $2)
		ON CONFLICT (hash) DO UPDATE SET doc = excluded.doc`, t.Hash, string(doc))
	if err != nil {
		return fmt.Errorf("putting token %s: %w", t.Name, err)
	}
	return nil
}

// DeleteToken implements store.Tx.
func (x *tx) DeleteToken(ctx context.Context, hash string) error {
	tag, err := x.tx.Exec(ctx, `DELETE FROM tokens WHERE hash = $1`, hash)
	if err != nil {
		return fmt.Errorf("deleting token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("token: %w", store.ErrNotFound)
	}
	return nil
}

// GetSetting implements store.Tx.
func (x *tx) GetSetting(ctx context.Context, key string) (string, error) {
	var v string
	err := x.tx.QueryRow(ctx, `SELECT value FROM settings WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", store.NotFound("setting", key)
	}
	if err != nil {
		return "", fmt.Errorf("getting setting %s: %w", key, err)
	}
	return v, nil
}

// PutSetting implements store.Tx.
func (x *tx) PutSetting(ctx context.Context, key, value string) error {
	_, err := x.tx.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return fmt.Errorf("putting setting %s: %w", key, err)
	}
	return nil
}

// scanDocs decodes rows of (doc) or (etag, doc) into values of T, calling
// fix on each with the etag (0 when the query has none).
func scanDocs[T any](rows pgx.Rows, what string, fix func(*T, int64)) ([]T, error) {
	defer rows.Close()
	cols := rows.FieldDescriptions()
	var err error
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
