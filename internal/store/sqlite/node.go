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
func (x *tx) ReleaseNode(ctx context.Context, id, assignment, state, reason string, now time.Time) error {
	rev, err := x.nextRevision(ctx)
	if err != nil {
		return err
	}
	args := []any{id, assignment, rev, api.NodeRunning, state, now.UTC().Format(time.RFC3339Nano)}
	set := `json_set(json_remove(doc, '$.job'), '$.state', ?5, '$.state_since', ?6)`
	if reason != "" {
		set = `json_set(json_remove(doc, '$.job'), '$.state', ?5, '$.state_since', ?6, '$.error', ?7)`
		args = append(args, reason)
	}
	_, err = x.exec(ctx, `UPDATE nodes SET rev = ?3,
			doc = CASE WHEN doc ->> '$.state' = ?4 THEN `+set+` ELSE json_remove(doc, '$.job') END
		WHERE id = ?1 AND doc ->> '$.job' = ?2`, args...)
	if err != nil {
		return fmt.Errorf("releasing node %s: %w", id, err)
	}
	return nil
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

// The statements of a batch of heartbeats: each finds its nodes by ID
// (TestFeedQueriesUseTheirIndexes).
const (
	nodeBeatsQuery    = `SELECT id, coalesce(json_extract(doc, '$.job'), ''), beat FROM nodes WHERE id IN (SELECT value FROM json_each(?))`
	putNodeBeatsQuery = `UPDATE nodes SET beat = json_extract(b.value, '$[0]'), last_seen = json_extract(b.value, '$[1]')
		FROM json_each(?) AS b WHERE nodes.id = b.key`
)

// NodeBeats implements store.Tx: the IDs go as one JSON array.
func (x *tx) NodeBeats(ctx context.Context, ids []string) (map[string]store.NodeJobBeat, error) {
	out := make(map[string]store.NodeJobBeat, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := x.query(ctx, nodeBeatsQuery, string(list))
	if err != nil {
		return nil, fmt.Errorf("getting the heartbeats of %d nodes: %w", len(ids), err)
	}
	var old []string // written before heartbeats had their column
	for rows.Next() {
		var id string
		var jb store.NodeJobBeat
		var beat sql.NullString
		if err := rows.Scan(&id, &jb.Job, &beat); err != nil {
			rows.Close()
			return nil, fmt.Errorf("getting the heartbeats of %d nodes: %w", len(ids), err)
		}
		if !beat.Valid {
			old = append(old, id)
			continue
		}
		if err := json.Unmarshal([]byte(beat.String), &jb.Beat); err != nil {
			rows.Close()
			return nil, fmt.Errorf("decoding node %s: %w", id, err)
		}
		out[id] = jb
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("getting the heartbeats of %d nodes: %w", len(ids), err)
	}
	for _, id := range old {
		n, err := x.GetNode(ctx, id)
		if err != nil {
			return nil, err
		}
		out[id] = store.NodeJobBeat{Job: n.Job, Beat: store.BeatOf(n)}
	}
	return out, nil
}

// PutNodeBeats implements store.Tx: the heartbeats go as one JSON object,
// {ID: [beat, last_seen]}.
func (x *tx) PutNodeBeats(ctx context.Context, beats map[string]store.NodeBeat) error {
	if len(beats) == 0 {
		return nil
	}
	rows := make(map[string][2]any, len(beats))
	for id, b := range beats {
		beat, seen, err := store.EncodeBeat(b)
		if err != nil {
			return fmt.Errorf("encoding the heartbeat of node %s: %w", id, err)
		}
		rows[id] = [2]any{string(beat), seen}
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	res, err := x.exec(ctx, putNodeBeatsQuery, string(arg))
	if err != nil {
		return fmt.Errorf("recording the heartbeats of %d nodes: %w", len(beats), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("recording the heartbeats of %d nodes: %w", len(beats), err)
	}
	if int(n) != len(beats) {
		return store.MissingNode(ctx, x, beats)
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

// computeUtilizationsQuery sums the utilization of each compute's nodes
// (a record from before heartbeats had their column holds it in doc).
const computeUtilizationsQuery = `SELECT workspace, compute, total(u ->> '$.cpu_percent'), coalesce(sum(u ->> '$.memory_bytes'), 0), avg(u ->> '$.gpu_percent')
	FROM (SELECT workspace, compute, coalesce(beat, doc) -> '$.utilization' AS u FROM nodes) WHERE u IS NOT NULL GROUP BY workspace, compute`

// ComputeUtilizations implements store.Tx.
func (x *tx) ComputeUtilizations(ctx context.Context) (map[[2]string]store.ComputeUtilization, error) {
	rows, err := x.query(ctx, computeUtilizationsQuery)
	if err != nil {
		return nil, fmt.Errorf("summing the nodes' utilization: %w", err)
	}
	defer rows.Close()
	return store.ScanComputeUtilizations(rows)
}
