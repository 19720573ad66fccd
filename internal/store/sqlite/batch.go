package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// The batch writes pass their rows as one JSON array, read back with
// json_each: one statement for all the rows, where a statement each cost a
// controller turn's placements most of their time (each statement is a
// prepare lookup, a bind and a step through database/sql and the driver).

// takeRevisions returns the first of n new consecutive revisions, taken
// as nextRevision takes one (the row is saved before the commit).
func (x *tx) takeRevisions(ctx context.Context, n int) (int64, error) {
	first, err := x.nextRevision(ctx)
	if err != nil {
		return 0, err
	}
	x.rev += int64(n - 1)
	return first, nil
}

// PutJobs implements store.Tx. Nothing is read first, as in PutJob: a new
// job's created is its revision, and the upsert keeps a stored job's.
func (x *tx) PutJobs(ctx context.Context, puts []store.JobPut) error {
	if len(puts) == 0 {
		return nil
	}
	js := make([]*api.Job, len(puts))
	var es []jobEvent
	for i, p := range puts {
		js[i] = p.Job
		for _, e := range p.Events {
			es = append(es, jobEvent{p.Job, e})
		}
	}
	first, err := x.takeRevisions(ctx, len(js))
	if err != nil {
		return err
	}
	vals := make([][]any, len(js))
	for i, j := range js {
		if j.Name == "" || j.Workspace == "" {
			return fmt.Errorf("job %q in workspace %q: name and workspace must be set", j.Name, j.Workspace)
		}
		doc, err := json.Marshal(utcJob(*j))
		if err != nil {
			return fmt.Errorf("encoding job %s: %w", j.Name, err)
		}
		vals[i] = []any{j.Workspace, j.Name, j.Compute, j.Status, first + int64(i), string(doc), j.Priority()}
	}
	arg, err := json.Marshal(vals)
	if err != nil {
		return fmt.Errorf("putting %d jobs: %w", len(js), err)
	}
	// "WHERE true": SQLite's parser needs it between a SELECT and ON
	// CONFLICT. Rows are written in the array's order.
	_, err = x.exec(ctx, `INSERT INTO jobs (workspace, name, compute, status, created, etag, doc, priority)
		SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>4, value->>5, value->>6
		FROM json_each(?) WHERE true ORDER BY key
		ON CONFLICT (workspace, name) DO UPDATE SET
			compute = excluded.compute, status = excluded.status, etag = excluded.etag, doc = excluded.doc,
			priority = excluded.priority`, string(arg))
	if err != nil {
		// A new job's missing workspace fails the foreign key: say which.
		for _, j := range js {
			if werr := x.requireWorkspace(ctx, j.Workspace); store.IsNotFound(werr) {
				return fmt.Errorf("job %s: %w", j.Name, werr)
			}
		}
		return fmt.Errorf("putting %d jobs: %w", len(js), err)
	}
	for i, j := range js {
		j.Etag = strconv.FormatInt(first+int64(i), 10)
	}
	return x.addEvents(ctx, es)
}

// jobEvent is an event to record on a job.
type jobEvent struct {
	job *api.Job
	e   *api.Event
}

// GetNodes implements store.Tx.
func (x *tx) GetNodes(ctx context.Context, ids []string) ([]api.Node, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	arg, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("getting %d nodes: %w", len(ids), err)
	}
	rows, err := x.query(ctx, `SELECT doc, beat FROM nodes WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`, string(arg))
	if err != nil {
		return nil, fmt.Errorf("getting %d nodes: %w", len(ids), err)
	}
	return scanNodes(rows)
}

// PutNodes implements store.Tx.
func (x *tx) PutNodes(ctx context.Context, ns []*api.Node) error {
	if len(ns) == 0 {
		return nil
	}
	if slices.ContainsFunc(ns, func(n *api.Node) bool { return n.ID == "" }) {
		return errors.New("node: id is empty")
	}
	first, err := x.takeRevisions(ctx, len(ns))
	if err != nil {
		return err
	}
	vals := make([][]any, len(ns))
	for i, n := range ns {
		doc, beat, seen, err := store.EncodeNode(n)
		if err != nil {
			return err
		}
		vals[i] = []any{n.ID, n.Workspace, n.Compute, string(doc), string(beat), seen, first + int64(i)}
	}
	arg, err := json.Marshal(vals)
	if err != nil {
		return fmt.Errorf("putting %d nodes: %w", len(ns), err)
	}
	_, err = x.exec(ctx, `INSERT INTO nodes (id, workspace, compute, doc, beat, last_seen, rev)
		SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6
		FROM json_each(?) WHERE true ORDER BY key
		ON CONFLICT (id) DO UPDATE SET workspace = excluded.workspace, compute = excluded.compute, doc = excluded.doc,
			beat = excluded.beat, last_seen = excluded.last_seen, rev = excluded.rev`, string(arg))
	if err != nil {
		return fmt.Errorf("putting %d nodes: %w", len(ns), err)
	}
	return nil
}

// addEvents records each event as AddEvent does (setting its Seq), in one
// statement: each event's seq follows the last of its job's, as in
// AddEvent, and events of one job take consecutive ones in es' order
// (row_number).
func (x *tx) addEvents(ctx context.Context, es []jobEvent) error {
	if len(es) == 0 {
		return nil
	}
	vals := make([][]any, len(es))
	for i, e := range es {
		vals[i] = []any{e.job.Workspace, "job/" + e.job.Name, formatTime(e.e.Time), e.e.Kind, e.e.Message}
	}
	arg, err := json.Marshal(vals)
	if err != nil {
		return fmt.Errorf("adding %d events: %w", len(es), err)
	}
	rows, err := x.query(ctx, `INSERT INTO events (workspace, resource, seq, time, kind, message)
		SELECT ws, res, (SELECT COALESCE(MAX(seq), 0) FROM events e WHERE e.workspace = v.ws AND e.resource = v.res)
			+ row_number() OVER (PARTITION BY ws, res ORDER BY i), t, kind, msg
		FROM (SELECT key AS i, value->>0 AS ws, value->>1 AS res, value->>2 AS t, value->>3 AS kind, value->>4 AS msg
			FROM json_each(?)) v
		WHERE true ORDER BY i
		RETURNING workspace, resource, seq`, string(arg))
	if err != nil {
		return fmt.Errorf("adding %d events: %w", len(es), err)
	}
	// Each resource's seqs, lowest first, go to its events in es' order.
	seqs := map[[2]string][]int64{}
	for rows.Next() {
		var k [2]string
		var seq int64
		if err := rows.Scan(&k[0], &k[1], &seq); err != nil {
			rows.Close()
			return fmt.Errorf("adding %d events: %w", len(es), err)
		}
		seqs[k] = append(seqs[k], seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("adding %d events: %w", len(es), err)
	}
	for _, s := range seqs {
		slices.Sort(s)
	}
	for _, e := range es {
		k := [2]string{e.job.Workspace, "job/" + e.job.Name}
		if len(seqs[k]) == 0 {
			return fmt.Errorf("adding %d events: no seq returned for job %s", len(es), e.job.Name)
		}
		e.e.Seq, seqs[k] = seqs[k][0], seqs[k][1:]
	}
	return nil
}
