package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tideml/tide/api"
)

// AddMetrics implements store.Tx.
func (x *tx) AddMetrics(ctx context.Context, workspace, job string, ms []api.Metric) error {
	for _, m := range ms {
		_, err := x.tx.Exec(ctx, `INSERT INTO metrics (workspace, job, seq, name, step, value, time) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (workspace, job, seq, name) DO NOTHING`, workspace, job, m.Seq, m.Name, m.Step, m.Value, pgTime(m.Time))
		if err != nil {
			return fmt.Errorf("adding metrics of job %s: %w", job, err)
		}
	}
	return nil
}

// ListMetrics implements store.Tx.
func (x *tx) ListMetrics(ctx context.Context, workspace, job, name string) ([]api.Metric, error) {
	var rows pgx.Rows
	var err error
	if name == "" {
		rows, err = x.tx.Query(ctx, `SELECT seq, name, step, value, time FROM metrics WHERE workspace = $1 AND job = $2 ORDER BY seq, name`, workspace, job)
	} else {
		rows, err = x.tx.Query(ctx, `SELECT seq, name, step, value, time FROM metrics WHERE workspace = $1 AND job = $2 AND name = $3 ORDER BY seq`, workspace, job, name)
	}
	if err != nil {
		return nil, fmt.Errorf("listing metrics of job %s: %w", job, err)
	}
	defer rows.Close()
	var out []api.Metric
	for rows.Next() {
		var m api.Metric
		if err := rows.Scan(&m.Seq, &m.Name, &m.Step, &m.Value, &m.Time); err != nil {
			return nil, fmt.Errorf("listing metrics of job %s: %w", job, err)
		}
		m.Time = m.Time.UTC()
		out = append(out, m)
	}
	return out, rows.Err()
}
