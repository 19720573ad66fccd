package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
)

// TestComputeHistory: the controller samples a compute's state (here every
// 200 ms), and the history shows it go 0 -> 1 node (busy, with its job
// running) -> 0.
func TestComputeHistory(t *testing.T) {
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) { c.SampleInterval = 200 * time.Millisecond })
	t.Cleanup(func() { cleanup(t, in) })
	ctx := context.Background()
	createCompute(t, in, "name: charted\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 1\nidle_time_before_scale_down: 1\n")
	j := submit(t, in, "command: sleep 2\ncompute: charted\n")
	if got := waitJob(t, in, j.Name, 60*time.Second); got.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", got.Status, got.Error)
	}
	waitFor(t, "the history to show 0 -> 1 -> 0 nodes", 60*time.Second, func() bool {
		hs, err := in.client.ComputeHistory(ctx, "default", "charted", "1h", 0)
		if err != nil || len(hs) == 0 {
			return false
		}
		sawBusy, zeroAfter := false, false
		for _, h := range hs {
			if h.Nodes.Running == 1 && h.Running == 1 {
				sawBusy = true
			}
			if sawBusy && h.Nodes.Running+h.Nodes.Idle+h.Nodes.Preparing == 0 {
				zeroAfter = true
			}
		}
		return hs[0].Nodes.Running == 0 && sawBusy && zeroAfter
	})
	few, err := in.client.ComputeHistory(ctx, "default", "charted", "1h", 3)
	if err != nil || len(few) > 3 || len(few) == 0 {
		t.Fatalf("3 buckets: %d samples, %v", len(few), err)
	}
	peak := 0
	for _, h := range few {
		peak = max(peak, h.Nodes.Running)
	}
	if peak != 1 {
		t.Errorf("downsampled to 3 buckets, the busy node is lost: %+v", few)
	}
	if _, err := in.client.ComputeHistory(ctx, "default", "nope", "", 0); !api.IsNotFound(err) {
		t.Errorf("history of a missing compute: %v, want not found", err)
	}
}
