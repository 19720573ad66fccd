package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/tideml/tide/internal/store"
)

// AddNodeUsage implements store.Tx.
func (x *tx) AddNodeUsage(ctx context.Context, u store.NodeUsage) error {
	_, err := x.tx.Exec(ctx, `INSERT INTO node_usage (workspace, compute, node, started, ended, price_per_hour) VALUES ($1, $2, $3, $4, $5, $6)`,
		u.Workspace, u.Compute, u.Node, pgTime(u.Started), pgTime(u.Ended), u.PricePerHour)
	if err != nil {
		return fmt.Errorf("recording the usage of node %s: %w", u.Node, err)
	}
	return nil
}

// ListNodeUsage implements store.Tx.
func (x *tx) ListNodeUsage(ctx context.Context, workspace, compute string, since time.Time) ([]store.NodeUsage, error) {
	rows, err := x.tx.Query(ctx, `SELECT workspace, compute, node, started, ended, price_per_hour FROM node_usage
		WHERE workspace = $1 AND ($2 = '' OR compute = $2) AND ended > $3 ORDER BY id`, workspace, compute, pgTime(since))
	if err != nil {
		return nil, fmt.Errorf("listing node usage: %w", err)
	}
	defer rows.Close()
	var out []store.NodeUsage
	for rows.Next() {
		var u store.NodeUsage
		if err := rows.Scan(&u.Workspace, &u.Compute, &u.Node, &u.Started, &u.Ended, &u.PricePerHour); err != nil {
			return nil, fmt.Errorf("listing node usage: %w", err)
		}
		u.Started, u.Ended = u.Started.UTC(), u.Ended.UTC()
		out = append(out, u)
	}
	return out, rows.Err()
}
