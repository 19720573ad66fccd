package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/sqlite"
)

// unlisted is a store whose transactions fail the test on ListJobs.
type unlisted struct {
	store.Store
	t *testing.T
}

func (s unlisted) View(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.View(ctx, func(tx store.Tx) error { return fn(unlistedTx{Tx: tx, t: s.t}) })
}

type unlistedTx struct {
	store.Tx
	t *testing.T
}

func (x unlistedTx) ListJobs(ctx context.Context, f store.JobFilter) ([]api.Job, error) {
	x.t.Errorf("a scrape listed jobs (%+v), want them counted by the store (CountJobs)", f)
	return x.Tx.ListJobs(ctx, f)
}

// TestScrapeCountsJobs: tide_jobs counts the unfinished jobs by
// workspace, compute and status, and the scrape has the store count them
// (store.Tx.CountJobs) instead of listing and decoding every job.
func TestScrapeCountsJobs(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "tide.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	jobs := []api.Job{
		{Workspace: "a", Name: "q1", Compute: "cpu", Status: api.JobQueued},
		{Workspace: "a", Name: "q2", Compute: "cpu", Status: api.JobQueued},
		{Workspace: "a", Name: "r1", Compute: "cpu", Status: api.JobRunning},
		{Workspace: "a", Name: "done", Compute: "cpu", Status: api.JobCompleted},
		{Workspace: "b", Name: "q1", Compute: "gpu", Status: api.JobQueued},
	}
	if err := st.Update(ctx, func(tx store.Tx) error {
		for _, ws := range []string{"a", "b"} {
			if err := tx.PutWorkspace(ctx, &api.Workspace{Name: ws}); err != nil {
				return err
			}
		}
		for _, j := range jobs {
			j.Type = api.JobTypeCommand
			if err := tx.PutJob(ctx, &j, ""); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(unlisted{Store: st, t: t}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[[3]string]float64{}
	for _, f := range families {
		if f.GetName() != "tide_jobs" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[[3]string{l["workspace"], l["compute"], l["status"]}] = m.GetGauge().GetValue()
		}
	}
	want := map[[3]string]float64{{"a", "cpu", api.JobQueued}: 2, {"a", "cpu", api.JobRunning}: 1, {"b", "gpu", api.JobQueued}: 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tide_jobs = %v, want %v", got, want)
	}
}
