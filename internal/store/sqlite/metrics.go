package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/tideml/tide/api"
)

// AddMetrics implements store.Tx.
func (x *tx) AddMetrics(ctx context.Context, workspace, job string, ms []api.Metric) error {
	for _, m := range ms {
		_, err := x.exec(ctx, `INSERT INTO metrics (workspace, job, seq, name, step, value, time) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (workspace, job, seq, name) DO NOTHING`, workspace, job, m.Seq, m.Name, m.Step, m.Value, formatTime(m.Time))
		if err != nil {
			return fmt.Errorf("adding metrics of job %s: %w", job, err)
		}
	}
	return nil
}

// ListMetrics implements store.Tx.
func (x *tx) ListMetrics(ctx context.Context, workspace, job, name string) ([]api.Metric, error) {
	var rows *sql.Rows
	var err error
	if name == "" {
		rows, err = x.query(ctx, `SELECT seq, name, step, value, time FROM metrics WHERE workspace = ? AND job = ? ORDER BY seq, name`, workspace, job)
	} else {
		rows, err = x.query(ctx, `SELECT seq, name, step, value, time FROM metrics WHERE workspace = ? AND job = ? AND name = ? ORDER BY seq`, workspace, job, name)
	}
	if err != nil {
		return nil, fmt.Errorf("listing metrics of job %s: %w", job, err)
	}
	defer rows.Close()
	var out []api.Metric
	for rows.Next() {
		var m api.Metric
		var t string
		if err := rows.Scan(&m.Seq, &m.Name, &m.Step, &m.Value, &t); err != nil {
			return nil, fmt.Errorf("listing metrics of job %s: %w", job, err)
		}
		if m.Time, err = parseTime(t); err != nil {
			return nil, fmt.Errorf("listing metrics of job %s: %w", job, err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
