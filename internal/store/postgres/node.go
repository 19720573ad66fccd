package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// A node is its record (doc) with its heartbeat fields (beat) overlaid:
// heartbeats write beat and last_seen alone, and only PutNode sets txid,
// the transaction ChangedNodes follows.

// GetNode implements store.Tx.
func (x *tx) GetNode(ctx context.Context, id string) (*api.Node, error) {
	var doc string
	var beat *string
	err := x.tx.QueryRow(ctx, `SELECT doc, beat FROM nodes WHERE id = $1`, id).Scan(&doc, &beat)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.NotFound("node", id)
	}
	if err != nil {
		return nil, fmt.Errorf("getting node %s: %w", id, err)
	}
	n, err := decodeNode(doc, beat)
	if err != nil {
		return nil, fmt.Errorf("decoding node %s: %w", id, err)
	}
	return &n, nil
}

func decodeNode(doc string, beat *string) (api.Node, error) {
	var b []byte
	if beat != nil {
		b = []byte(*beat)
	}
	return store.DecodeNode([]byte(doc), b)
}

// ListNodes implements store.Tx. An empty workspace or compute matches all.
func (x *tx) ListNodes(ctx context.Context, workspace, compute string) ([]api.Node, error) {
	rows, err := x.tx.Query(ctx, `SELECT doc, beat FROM nodes WHERE ($1 = '' OR workspace = $2) AND ($3 = '' OR compute = $4) ORDER BY id`,
		workspace, workspace, compute, compute)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return scanNodes(rows)
}

func scanNodes(rows pgx.Rows) ([]api.Node, error) {
	defer rows.Close()
	var out []api.Node
	for rows.Next() {
		var doc string
		var beat *string
		if err := rows.Scan(&doc, &beat); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		n, err := decodeNode(doc, beat)
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
	q, args, err := nodePut(n)
	if err != nil {
		return err
	}
	if _, err := x.tx.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("putting node %s: %w", n.ID, err)
	}
	return nil
}

// nodePut is PutNode's statement and its arguments.
func nodePut(n *api.Node) (string, []any, error) {
	if n.ID == "" {
		return "", nil, errors.New("node: id is empty")
	}
	doc, beat, seen, err := store.EncodeNode(n)
	if err != nil {
		return "", nil, err
	}
	return `INSERT INTO nodes (id, workspace, compute, doc, beat, last_seen, txid) VALUES ($1, $2, $3, $4, $5, $6, pg_current_xact_id())
		ON CONFLICT (id) DO UPDATE SET workspace = excluded.workspace, compute = excluded.compute, doc = excluded.doc,
			beat = excluded.beat, last_seen = excluded.last_seen, txid = excluded.txid`,
		[]any{n.ID, n.Workspace, n.Compute, string(doc), string(beat), seen}, nil
}

// ReleaseNode implements store.Tx, in a held write (lazyTx.holdWrite).
// The document's fields are set as
// EncodeNode writes them (a time in RFC 3339 with nanoseconds, UTC; no job
// field when there is none).
func (x *tx) ReleaseNode(ctx context.Context, id, assignment, state, reason string, now time.Time) error {
	args := []any{id, assignment, api.NodeRunning, state, now.UTC().Format(time.RFC3339Nano)}
	set := `(doc - 'job') || jsonb_build_object('state', $4::text, 'state_since', $5::text)`
	if reason != "" {
		set = `(doc - 'job') || jsonb_build_object('state', $4::text, 'state_since', $5::text, 'error', $6::text)`
		args = append(args, reason)
	}
	// Held: it goes with the transaction's next statement (the job's
	// write, in a report), not in a round trip of its own.
	x.tx.holdWrite("releasing node "+id, `UPDATE nodes SET txid = pg_current_xact_id(),
			doc = CASE WHEN doc ->> 'state' = $3 THEN `+set+` ELSE doc - 'job' END
		WHERE id = $1 AND doc ->> 'job' = $2`, args...)
	return nil
}

// DeleteNode implements store.Tx.
func (x *tx) DeleteNode(ctx context.Context, id string) error {
	return x.deleteOne(ctx, "node", id, `DELETE FROM nodes WHERE id = $1`, id)
}

// NodeCursor implements store.Tx: the oldest transaction still running when
// this transaction's snapshot was taken (see JobCursor).
func (x *tx) NodeCursor(ctx context.Context) (string, error) { return x.JobCursor(ctx) }

// ChangedNodes implements store.Tx. As ChangedJobs, it lists again the
// nodes of transactions at or after the cursor that had committed already.
func (x *tx) ChangedNodes(ctx context.Context, cursor string) ([]api.Node, int, string, error) {
	if _, err := strconv.ParseUint(cursor, 10, 64); err != nil {
		return nil, 0, "", fmt.Errorf("listing changed nodes: cursor %q is not one NodeCursor returned", cursor)
	}
	next, err := x.NodeCursor(ctx)
	if err != nil {
		return nil, 0, "", err
	}
	var total int
	if err := x.tx.QueryRow(ctx, `SELECT count(*) FROM nodes`).Scan(&total); err != nil {
		return nil, 0, "", fmt.Errorf("counting nodes: %w", err)
	}
	rows, err := x.tx.Query(ctx, `SELECT doc, beat FROM nodes WHERE txid >= $1::xid8 ORDER BY id`, cursor)
	if err != nil {
		return nil, 0, "", fmt.Errorf("listing changed nodes: %w", err)
	}
	ns, err := scanNodes(rows)
	return ns, total, next, err
}

// NodeBeats implements store.Tx. The rows are locked in ID order, as a
// batch of heartbeats then writes them.
func (x *tx) NodeBeats(ctx context.Context, ids []string) (map[string]store.NodeJobBeat, error) {
	out := make(map[string]store.NodeJobBeat, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := x.tx.Query(ctx, `SELECT id, coalesce(doc->>'job', ''), beat FROM nodes WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return nil, fmt.Errorf("getting the heartbeats of %d nodes: %w", len(ids), err)
	}
	var old []string // written before heartbeats had their column
	for rows.Next() {
		var id string
		var jb store.NodeJobBeat
		var beat *string
		if err := rows.Scan(&id, &jb.Job, &beat); err != nil {
			rows.Close()
			return nil, fmt.Errorf("getting the heartbeats of %d nodes: %w", len(ids), err)
		}
		if beat == nil {
			old = append(old, id)
			continue
		}
		if err := json.Unmarshal([]byte(*beat), &jb.Beat); err != nil {
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

// PutNodeBeats implements store.Tx: the heartbeats go as three arrays.
func (x *tx) PutNodeBeats(ctx context.Context, beats map[string]store.NodeBeat) error {
	if len(beats) == 0 {
		return nil
	}
	ids := make([]string, 0, len(beats))
	docs := make([]string, 0, len(beats))
	seens := make([]int64, 0, len(beats))
	for id, b := range beats {
		beat, seen, err := store.EncodeBeat(b)
		if err != nil {
			return fmt.Errorf("encoding the heartbeat of node %s: %w", id, err)
		}
		ids, docs, seens = append(ids, id), append(docs, string(beat)), append(seens, seen)
	}
	tag, err := x.tx.Exec(ctx, `UPDATE nodes SET beat = b.beat::jsonb, last_seen = b.seen
		FROM unnest($1::text[], $2::text[], $3::bigint[]) AS b(id, beat, seen) WHERE nodes.id = b.id`, ids, docs, seens)
	if err != nil {
		return fmt.Errorf("recording the heartbeats of %d nodes: %w", len(beats), err)
	}
	if int(tag.RowsAffected()) != len(beats) {
		return store.MissingNode(ctx, x, beats)
	}
	return nil
}

// NodesSeenBefore implements store.Tx.
func (x *tx) NodesSeenBefore(ctx context.Context, t time.Time) ([]store.NodeSeen, error) {
	rows, err := x.tx.Query(ctx, `SELECT id, last_seen FROM nodes WHERE last_seen < $1 ORDER BY id`, t.UnixNano())
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

// ComputeUtilizations implements store.Tx (a record from before
// heartbeats had their column holds the utilization in doc).
func (x *tx) ComputeUtilizations(ctx context.Context) (map[[2]string]store.ComputeUtilization, error) {
	rows, err := x.tx.Query(ctx, `SELECT workspace, compute, coalesce(sum((u->>'cpu_percent')::float8), 0),
		coalesce(sum((u->>'memory_bytes')::bigint), 0)::bigint, avg((u->>'gpu_percent')::float8)
		FROM (SELECT workspace, compute, coalesce(beat, doc)->'utilization' AS u FROM nodes) n
		WHERE u IS NOT NULL GROUP BY workspace, compute`)
	if err != nil {
		return nil, fmt.Errorf("summing the nodes' utilization: %w", err)
	}
	defer rows.Close()
	return store.ScanComputeUtilizations(rows)
}
