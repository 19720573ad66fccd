package controller

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
)

// heldNodes is a store whose sums of the nodes' utilization wait until
// release is closed, once held is set; it counts the lists of every node
// made meanwhile.
type heldNodes struct {
	store.Store
	held    atomic.Bool
	release chan struct{}
	listed  atomic.Int64
}

func (h *heldNodes) View(ctx context.Context, fn func(store.Tx) error) error {
	if !h.held.Load() {
		return h.Store.View(ctx, fn)
	}
	return h.Store.View(ctx, func(tx store.Tx) error { return fn(heldTx{Tx: tx, h: h}) })
}

type heldTx struct {
	store.Tx
	h *heldNodes
}

func (x heldTx) ComputeUtilizations(ctx context.Context) (map[[2]string]store.ComputeUtilization, error) {
	<-x.h.release
	return x.Tx.ComputeUtilizations(ctx)
}

func (x heldTx) ListNodes(ctx context.Context, ws, compute string) ([]api.Node, error) {
	if ws == "" && compute == "" {
		x.h.listed.Add(1)
	}
	return x.Tx.ListNodes(ctx, ws, compute)
}

// TestSamplesDoNotHoldTheTurn checks that a turn whose compute samples are
// due does not wait for them: the samples need the nodes' utilization
// (10,000 nodes at scale), which a goroutine of their own has the store
// sum, and write what the turn counted (its jobs, its nodes by state)
// with it once it is read. Neither reads every node (at 10,000 nodes
// that read and its decoding were several seconds' worth of heartbeats).
func TestSamplesDoNotHoldTheTurn(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 9, 0, 30, 0, time.UTC)
	st := &heldNodes{Store: openSQLite(t), release: make(chan struct{})}
	mustUpdate(t, st.Store, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, &api.Compute{Workspace: "ws", Name: "cpu", Size: "Standard_DS3_v2", Location: "local", MaxInstances: 1,
			ProvisioningState: api.ProvisioningSucceeded}, ""); err != nil {
			return err
		}
		if err := tx.PutJob(ctx, &api.Job{Workspace: "ws", Name: "run", Type: api.JobTypeCommand, Compute: "cpu", Status: api.JobRunning,
			Attempt: 1, Ranks: []api.JobRank{{Node: "n1", Status: api.JobRunning}}}, ""); err != nil {
			return err
		}
		if err := tx.PutJob(ctx, &api.Job{Workspace: "ws", Name: "wait", Type: api.JobTypeCommand, Compute: "cpu", Status: api.JobQueued}, ""); err != nil {
			return err
		}
		return tx.PutNode(ctx, &api.Node{ID: "n1", Workspace: "ws", Compute: "cpu", Location: "local", State: api.NodeRunning, Job: "ws/run/1",
			LastHeartbeat: now, Utilization: &api.NodeUtilization{CPUPercent: 40}})
	})
	cfg := config.Default()
	cfg.UnusableAfter = time.Hour
	c := New(Options{Store: st, Catalog: catalog.Default(), Config: cfg, Log: slog.New(slog.DiscardHandler), Changes: NewBroadcast(),
		Now: func() time.Time { return now }})
	// The first turn reads every node (its feed starts) and samples.
	if _, err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	waitSample := func(at time.Time) api.ComputeSample {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no compute sample at %s written 10 s after the turn", at)
			}
			var got []api.ComputeSample
			if err := st.Store.View(ctx, func(tx store.Tx) (err error) {
				got, err = tx.ListComputeSamples(ctx, "ws", "cpu", at)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			for _, smp := range got {
				if smp.Time.Equal(at) {
					return smp
				}
			}
		}
	}
	waitSample(now.Truncate(time.Minute))
	now = now.Add(time.Minute)
	st.held.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := c.Step(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(st.release)
		t.Fatal("the turn waited for the samples' read of the nodes' utilization")
	}
	close(st.release)
	smp := waitSample(now.Truncate(time.Minute))
	if !smp.Time.Equal(now.Truncate(time.Minute)) || smp.Running != 1 || smp.Queued != 1 || smp.Nodes.Running != 1 || smp.CPUPercent != 40 {
		t.Errorf("sample = %+v, want at %s: 1 running, 1 queued, 1 running node at 40 %% CPU", smp, now.Truncate(time.Minute))
	}
	if n := st.listed.Load(); n != 0 {
		t.Errorf("the turn and its samples listed every node %d times, want none (the kept nodes, the store's sums)", n)
	}
}
