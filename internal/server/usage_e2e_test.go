package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// TestJobUsage: a job that burns CPU for 3 s shows it: its node reports
// the job's CPU time and memory with each heartbeat while it runs, and the
// final figures stay on the job.
func TestJobUsage(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	createCompute(t, in, "name: busy\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 1\n")
	j := submit(t, in, "command: timeout 3 sh -c 'while :; do :; done' || true\ncompute: busy\n")
	waitFor(t, "the running job's usage on its node", 60*time.Second, func() bool {
		got, err := in.client.Job(ctx, "default", j.Name)
		if err != nil || got.Status != api.JobRunning || got.Usage == nil || len(got.Ranks) == 0 || got.Ranks[0].Usage == nil {
			return false
		}
		ns, err := in.client.Nodes(ctx, "default", "busy")
		return err == nil && len(ns) == 1 && ns[0].Utilization != nil && ns[0].Utilization.MemoryBytes > 0
	})
	done := waitJob(t, in, j.Name, 60*time.Second)
	if done.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", done.Status, done.Error)
	}
	got, err := in.client.Job(ctx, "default", j.Name)
	if err != nil {
		t.Fatal(err)
	}
	u := got.Usage
	// A 3 s busy loop gets 3 CPU-s on an idle core and 2/L of that at
	// load average L on this 2-core machine (0.49 s was measured at 25).
	if u == nil || u.CPUSeconds < 0.1 || u.PeakMemoryBytes <= 0 || u.Samples < 1 {
		t.Fatalf("usage = %+v, want the CPU time of a 3 s busy loop (at least 0.1 s on a loaded machine) and some memory", u)
	}
	t.Logf("usage: %.2f CPU-s, peak %d bytes, %d samples", u.CPUSeconds, u.PeakMemoryBytes, u.Samples)
	if got.Ranks[0].Usage == nil || got.Ranks[0].Usage.CPUSeconds != u.CPUSeconds {
		t.Errorf("rank usage %+v, job usage %+v: one rank, the same figures", got.Ranks[0].Usage, u)
	}
}
