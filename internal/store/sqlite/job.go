package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// GetJob implements store.Tx.
func (x *tx) GetJob(ctx context.Context, workspace, name string) (*api.Job, error) {
	var doc string
	var etag int64
	err := x.queryRow(ctx, `SELECT etag, doc FROM jobs WHERE workspace = ? AND name = ?`,
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

// ListJobDocs implements store.Tx.
func (x *tx) ListJobDocs(ctx context.Context, f store.JobFilter) ([]store.JobDoc, error) {
	rows, err := x.queryJobs(ctx, "name, compute, status, priority, etag, doc", f)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.ScanJobDocs(rows)
}

// CountJobs implements store.Tx: the statuses go as one JSON array.
func (x *tx) CountJobs(ctx context.Context, statuses []string) (map[[3]string]int, error) {
	list, err := json.Marshal(statuses)
	if err != nil {
		return nil, err
	}
	rows, err := x.query(ctx, `SELECT workspace, compute, status, count(*) FROM jobs
		WHERE status IN (SELECT value FROM json_each(?)) GROUP BY workspace, compute, status`, string(list))
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
// part of the queue ahead, not the whole queue.
const queuePositionQuery = `SELECT 1
	+ (SELECT count(*) FROM jobs a WHERE a.status = 'Queued' AND a.workspace = j.workspace AND a.compute = j.compute
		AND a.priority > j.priority)
	+ (SELECT count(*) FROM jobs a WHERE a.status = 'Queued' AND a.workspace = j.workspace AND a.compute = j.compute
		AND a.priority = j.priority AND a.created < j.created)
	FROM jobs j WHERE j.workspace = ? AND j.name = ? AND j.status = 'Queued'`

// QueuePosition implements store.Tx.
func (x *tx) QueuePosition(ctx context.Context, workspace, name string) (int, error) {
	var pos int
	err := x.queryRow(ctx, queuePositionQuery, workspace, name).Scan(&pos)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("job %s: queue position: %w", name, err)
	}
	return pos, nil
}

// JobCursor implements store.Tx: the last revision this transaction sees.
// SQLite has one writer at a time, which takes its revision inside its
// transaction, so every write this transaction does not see has a later
// revision.
func (x *tx) JobCursor(ctx context.Context) (string, error) {
	if x.rev > 0 {
		// What this transaction wrote last (not saved in the row yet).
		return strconv.FormatInt(x.rev, 10), nil
	}
	var v int64
	if err := x.queryRow(ctx, `SELECT value FROM revision WHERE id = 1`).Scan(&v); err != nil {
		return "", fmt.Errorf("reading the job cursor: %w", err)
	}
	return strconv.FormatInt(v, 10), nil
}

// changedJobsQuery lists the jobs written after a revision. "+created":
// ordered by the created column's unique index, SQLite scanned every job
// to find the few written since; this way it reads those from
// jobs_by_etag and sorts them (TestFeedQueriesUseTheirIndexes).
const changedJobsQuery = `SELECT etag, doc FROM jobs WHERE etag > ? ORDER BY +created`

// ChangedJobs implements store.Tx.
func (x *tx) ChangedJobs(ctx context.Context, cursor string) ([]api.Job, string, error) {
	after, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil {
		return nil, "", fmt.Errorf("listing changed jobs: cursor %q is not one JobCursor returned", cursor)
	}
	next, err := x.JobCursor(ctx)
	if err != nil {
		return nil, "", err
	}
	rows, err := x.query(ctx, changedJobsQuery, after)
	if err != nil {
		return nil, "", fmt.Errorf("listing changed jobs: %w", err)
	}
	js, err := scanDocs(rows, "jobs", func(j *api.Job, etag int64) { j.Etag = strconv.FormatInt(etag, 10) })
	return js, next, err
}

// QueuedJobs implements store.Tx.
func (x *tx) QueuedJobs(ctx context.Context, workspace string) (int, error) {
	var n int
	err := x.queryRow(ctx, `SELECT n FROM queued_jobs WHERE workspace = ?`, workspace).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("counting the queued jobs of workspace %s: %w", workspace, err)
	}
	return n, nil
}

// queryJobs selects cols of the jobs f selects, in creation order.
func (x *tx) queryJobs(ctx context.Context, cols string, f store.JobFilter) (*sql.Rows, error) {
	q, args, err := jobsQuery(cols, f)
	if err != nil {
		return nil, err
	}
	rows, err := x.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	return rows, nil
}

// jobsQuery is the statement selecting cols of the jobs f selects, in
// creation order, and its arguments.
func jobsQuery(cols string, f store.JobFilter) (string, []any, error) {
	var where []string
	var args []any
	if f.Workspace != "" {
		where = append(where, "workspace = ?")
		args = append(args, f.Workspace)
	}
	if f.Compute != "" && strings.ContainsAny(f.Compute, `%_\`) {
		where = append(where, "compute = ?")
		args = append(args, f.Compute)
	} else if f.Compute != "" {
		// The range holds the compute and its hidden ones (name, then
		// "name." and more: '.' sorts before '/' in SQLite's binary
		// order), so that the compute's jobs are read from
		// jobs_by_compute: with the OR alone SQLite read every job of
		// the workspace (job list of one compute p99 846 ms at 110,000).
		where = append(where, "compute >= ? AND compute < ? AND (compute = ? OR compute LIKE ?)")
		args = append(args, f.Compute, f.Compute+"/", f.Compute, api.JobComputePrefix(f.Compute)+"%")
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
			return "", nil, fmt.Errorf("listing jobs: %w", err)
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
	return q, args, nil
}

// PutJob implements store.Tx.
func (x *tx) PutJob(ctx context.Context, j *api.Job, ifMatch string, events ...*api.Event) error {
	if j.Name == "" || j.Workspace == "" {
		return fmt.Errorf("job %q in workspace %q: name and workspace must be set", j.Name, j.Workspace)
	}
	// Without ifMatch nothing is read first: a new job's created is its
	// first revision, and the upsert keeps a stored job's (a read before
	// every write was a statement of each job's every change). With
	// IfAbsent a stored job makes the insert write nothing.
	if ifMatch != "" && ifMatch != store.IfAbsent {
		var stored int64
		err := x.queryRow(ctx, `SELECT etag FROM jobs WHERE workspace = ? AND name = ?`, j.Workspace, j.Name).Scan(&stored)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("putting job %s: %w", j.Name, err)
		}
		if err := checkEtag("job", j.Name, err == nil, stored, ifMatch); err != nil {
			return err
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
	q := `INSERT INTO jobs (workspace, name, compute, status, created, etag, doc, priority)
		VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7)
		ON CONFLICT (workspace, name) DO UPDATE SET
			compute = excluded.compute, status = excluded.status, etag = excluded.etag, doc = excluded.doc,
			priority = excluded.priority`
	if ifMatch == store.IfAbsent {
		q = q[:strings.Index(q, "DO UPDATE")] + "DO NOTHING"
	}
	res, err := x.exec(ctx, q, j.Workspace, j.Name, j.Compute, j.Status, rev, string(doc), j.Priority())
	if err == nil && ifMatch == store.IfAbsent {
		if n, rerr := res.RowsAffected(); rerr != nil {
			err = rerr
		} else if n == 0 {
			return fmt.Errorf("job %q: %w", j.Name, store.ErrExists)
		}
	}
	if err != nil {
		// A new job's missing workspace fails the foreign key: say which.
		if werr := x.requireWorkspace(ctx, j.Workspace); store.IsNotFound(werr) {
			return fmt.Errorf("job %s: %w", j.Name, werr)
		}
		return fmt.Errorf("putting job %s: %w", j.Name, err)
	}
	j.Etag = strconv.FormatInt(rev, 10)
	// (Each a statement: SQLite runs in the process, so a statement
	// saves no round trip.)
	for _, e := range events {
		if err := x.AddEvent(ctx, j.Workspace, "job/"+j.Name, e); err != nil {
			return err
		}
	}
	return nil
}

// SetPendingReasons implements store.Tx: one statement for all the jobs,
// each row's etag one of a block of revisions taken first. A revision
// taken for a job that is then not written is a gap in the revisions,
// which the feed skips.
func (x *tx) SetPendingReasons(ctx context.Context, reasons map[store.JobKey]string) (int, error) {
	if len(reasons) == 0 {
		return 0, nil
	}
	rows := make([][3]string, 0, len(reasons))
	for k, r := range reasons {
		rows = append(rows, [3]string{k.Workspace, k.Name, r})
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return 0, fmt.Errorf("setting %d pending reasons: %w", len(reasons), err)
	}
	first, err := x.takeRevisions(ctx, len(rows))
	if err != nil {
		return 0, err
	}
	res, err := x.exec(ctx, setPendingReasonsQuery, first, string(arg), api.JobQueued)
	if err != nil {
		return 0, fmt.Errorf("setting %d pending reasons: %w", len(reasons), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("setting %d pending reasons: %w", len(reasons), err)
	}
	return int(n), nil
}

// setPendingReasonsQuery finds each job by its key: "+jobs.status", as
// SQLite otherwise walked every queued job (jobs_queue_order) for each
// reason (TestFeedQueriesUseTheirIndexes).
const setPendingReasonsQuery = `UPDATE jobs SET doc = json_set(doc, '$.pending_reason', v.reason), etag = ?1 + v.i
	FROM (SELECT key AS i, value->>0 AS ws, value->>1 AS name, value->>2 AS reason FROM json_each(?2)) AS v
	WHERE jobs.workspace = v.ws AND jobs.name = v.name AND +jobs.status = ?3
		AND coalesce(json_extract(jobs.doc, '$.pending_reason'), '') != v.reason`

func utcJob(j api.Job) api.Job {
	j.Etag = ""
	j.CreatedOn, j.StartTime, j.EndTime = j.CreatedOn.UTC(), j.StartTime.UTC(), j.EndTime.UTC()
	return j
}
