package postgres

import (
	"context"
	"fmt"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// The batch writes run their rows' statements one after another: each of
// PutJob (with its events) and PutNode is one statement already here, and
// one INSERT of many rows could not take a job or node twice (ON CONFLICT
// updates a row once per statement).

// PutJobs implements store.Tx: PutJob's one statement per job (with its
// events).
func (x *tx) PutJobs(ctx context.Context, puts []store.JobPut) error {
	for _, p := range puts {
		if err := x.PutJob(ctx, p.Job, "", p.Events...); err != nil {
			return err
		}
	}
	return nil
}

// GetNodes implements store.Tx: one statement.
func (x *tx) GetNodes(ctx context.Context, ids []string) ([]api.Node, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := x.tx.Query(ctx, `SELECT doc, beat FROM nodes WHERE id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("getting %d nodes: %w", len(ids), err)
	}
	return scanNodes(rows)
}

// PutNodes implements store.Tx.
func (x *tx) PutNodes(ctx context.Context, ns []*api.Node) error {
	for _, n := range ns {
		if err := x.PutNode(ctx, n); err != nil {
			return err
		}
	}
	return nil
}
