package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// The batch writes send their rows' statements together, in one round
// trip (a pgx batch, whose statements PostgreSQL runs one after another,
// or held writes, sent with the next statement):
// each of PutJob (with its events) and PutNode is one statement already,
// and one INSERT of many rows could not take a job or node twice (ON
// CONFLICT updates a row once per statement).

// PutJobs implements store.Tx: PutJob's statement per job, in one round
// trip.
func (x *tx) PutJobs(ctx context.Context, puts []store.JobPut) error {
	if len(puts) == 1 {
		return x.PutJob(ctx, puts[0].Job, "", puts[0].Events...)
	}
	ps := make([]*aJobPut, len(puts))
	b := &pgx.Batch{}
	for i, p := range puts {
		var err error
		if ps[i], err = jobPut(p.Job, "", p.Events); err != nil {
			return err
		}
		b.Queue(ps[i].q, ps[i].args...)
	}
	br := x.tx.SendBatch(ctx, b)
	for _, p := range ps {
		if err := p.scan(br.QueryRow()); err != nil {
			_ = br.Close()
			if errors.Is(err, pgx.ErrNoRows) {
				// (The read saying why goes once the batch is closed.)
				return x.whyJobNotPut(ctx, p.j, "")
			}
			return err
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("putting %d jobs: %w", len(puts), err)
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

// PutNodes implements store.Tx: PutNode's statement per node, held
// (lazyTx.holdWrite): they go with the transaction's next statement (a
// turn's placements: with their jobs' writes), in its round trip.
func (x *tx) PutNodes(ctx context.Context, ns []*api.Node) error {
	for _, n := range ns {
		q, args, err := nodePut(n)
		if err != nil {
			return err
		}
		x.tx.holdWrite("putting node "+n.ID, q, args...)
	}
	return nil
}
