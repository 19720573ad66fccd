package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// TestObserveCountsCommittedEvents: events count once their transaction
// commits, with the job's compute and times, and never when it rolls back.
func TestObserveCountsCommittedEvents(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(ctx, func(tx store.Tx) error {
		return tx.PutWorkspace(ctx, &api.Workspace{Name: api.DefaultWorkspace})
	}); err != nil {
		t.Fatal(err)
	}
	m := New(prometheus.NewRegistry())
	st := Observe(db, m)
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	job := &api.Job{Name: "j1", Workspace: api.DefaultWorkspace, Compute: "gpu", Command: "true", Status: api.JobQueued, CreatedOn: t0, Attempt: 1}
	put := func(j api.Job, kind string, fail bool) error {
		return st.Update(ctx, func(tx store.Tx) error {
			if err := tx.PutJob(ctx, &j, ""); err != nil {
				return err
			}
			if err := tx.AddEvent(ctx, j.Workspace, "job/"+j.Name, &api.Event{Time: t0, Kind: kind}); err != nil {
				return err
			}
			if fail {
				return errors.New("rolled back")
			}
			return nil
		})
	}
	if err := put(*job, api.JobQueued, true); err == nil {
		t.Fatal("the failing update succeeded")
	}
	if got := testutil.ToFloat64(m.jobsSubmitted.WithLabelValues("default", "gpu")); got != 0 {
		t.Fatalf("a rolled-back submit counted: %v", got)
	}
	if err := put(*job, api.JobQueued, false); err != nil {
		t.Fatal(err)
	}
	running := *job
	running.Status, running.StartTime = api.JobRunning, t0.Add(30*time.Second)
	if err := put(running, "Running", false); err != nil {
		t.Fatal(err)
	}
	done := running
	done.Status, done.EndTime = api.JobCompleted, running.StartTime.Add(2*time.Minute)
	if err := put(done, api.JobCompleted, false); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.jobsSubmitted.WithLabelValues("default", "gpu")); got != 1 {
		t.Errorf("submitted = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.jobsFinished.WithLabelValues("default", "gpu", api.JobCompleted)); got != 1 {
		t.Errorf("completed = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.queueWait); n != 1 {
		t.Errorf("queue wait series = %d, want 1", n)
	}
	if sum := histogramSum(t, m.jobDuration); sum != 120 {
		t.Errorf("job duration sum = %v s, want 120", sum)
	}
	if sum := histogramSum(t, m.queueWait); sum != 30 {
		t.Errorf("queue wait sum = %v s, want 30", sum)
	}
	if err := st.Update(ctx, func(tx store.Tx) error {
		n := &api.Node{ID: "gpu-1", Workspace: "default", Compute: "gpu", State: api.NodePreparing, CreatedOn: t0, StateSince: t0}
		if err := tx.PutNode(ctx, n); err != nil {
			return err
		}
		n.ProviderID = "pid" // written again, still preparing: not a second node
		return tx.PutNode(ctx, n)
	}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.nodesCreated.WithLabelValues("default", "gpu")); got != 1 {
		t.Errorf("nodes created = %v, want 1", got)
	}
}

// histogramSum returns the sum of a histogram vector's only series.
func histogramSum(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].Metric) != 1 {
		t.Fatalf("gathering: %v, %d families", err, len(mfs))
	}
	return mfs[0].Metric[0].GetHistogram().GetSampleSum()
}
