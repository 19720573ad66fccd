package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tideml/tide/api"
)

// AddComputeSample implements store.Tx.
func (x *tx) AddComputeSample(ctx context.Context, workspace, compute string, s api.ComputeSample) error {
	doc, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = x.exec(ctx, `INSERT INTO compute_samples (workspace, compute, at, doc) VALUES (?, ?, ?, ?)
		ON CONFLICT (workspace, compute, at) DO UPDATE SET doc = excluded.doc`, workspace, compute, formatTime(s.Time), string(doc))
	if err != nil {
		return fmt.Errorf("recording a sample of compute %s: %w", compute, err)
	}
	return nil
}

// ListComputeSamples implements store.Tx.
func (x *tx) ListComputeSamples(ctx context.Context, workspace, compute string, since time.Time) ([]api.ComputeSample, error) {
	rows, err := x.query(ctx, `SELECT doc FROM compute_samples WHERE workspace = ? AND compute = ? AND at >= ? ORDER BY at`,
		workspace, compute, formatTime(since))
	if err != nil {
		return nil, fmt.Errorf("listing samples of compute %s: %w", compute, err)
	}
	defer rows.Close()
	var out []api.ComputeSample
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return nil, err
		}
		var s api.ComputeSample
		if err := json.Unmarshal([]byte(doc), &s); err != nil {
			return nil, fmt.Errorf("decoding a sample of compute %s: %w", compute, err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// PruneComputeSamples implements store.Tx.
func (x *tx) PruneComputeSamples(ctx context.Context, before time.Time) error {
	_, err := x.exec(ctx, `DELETE FROM compute_samples WHERE at < ?`, formatTime(before))
	return err
}
