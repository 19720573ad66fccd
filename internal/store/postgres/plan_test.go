package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/store/postgres"
)

// TestQueuePositionReadsTheJobByKey checks the plan of a queued job's
// position (job show) with a queue of 2,000 jobs written just now, before
// any ANALYZE: the job is found by its primary key. With status in the
// same WHERE, PostgreSQL walked the whole queue's index to find it.
func TestQueuePositionReadsTheJobByKey(t *testing.T) {
	url := pgtest.Start(t)
	s := open(t, url)
	ctx := t.Context()
	err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "default"}); err != nil {
			return err
		}
		for i := range 2000 {
			j := &api.Job{Workspace: "default", Name: fmt.Sprintf("job%04d", i), Compute: "c", Status: api.JobQueued}
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "EXPLAIN "+postgres.QueuePositionQuery, "default", "job1999")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if !strings.Contains(plan, "jobs_pkey") {
		t.Errorf("the queue position does not read the job by its key:\n%s", plan)
	}
	err = s.View(ctx, func(tx store.Tx) error {
		pos, err := tx.QueuePosition(ctx, "default", "job1999")
		if err == nil && pos != 2000 {
			t.Errorf("position of the last of 2,000 queued jobs = %d, want 2000", pos)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
