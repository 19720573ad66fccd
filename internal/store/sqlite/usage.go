package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/tideml/tide/internal/store"
)

// AddNodeUsage implements store.Tx.
func (x *tx) AddNodeUsage(ctx context.Context, u store.NodeUsage) error {
	_, err := x.exec(ctx, `INSERT INTO node_usage (workspace, compute, node, started, ended, price_per_hour) VALUES (?, ?, ?, ?, ?, ?)`,
		u.Workspace, u.Compute, u.Node, formatTime(u.Started), formatTime(u.Ended), u.PricePerHour)
	if err != nil {
		return fmt.Errorf("recording the usage of node %s: %w", u.Node, err)
	}
	return nil
}

// ListNodeUsage implements store.Tx.
func (x *tx) ListNodeUsage(ctx context.Context, workspace, compute string, since time.Time) ([]store.NodeUsage, error) {
	rows, err := x.query(ctx, `SELECT workspace, compute, node, started, ended, price_per_hour FROM node_usage
		WHERE workspace = ? AND (? = '' OR compute = ?) AND ended > ? ORDER BY id`, workspace, compute, compute, formatTime(since))
	if err != nil {
		return nil, fmt.Errorf("listing node usage: %w", err)
	}
	defer rows.Close()
	var out []store.NodeUsage
	for rows.Next() {
		var u store.NodeUsage
		var started, ended string
		if err := rows.Scan(&u.Workspace, &u.Compute, &u.Node, &started, &ended, &u.PricePerHour); err != nil {
			return nil, fmt.Errorf("listing node usage: %w", err)
		}
		if u.Started, err = parseTime(started); err != nil {
			return nil, err
		}
		if u.Ended, err = parseTime(ended); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}
