package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// tx implements store.Tx on one database/sql transaction.
type tx struct {
	tx    *sql.Tx
	after []func()
}

// OnCommit queues fn to run after Update commits.
func (t *tx) OnCommit(fn func()) { t.after = append(t.after, fn) }

var _ store.Tx = (*tx)(nil)

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
	var v int64
	err := x.tx.QueryRowContext(ctx, `UPDATE revision SET value = value + 1 WHERE id = 1 RETURNING value`).Scan(&v)
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
	err := x.tx.QueryRowContext(ctx, `SELECT 1 FROM workspaces WHERE name = ?`, name).Scan(&one)
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
	err := x.tx.QueryRowContext(ctx, `SELECT doc FROM workspaces WHERE name = ?`, name).Scan(&doc)
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
	rows, err := x.tx.QueryContext(ctx, `SELECT doc FROM workspaces ORDER BY name`)
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
	_, err = x.tx.ExecContext(ctx, `INSERT INTO workspaces (name, doc) VALUES (?, ?)
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
	err := x.tx.QueryRowContext(ctx, `SELECT etag, doc FROM computes WHERE workspace = ? AND name = ?`,
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
		rows, err = x.tx.QueryContext(ctx, `SELECT etag, doc FROM computes ORDER BY name, workspace`)
	} else {
		rows, err = x.tx.QueryContext(ctx, `SELECT etag, doc FROM computes WHERE workspace = ? ORDER BY name`, workspace)
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
	err := x.tx.QueryRowContext(ctx, `SELECT etag FROM computes WHERE workspace = ? AND name = ?`,
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
	_, err = x.tx.ExecContext(ctx, `INSERT INTO computes (workspace, name, etag, doc) VALUES (?, ?, ?, ?)
		ON CONFLICT (workspace, name) DO UPDATE SET etag = excluded.etag, doc = excluded.doc`,
		c.Workspace, c.Name, rev, string(doc))
	if err != nil {
		return fmt.Errorf("putting compute %s: %w", c.Name, err)
	}
	c.Etag = strconv.FormatInt(rev, 10)
	return nil
}

// DeleteCompute implements store.Tx.
func (x *tx) DeleteCompute(ctx context.Context, workspace, name string) error {
	return x.deleteOne(ctx, "compute", name, `DELETE FROM computes WHERE workspace = ? AND name = ?`, workspace, name)
}

func (x *tx) deleteOne(ctx context.Context, kind, name, query string, args ...any) error {
	res, err := x.tx.ExecContext(ctx, query, args...)
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

// GetJob implements store.Tx.
func (x *tx) GetJob(ctx context.Context, workspace, name string) (*api.Job, error) {
	var doc string
	var etag int64
	err := x.tx.QueryRowContext(ctx, `SELECT etag, doc FROM jobs WHERE workspace = ? AND name = ?`,
		workspace, name).Scan(&etag, &doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound("job", name)
	}
	if err != nil {
		return nil, fmt.Errorf("getting job %s: %w", name, err)
	}
	var j api.Job
	if err := json.Unmarshal([]byte(doc), &j); err != nil {
		return nil, fmt.Errorf("decoding job %s: %w", name, err)
	}
	j.Etag = strconv.FormatInt(etag, 10)
	return &j, nil
}

// ListJobs implements store.Tx.
func (x *tx) ListJobs(ctx context.Context, f store.JobFilter) ([]api.Job, error) {
	rows, err := x.queryJobs(ctx, "etag, doc", f)
	if err != nil {
		return nil, err
	}
	return scanDocs(rows, "jobs", func(j *api.Job, etag int64) { j.Etag = strconv.FormatInt(etag, 10) })
}

// JobVersions implements store.Tx.
func (x *tx) JobVersions(ctx context.Context, f store.JobFilter) ([]store.JobVersion, error) {
	rows, err := x.queryJobs(ctx, "workspace, name, etag, compute, priority", f)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.JobVersion
	for rows.Next() {
		var v store.JobVersion
		var etag int64
		if err := rows.Scan(&v.Workspace, &v.Name, &etag, &v.Compute, &v.Priority); err != nil {
			return nil, fmt.Errorf("listing jobs: %w", err)
		}
		v.Etag = strconv.FormatInt(etag, 10)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	return out, nil
}

// queryJobs selects cols of the jobs f selects, in creation order.
func (x *tx) queryJobs(ctx context.Context, cols string, f store.JobFilter) (*sql.Rows, error) {
	var where []string
	var args []any
	if f.Workspace != "" {
		where = append(where, "workspace = ?")
		args = append(args, f.Workspace)
	}
	if f.Compute != "" {
		where = append(where, "compute = ?")
		args = append(args, f.Compute)
	}
	if f.Serverless {
		where = append(where, "compute LIKE ?")
		args = append(args, api.ServerlessPrefix+"%")
	}
	if len(f.Statuses) > 0 {
		where = append(where, "status IN (?"+strings.Repeat(", ?", len(f.Statuses)-1)+")")
		for _, s := range f.Statuses {
			args = append(args, s)
		}
	}
	if len(f.Keys) > 0 {
		// One JSON argument rather than two placeholders per key: the
		// statement stays short and the same, so it is cheap to prepare.
		pairs := make([][2]string, len(f.Keys))
		for i, k := range f.Keys {
			pairs[i] = [2]string{k.Workspace, k.Name}
		}
		keys, err := json.Marshal(pairs)
		if err != nil {
			return nil, fmt.Errorf("listing jobs: %w", err)
		}
		where = append(where, "(workspace, name) IN (SELECT value->>0, value->>1 FROM json_each(?))")
		args = append(args, string(keys))
	}
	q := `SELECT ` + cols + ` FROM jobs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created"
	if f.Newest {
		q += " DESC"
	}
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := x.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	return rows, nil
}

// PutJob implements store.Tx.
func (x *tx) PutJob(ctx context.Context, j *api.Job, ifMatch string) error {
	if j.Name == "" || j.Workspace == "" {
		return fmt.Errorf("job %q in workspace %q: name and workspace must be set", j.Name, j.Workspace)
	}
	var stored, created int64
	err := x.tx.QueryRowContext(ctx, `SELECT etag, created FROM jobs WHERE workspace = ? AND name = ?`,
		j.Workspace, j.Name).Scan(&stored, &created)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("putting job %s: %w", j.Name, err)
	}
	if err := checkEtag("job", j.Name, found, stored, ifMatch); err != nil {
		return err
	}
	if !found {
		if err := x.requireWorkspace(ctx, j.Workspace); err != nil {
			return fmt.Errorf("job %s: %w", j.Name, err)
		}
	}
	doc, err := json.Marshal(utcJob(*j))
	if err != nil {
		return fmt.Errorf("encoding job %s: %w", j.Name, err)
	}
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return err
	}
	if !found {
		created = rev
	}
	_, err = x.tx.ExecContext(ctx, `INSERT INTO jobs (workspace, name, compute, status, created, etag, doc, priority)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (workspace, name) DO UPDATE SET
			compute = excluded.compute, status = excluded.status, etag = excluded.etag, doc = excluded.doc,
			priority = excluded.priority`,
		j.Workspace, j.Name, j.Compute, j.Status, created, rev, string(doc), j.Priority())
	if err != nil {
		return fmt.Errorf("putting job %s: %w", j.Name, err)
	}
	j.Etag = strconv.FormatInt(rev, 10)
	return nil
}

// GetNode implements store.Tx.
func (x *tx) GetNode(ctx context.Context, id string) (*api.Node, error) {
	var doc string
	err := x.tx.QueryRowContext(ctx, `SELECT doc FROM nodes WHERE id = ?`, id).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound("node", id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting node %s: %w", id, err)
	}
	var n api.Node
	if err := json.Unmarshal([]byte(doc), &n); err != nil {
		return nil, fmt.Errorf("decoding node %s: %w", id, err)
	}
	return &n, nil
}

// ListNodes implements store.Tx. An empty workspace or compute matches all.
func (x *tx) ListNodes(ctx context.Context, workspace, compute string) ([]api.Node, error) {
	q := `SELECT doc FROM nodes WHERE (? = '' OR workspace = ?) AND (? = '' OR compute = ?) ORDER BY id`
	rows, err := x.tx.QueryContext(ctx, q, workspace, workspace, compute, compute)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return scanDocs(rows, "nodes", func(*api.Node, int64) {})
}

// PutNode implements store.Tx.
func (x *tx) PutNode(ctx context.Context, n *api.Node) error {
	if n.ID == "" {
		return errors.New("node: id is empty")
	}
	c := *n
	c.CreatedOn, c.StateSince, c.LastHeartbeat = c.CreatedOn.UTC(), c.StateSince.UTC(), c.LastHeartbeat.UTC()
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding node %s: %w", n.ID, err)
	}
	_, err = x.tx.ExecContext(ctx, `INSERT INTO nodes (id, workspace, compute, doc) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET workspace = excluded.workspace, compute = excluded.compute, doc = excluded.doc`,
		n.ID, n.Workspace, n.Compute, string(doc))
	if err != nil {
		return fmt.Errorf("putting node %s: %w", n.ID, err)
	}
	return nil
}

// DeleteNode implements store.Tx.
func (x *tx) DeleteNode(ctx context.Context, id string) error {
	return x.deleteOne(ctx, "node", id, `DELETE FROM nodes WHERE id = ?`, id)
}

// nextSeqs reserves n seqs in a counter and returns the first.
func (x *tx) nextSeqs(ctx context.Context, workspace, scope string, n int) (int64, error) {
	var last int64
	err := x.tx.QueryRowContext(ctx, `INSERT INTO counters (workspace, scope, last) VALUES (?, ?, ?)
		ON CONFLICT (workspace, scope) DO UPDATE SET last = counters.last + excluded.last
		RETURNING last`, workspace, scope, n).Scan(&last)
	if err != nil {
		return 0, fmt.Errorf("counting %s: %w", scope, err)
	}
	return last - int64(n) + 1, nil
}

type lineKey struct {
	attempt, node int
	nodeSeq       int64
}

// AppendLog implements store.Tx.
func (x *tx) AppendLog(ctx context.Context, workspace, job string, lines []api.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	// Find the lines already stored: an agent resends a batch whose commit
	// it did not see. A batch is normally one attempt on one node, so one
	// range query per (attempt, node) finds them.
	type group struct{ lo, hi int64 }
	groups := map[[2]int]*group{}
	for _, l := range lines {
		k := [2]int{l.Attempt, l.Node}
		if g := groups[k]; g == nil {
			groups[k] = &group{l.NodeSeq, l.NodeSeq}
		} else {
			g.lo, g.hi = min(g.lo, l.NodeSeq), max(g.hi, l.NodeSeq)
		}
	}
	stored := map[lineKey]int64{}
	for k, g := range groups {
		rows, err := x.tx.QueryContext(ctx, `SELECT node_seq, seq FROM logs
			WHERE workspace = ? AND job = ? AND attempt = ? AND node = ? AND node_seq BETWEEN ? AND ?`,
			workspace, job, k[0], k[1], g.lo, g.hi)
		if err != nil {
			return fmt.Errorf("appending log of job %s: %w", job, err)
		}
		for rows.Next() {
			var ns, seq int64
			if err := rows.Scan(&ns, &seq); err != nil {
				rows.Close()
				return fmt.Errorf("appending log of job %s: %w", job, err)
			}
			stored[lineKey{k[0], k[1], ns}] = seq
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("appending log of job %s: %w", job, err)
		}
	}
	fresh := 0
	seen := map[lineKey]bool{}
	for _, l := range lines {
		k := lineKey{l.Attempt, l.Node, l.NodeSeq}
		if _, ok := stored[k]; !ok && !seen[k] {
			seen[k] = true
			fresh++
		}
	}
	if fresh == 0 {
		for i := range lines {
			lines[i].Seq = stored[lineKey{lines[i].Attempt, lines[i].Node, lines[i].NodeSeq}]
		}
		return nil
	}
	next, err := x.nextSeqs(ctx, workspace, "log/"+job, fresh)
	if err != nil {
		return err
	}
	stmt, err := x.tx.PrepareContext(ctx, `INSERT INTO logs
		(workspace, job, seq, attempt, node, node_seq, time, stream, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("appending log of job %s: %w", job, err)
	}
	defer stmt.Close()
	for i := range lines {
		l := &lines[i]
		k := lineKey{l.Attempt, l.Node, l.NodeSeq}
		if seq, ok := stored[k]; ok {
			l.Seq = seq
			continue
		}
		if _, err := stmt.ExecContext(ctx, workspace, job, next, l.Attempt, l.Node, l.NodeSeq,
			formatTime(l.Time), l.Stream, l.Text); err != nil {
			return fmt.Errorf("appending log of job %s: %w", job, err)
		}
		l.Seq = next
		stored[k] = next
		next++
	}
	return nil
}

// ReadLog implements store.Tx. A limit of 0 or less means no limit.
func (x *tx) ReadLog(ctx context.Context, workspace, job string, after int64, limit int) ([]api.LogLine, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := x.tx.QueryContext(ctx, `SELECT seq, attempt, node, node_seq, time, stream, text FROM logs
		WHERE workspace = ? AND job = ? AND seq > ? ORDER BY seq LIMIT ?`, workspace, job, after, limit)
	if err != nil {
		return nil, fmt.Errorf("reading log of job %s: %w", job, err)
	}
	defer rows.Close()
	var out []api.LogLine
	for rows.Next() {
		var l api.LogLine
		var ts string
		if err := rows.Scan(&l.Seq, &l.Attempt, &l.Node, &l.NodeSeq, &ts, &l.Stream, &l.Text); err != nil {
			return nil, fmt.Errorf("reading log of job %s: %w", job, err)
		}
		if l.Time, err = parseTime(ts); err != nil {
			return nil, fmt.Errorf("reading log of job %s: line %d: %w", job, l.Seq, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading log of job %s: %w", job, err)
	}
	return out, nil
}

// AddEvent implements store.Tx.
func (x *tx) AddEvent(ctx context.Context, workspace, resource string, e *api.Event) error {
	seq, err := x.nextSeqs(ctx, workspace, "event/"+resource, 1)
	if err != nil {
		return err
	}
	_, err = x.tx.ExecContext(ctx, `INSERT INTO events (workspace, resource, seq, time, kind, message)
		VALUES (?, ?, ?, ?, ?, ?)`, workspace, resource, seq, formatTime(e.Time), e.Kind, e.Message)
	if err != nil {
		return fmt.Errorf("adding event to %s: %w", resource, err)
	}
	e.Seq = seq
	return nil
}

// ListEvents implements store.Tx. A limit of 0 or less means no limit.
func (x *tx) ListEvents(ctx context.Context, workspace, resource string, after int64, limit int) ([]api.Event, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := x.tx.QueryContext(ctx, `SELECT seq, time, kind, message FROM events
		WHERE workspace = ? AND resource = ? AND seq > ? ORDER BY seq LIMIT ?`, workspace, resource, after, limit)
	if err != nil {
		return nil, fmt.Errorf("listing events of %s: %w", resource, err)
	}
	defer rows.Close()
	var out []api.Event
	for rows.Next() {
		var e api.Event
		var ts string
		if err := rows.Scan(&e.Seq, &ts, &e.Kind, &e.Message); err != nil {
			return nil, fmt.Errorf("listing events of %s: %w", resource, err)
		}
		if e.Time, err = parseTime(ts); err != nil {
			return nil, fmt.Errorf("listing events of %s: event %d: %w", resource, e.Seq, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing events of %s: %w", resource, err)
	}
	return out, nil
}

// GetToken implements store.Tx.
func (x *tx) GetToken(ctx context.Context, hash string) (*store.Token, error) {
	var doc string
	err := x.tx.QueryRowContext(ctx, `SELECT doc FROM tokens WHERE hash = ?`, hash).Scan(&doc)
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
	_, err = x.tx.ExecContext(ctx, `INSERT INTO tokens (hash, doc) VALUES (?, ?)
		ON CONFLICT (hash) DO UPDATE SET doc = excluded.doc`, t.Hash, string(doc))
	if err != nil {
		return fmt.Errorf("putting token %s: %w", t.Name, err)
	}
	return nil
}

// DeleteToken implements store.Tx.
func (x *tx) DeleteToken(ctx context.Context, hash string) error {
	res, err := x.tx.ExecContext(ctx, `DELETE FROM tokens WHERE hash = ?`, hash)
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
	err := x.tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v)
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
	_, err := x.tx.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)
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

func utcJob(j api.Job) api.Job {
	j.Etag = ""
	j.CreatedOn, j.StartTime, j.EndTime = j.CreatedOn.UTC(), j.StartTime.UTC(), j.EndTime.UTC()
	return j
}
