package sqlite

import (
	"context"
	"fmt"

	"github.com/tideml/tide/api"
)

// lineKey identifies a log line as its agent sent it.
type lineKey struct {
	attempt, node int
	nodeSeq       int64
}

// nextSeqs reserves n seqs in a counter and returns the first.
func (x *tx) nextSeqs(ctx context.Context, workspace, scope string, n int) (int64, error) {
	var last int64
	err := x.queryRow(ctx, `INSERT INTO counters (workspace, scope, last) VALUES (?, ?, ?)
		ON CONFLICT (workspace, scope) DO UPDATE SET last = counters.last + excluded.last
		RETURNING last`, workspace, scope, n).Scan(&last)
	if err != nil {
		return 0, fmt.Errorf("counting %s: %w", scope, err)
	}
	return last - int64(n) + 1, nil
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
		rows, err := x.query(ctx, `SELECT node_seq, seq FROM logs
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
	rows, err := x.query(ctx, `SELECT seq, attempt, node, node_seq, time, stream, text FROM logs
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

// AddEvent implements store.Tx. An event's seq follows the last of its
// resource's, read from the events' own key in the same statement: events
// are never deleted, so no seq is ever handed out twice, and SQLite's one
// writer runs one such statement at a time. (It was a counter's, written
// apart: two statements and two tables written per event, over half of the
// events' cost.)
func (x *tx) AddEvent(ctx context.Context, workspace, resource string, e *api.Event) error {
	var seq int64
	err := x.queryRow(ctx, `INSERT INTO events (workspace, resource, seq, time, kind, message)
		SELECT ?1, ?2, COALESCE(MAX(seq), 0) + 1, ?3, ?4, ?5 FROM events WHERE workspace = ?1 AND resource = ?2
		RETURNING seq`, workspace, resource, formatTime(e.Time), e.Kind, e.Message).Scan(&seq)
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
	rows, err := x.query(ctx, `SELECT seq, time, kind, message FROM events
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
