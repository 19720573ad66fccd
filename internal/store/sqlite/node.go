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

// A node is its record (doc) with its heartbeat fields (beat) overlaid:
// heartbeats write beat and last_seen alone, and only PutNode takes a
// revision (rev), the position ChangedNodes follows.

// GetNode implements store.Tx.
func (x *tx) GetNode(ctx context.Context, id string) (*api.Node, error) {
	var doc string
	var beat sql.NullString
	err := x.queryRow(ctx, `SELECT doc, beat FROM nodes WHERE id = ?`, id).Scan(&doc, &beat)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NotFound("node", id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting node %s: %w", id, err)
	}
	n, err := store.DecodeNode([]byte(doc), []byte(beat.String))
	if err != nil {
		return nil, fmt.Errorf("decoding node %s: %w", id, err)
	}
	return &n, nil
}

// ListNodes implements store.Tx. An empty workspace or compute matches all.
func (x *tx) ListNodes(ctx context.Context, workspace, compute string) ([]api.Node, error) {
	rows, err := x.query(ctx, `SELECT doc, beat FROM nodes WHERE (? = '' OR workspace = ?) AND (? = '' OR compute = ?) ORDER BY id`,
		workspace, workspace, compute, compute)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return scanNodes(rows)
}

func scanNodes(rows *sql.Rows) ([]api.Node, error) {
	defer rows.Close()
	var out []api.Node
	for rows.Next() {
		var doc string
		var beat sql.NullString
		if err := rows.Scan(&doc, &beat); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		n, err := store.DecodeNode([]byte(doc), []byte(beat.String))
		if err != nil {
			return nil, fmt.Errorf("decoding nodes: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return out, nil
}

// PutNode implements store.Tx.
func (x *tx) PutNode(ctx context.Context, n *api.Node) error {
	if n.ID == "" {
		return errors.New("node: id is empty")
	}
	doc, beat, seen, err := store.EncodeNode(n)
	if err != nil {
		return err
	}
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return err
	}
	_, err = x.exec(ctx, `INSERT INTO nodes (id, workspace, compute, doc, beat, last_seen, rev) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET workspace = excluded.workspace, compute = excluded.compute, doc = excluded.doc,
			beat = excluded.beat, last_seen = excluded.last_seen, rev = excluded.rev`,
		n.ID, n.Workspace, n.Compute, string(doc), string(beat), seen, rev)
	if err != nil {
		return fmt.Errorf("putting node %s: %w", n.ID, err)
	}
	return nil
}

// ReleaseNode implements store.Tx. The document's fields are set as
// EncodeNode writes them (a time in RFC 3339 with nanoseconds, UTC; no job
// field when there is none).
func (x *tx) ReleaseNode(ctx context.Context, id, assignment, state, reason string, now time.Time) (bool, error) {
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return false, err
	}
	args := []any{id, assignment, rev, api.NodeRunning, state, now.UTC().Format(time.RFC3339Nano)}
	set := `json_set(json_remove(doc, '$.job'), '$.state', ?5, '$.state_since', ?6)`
	if reason != "" {
		set = `json_set(json_remove(doc, '$.job'), '$.state', ?5, '$.state_since', ?6, '$.error', ?7)`
		args = append(args, reason)
	}
	res, err := x.exec(ctx, `UPDATE nodes SET rev = ?3,
			doc = CASE WHEN doc ->> '$.state' = ?4 THEN `+set+` ELSE json_remove(doc, '$.job') END
		WHERE id = ?1 AND doc ->> '$.job' = ?2`, args...)
	if err != nil {
		return false, fmt.Errorf("releasing node %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("releasing node %s: %w", id, err)
	}
	return n > 0, nil
}

// DeleteNode implements store.Tx.
func (x *tx) DeleteNode(ctx context.Context, id string) error {
	return x.deleteOne(ctx, "node", id, `DELETE FROM nodes WHERE id = ?`, id)
}

// NodeCursor implements store.Tx: the last revision this transaction sees
// (see JobCursor).
func (x *tx) NodeCursor(ctx context.Context) (string, error) { return x.JobCursor(ctx) }

// changedNodesQuery lists the nodes written after a revision, and
// nodesSeenBeforeQuery the nodes silent since a time. "+id", as in
// changedJobsQuery: ordered by the primary key, SQLite scanned every node;
// this way it reads the few from nodes_by_rev or nodes_by_last_seen.
const (
	changedNodesQuery    = `SELECT doc, beat FROM nodes WHERE rev > ? ORDER BY +id`
	nodesSeenBeforeQuery = `SELECT id, last_seen FROM nodes WHERE last_seen < ? ORDER BY +id`
)

// ChangedNodes implements store.Tx.
func (x *tx) ChangedNodes(ctx context.Context, cursor string) ([]api.Node, int, string, error) {
	after, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil {
		return nil, 0, "", fmt.Errorf("listing changed nodes: cursor %q is not one NodeCursor returned", cursor)
	}
	next, err := x.NodeCursor(ctx)
	if err != nil {
		return nil, 0, "", err
	}
	var total int
	if err := x.queryRow(ctx, `SELECT count(*) FROM nodes`).Scan(&total); err != nil {
		return nil, 0, "", fmt.Errorf("counting nodes: %w", err)
	}
	rows, err := x.query(ctx, changedNodesQuery, after)
	if err != nil {
		return nil, 0, "", fmt.Errorf("listing changed nodes: %w", err)
	}
	ns, err := scanNodes(rows)
	return ns, total, next, err
}

// GetNodeBeat implements store.Tx.
func (x *tx) GetNodeBeat(ctx context.Context, id string) (string, store.NodeBeat, error) {
	var job string
	var beat sql.NullString
	err := x.queryRow(ctx, `SELECT coalesce(json_extract(doc, '$.job'), ''), beat FROM nodes WHERE id = ?`, id).Scan(&job, &beat)
	if errors.Is(err, sql.ErrNoRows) {
		return "", store.NodeBeat{}, store.NotFound("node", id)
	}
	if err != nil {
		return "", store.NodeBeat{}, fmt.Errorf("getting node %s: %w", id, err)
	}
	if !beat.Valid { // written before heartbeats had their column
		n, err := x.GetNode(ctx, id)
		if err != nil {
			return "", store.NodeBeat{}, err
		}
		return n.Job, store.BeatOf(n), nil
	}
	var b store.NodeBeat
	if err := json.Unmarshal([]byte(beat.String), &b); err != nil {
		return "", store.NodeBeat{}, fmt.Errorf("decoding node %s: %w", id, err)
	}
	return job, b, nil
}

// PutNodeBeat implements store.Tx.
func (x *tx) PutNodeBeat(ctx context.Context, id string, b store.NodeBeat) error {
	beat, seen, err := store.EncodeBeat(b)
	if err != nil {
		return fmt.Errorf("encoding the heartbeat of node %s: %w", id, err)
	}
	res, err := x.exec(ctx, `UPDATE nodes SET beat = ?, last_seen = ? WHERE id = ?`, string(beat), seen, id)
	if err != nil {
		return fmt.Errorf("recording the heartbeat of node %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return fmt.Errorf("recording the heartbeat of node %s: %w", id, err)
		}
		return store.NotFound("node", id)
	}
	return nil
}

// NodesSeenBefore implements store.Tx.
func (x *tx) NodesSeenBefore(ctx context.Context, t time.Time) ([]store.NodeSeen, error) {
	rows, err := x.query(ctx, nodesSeenBeforeQuery, t.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("listing silent nodes: %w", err)
	}
	defer rows.Close()
	var out []store.NodeSeen
	for rows.Next() {
		var s store.NodeSeen
		var ns int64
		if err := rows.Scan(&s.ID, &ns); err != nil {
			return nil, fmt.Errorf("listing silent nodes: %w", err)
		}
		s.LastSeen = store.SeenAt(ns)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing silent nodes: %w", err)
	}
	return out, nil
}
