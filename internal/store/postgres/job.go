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

// GetJob implements store.Tx.
func (x *tx) GetJob(ctx context.Context, workspace, name string) (*api.Job, error) {
	var doc string
	var etag int64
	err := x.tx.QueryRow(ctx, `SELECT etag, doc FROM jobs WHERE workspace = $1 AND name = $2`,
		workspace, name).Scan(&etag, &doc)
	if errors.Is(err, pgx.ErrNoRows) {
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

// ListJobDocs implements store.Tx.
func (x *tx) ListJobDocs(ctx context.Context, f store.JobFilter) ([]store.JobDoc, error) {
	rows, err := x.queryJobs(ctx, "name, compute, status, priority, etag, doc", f)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.ScanJobDocs(rows)
}

// CountJobs implements store.Tx.
func (x *tx) CountJobs(ctx context.Context, statuses []string) (map[[3]string]int, error) {
	rows, err := x.tx.Query(ctx, `SELECT workspace, compute, status, count(*) FROM jobs
		WHERE status = ANY($1) GROUP BY workspace, compute, status`, statuses)
	if err != nil {
		return nil, fmt.Errorf("counting jobs: %w", err)
	}
	defer rows.Close()
	return store.ScanJobCounts(rows)
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

// queuePositionQuery counts, from the index jobs_queue_order, the queued
// jobs of the job's compute ahead of it: two range scans as long as the
// part of the queue ahead, not the whole queue. The job itself is read by
// its primary key, in a subquery OFFSET 0 keeps apart: with status in the
// same WHERE, PostgreSQL walked jobs_queue_order over every queued job of
// the workspace to find it (7 ms with 1,200 queued).
const queuePositionQuery = `SELECT 1
	+ (SELECT count(*) FROM jobs a WHERE a.status = 'Queued' AND a.workspace = j.workspace AND a.compute = j.compute
		AND a.priority > j.priority)
	+ (SELECT count(*) FROM jobs a WHERE a.status = 'Queued' AND a.workspace = j.workspace AND a.compute = j.compute
		AND a.priority = j.priority AND a.created < j.created)
	FROM (SELECT workspace, compute, status, priority, created FROM jobs WHERE workspace = $1 AND name = $2 OFFSET 0) j
	WHERE j.status = 'Queued'`

// QueuePosition implements store.Tx.
func (x *tx) QueuePosition(ctx context.Context, workspace, name string) (int, error) {
	var pos int
	err := x.tx.QueryRow(ctx, queuePositionQuery, workspace, name).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("job %s: queue position: %w", name, err)
	}
	return pos, nil
}

// JobCursor implements store.Tx: the oldest transaction still running when
// this transaction's snapshot was taken. Every write it does not see
// belongs to that transaction or a later one.
func (x *tx) JobCursor(ctx context.Context) (string, error) {
	var c string
	if err := x.tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&c); err != nil {
		return "", fmt.Errorf("reading the job cursor: %w", err)
	}
	return c, nil
}

// ChangedJobs implements store.Tx. It lists again the jobs of
// transactions at or after the cursor that had committed already: at most
// the writes of the transactions running at the last call.
func (x *tx) ChangedJobs(ctx context.Context, cursor string) ([]api.Job, string, error) {
	if _, err := strconv.ParseUint(cursor, 10, 64); err != nil {
		return nil, "", fmt.Errorf("listing changed jobs: cursor %q is not one JobCursor returned", cursor)
	}
	next, err := x.JobCursor(ctx)
	if err != nil {
		return nil, "", err
	}
	rows, err := x.tx.Query(ctx, `SELECT etag, doc FROM jobs WHERE txid >= $1::xid8 ORDER BY created`, cursor)
	if err != nil {
		return nil, "", fmt.Errorf("listing changed jobs: %w", err)
	}
	js, err := scanDocs(rows, "jobs", func(j *api.Job, etag int64) { j.Etag = strconv.FormatInt(etag, 10) })
	return js, next, err
}

// QueuedJobs implements store.Tx.
func (x *tx) QueuedJobs(ctx context.Context, workspace string) (int, error) {
	var n int
	err := x.tx.QueryRow(ctx, `SELECT n FROM queued_jobs WHERE workspace = $1`, workspace).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("counting the queued jobs of workspace %s: %w", workspace, err)
	}
	return n, nil
}

// queryJobs selects cols of the jobs f selects, in creation order.
func (x *tx) queryJobs(ctx context.Context, cols string, f store.JobFilter) (pgx.Rows, error) {
	q, args := jobsQuery(cols, f)
	rows, err := x.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	return rows, nil
}

// jobsQuery is the statement selecting cols of the jobs f selects, in
// creation order, and its arguments.
func jobsQuery(cols string, f store.JobFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Workspace != "" {
		where = append(where, "workspace = "+arg(f.Workspace))
	}
	if f.Compute != "" && strings.ContainsAny(f.Compute, `%_\`) {
		where = append(where, "compute = "+arg(f.Compute))
	} else if f.Compute != "" {
		where = append(where, "(compute = "+arg(f.Compute)+" OR compute LIKE "+arg(api.JobComputePrefix(f.Compute)+"%")+")")
	}
	if f.Serverless {
		where = append(where, "compute LIKE "+arg(api.ServerlessPrefix+"%"))
	}
	if len(f.Statuses) > 0 {
		where = append(where, "status = ANY("+arg(f.Statuses)+")")
	}
	if len(f.Keys) > 0 {
		ws, names := make([]string, len(f.Keys)), make([]string, len(f.Keys))
		for i, k := range f.Keys {
			ws[i], names[i] = k.Workspace, k.Name
		}
		where = append(where, "(workspace, name) IN (SELECT * FROM unnest("+arg(ws)+"::text[], "+arg(names)+"::text[]))")
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
		q += " LIMIT " + arg(f.Limit)
	}
	return q, args
}

// PutJob implements store.Tx. It is one statement, one round trip, its
// events included: the revision is taken and the etag compared in the
// write itself, and the events take their numbers from their counter in
// it. Only when it writes nothing does a second read say why (no such job
// or workspace, another etag, or a job of that name with store.IfAbsent).
func (x *tx) PutJob(ctx context.Context, j *api.Job, ifMatch string, events ...*api.Event) error {
	p, err := jobPut(j, ifMatch, events)
	if err != nil {
		return err
	}
	err = p.scan(x.tx.QueryRow(ctx, p.q, p.args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return x.whyJobNotPut(ctx, j, ifMatch)
	}
	return err
}

// aJobPut is PutJob's statement for one job, and what it reads back.
type aJobPut struct {
	j       *api.Job
	ifMatch string
	events  []*api.Event
	q       string
	args    []any
}

// jobPut builds PutJob's statement.
func jobPut(j *api.Job, ifMatch string, events []*api.Event) (*aJobPut, error) {
	if j.Name == "" || j.Workspace == "" {
		return nil, fmt.Errorf("job %q in workspace %q: name and workspace must be set", j.Name, j.Workspace)
	}
	doc, err := json.Marshal(utcJob(*j))
	if err != nil {
		return nil, fmt.Errorf("encoding job %s: %w", j.Name, err)
	}
	args := []any{j.Workspace, j.Name, j.Compute, j.Status, string(doc), j.Priority()}
	var with, write string
	switch ifMatch {
	case "", store.IfAbsent:
		// The workspace is joined in so that a missing one writes nothing
		// (instead of failing the foreign key, which would abort the
		// transaction); so is a taken name with IfAbsent.
		with = `r AS (SELECT nextval('revision') AS v)`
		write = `INSERT INTO jobs (workspace, name, compute, status, created, etag, doc, priority, txid)
			SELECT w.name, $2, $3, $4, r.v, r.v, $5, $6, pg_current_xact_id() FROM r, workspaces w WHERE w.name = $1
			ON CONFLICT (workspace, name) DO UPDATE SET
				compute = excluded.compute, status = excluded.status, etag = excluded.etag, doc = excluded.doc,
				priority = excluded.priority, txid = excluded.txid
			RETURNING etag`
		if ifMatch == store.IfAbsent {
			write = write[:strings.Index(write, "DO UPDATE")] + `DO NOTHING
			RETURNING etag`
		}
	default:
		write = `UPDATE jobs SET compute = $3, status = $4, etag = nextval('revision'), doc = $5,
				priority = $6, txid = pg_current_xact_id()
			WHERE workspace = $1 AND name = $2 AND etag::text = $7
			RETURNING etag`
		args = append(args, ifMatch)
	}
	var q string
	switch {
	case len(events) > 0:
		// The events are inserted from the job's write (FROM j), so a
		// write that did not happen records none; their seqs are the
		// counter's last n.
		if with != "" {
			with += ", "
		}
		k := len(args)
		q = fmt.Sprintf(`WITH %sj AS (%s),
			c AS (INSERT INTO counters (workspace, scope, last) SELECT $1, $%[3]d, $%[4]d::bigint FROM j
				ON CONFLICT (workspace, scope) DO UPDATE SET last = counters.last + $%[4]d::bigint RETURNING last),
			e AS (INSERT INTO events (workspace, resource, seq, time, kind, message)
				SELECT $1, $%[5]d, c.last - $%[4]d::bigint + ev.n, ev.t, ev.k, ev.m
				FROM c, unnest($%[6]d::timestamptz[], $%[7]d::text[], $%[8]d::text[]) WITH ORDINALITY AS ev(t, k, m, n)
				RETURNING seq)
			SELECT j.etag, (SELECT coalesce(max(seq), 0) FROM e) FROM j`, with, write, k+1, k+2, k+3, k+4, k+5, k+6)
		resource := "job/" + j.Name
		ts, kinds, msgs := make([]time.Time, len(events)), make([]string, len(events)), make([]string, len(events))
		for i, e := range events {
			ts[i], kinds[i], msgs[i] = pgTime(e.Time), e.Kind, e.Message
		}
		args = append(args, "event/"+resource, int64(len(events)), resource, ts, kinds, msgs)
	case with != "":
		q = "WITH " + with + " " + write
	default:
		q = write
	}
	return &aJobPut{j: j, ifMatch: ifMatch, events: events, q: q, args: args}, nil
}

// scan reads the answer of p's statement into its job and events. It
// returns pgx.ErrNoRows when nothing was written.
func (p *aJobPut) scan(row pgx.Row) error {
	var rev, last int64
	dest := []any{&rev}
	if len(p.events) > 0 {
		dest = append(dest, &last)
	}
	err := row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if err != nil {
		return fmt.Errorf("putting job %s: %w", p.j.Name, err)
	}
	p.j.Etag = strconv.FormatInt(rev, 10)
	for i, e := range p.events {
		e.Seq = last - int64(len(p.events)) + int64(i) + 1
	}
	return nil
}

// SetPendingReasons implements store.Tx: one statement, the keys and
// reasons passed as arrays.
func (x *tx) SetPendingReasons(ctx context.Context, reasons map[store.JobKey]string) (int, error) {
	if len(reasons) == 0 {
		return 0, nil
	}
	ws, names, rs := make([]string, 0, len(reasons)), make([]string, 0, len(reasons)), make([]string, 0, len(reasons))
	for k, r := range reasons {
		ws, names, rs = append(ws, k.Workspace), append(names, k.Name), append(rs, r)
	}
	tag, err := x.tx.Exec(ctx, `UPDATE jobs SET doc = jsonb_set(doc, '{pending_reason}', to_jsonb(v.reason)),
			etag = nextval('revision'), txid = pg_current_xact_id()
		FROM unnest($1::text[], $2::text[], $3::text[]) AS v(ws, name, reason)
		WHERE jobs.workspace = v.ws AND jobs.name = v.name AND jobs.status = $4
			AND coalesce(jobs.doc->>'pending_reason', '') <> v.reason`,
		ws, names, rs, api.JobQueued)
	if err != nil {
		return 0, fmt.Errorf("setting %d pending reasons: %w", len(reasons), err)
	}
	return int(tag.RowsAffected()), nil
}

// whyJobNotPut is the error of a PutJob that wrote nothing.
func (x *tx) whyJobNotPut(ctx context.Context, j *api.Job, ifMatch string) error {
	var stored int64
	err := x.tx.QueryRow(ctx, `SELECT etag FROM jobs WHERE workspace = $1 AND name = $2`,
		j.Workspace, j.Name).Scan(&stored)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("putting job %s: %w", j.Name, err)
	}
	if ifMatch == store.IfAbsent {
		if found {
			return fmt.Errorf("job %q: %w", j.Name, store.ErrExists)
		}
		ifMatch = ""
	}
	if err := checkEtag("job", j.Name, found, stored, ifMatch); err != nil {
		return err
	}
	if err := x.requireWorkspace(ctx, j.Workspace); err != nil {
		return fmt.Errorf("job %s: %w", j.Name, err)
	}
	return fmt.Errorf("putting job %s: nothing was written", j.Name)
}

func utcJob(j api.Job) api.Job {
	j.Etag = ""
	j.CreatedOn, j.StartTime, j.EndTime = j.CreatedOn.UTC(), j.StartTime.UTC(), j.EndTime.UTC()
	return j
}
