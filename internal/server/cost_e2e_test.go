package server_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
)

// TestLiveCost: a 2-node job costs 2 × its run time × the size's price, to
// the cent; the compute's cost counts its nodes' whole lives, idle time
// included, and survives the nodes' removal; the report groups both ways.
// The size's price is overridden in the server's configuration ($360 per
// node-hour: 10 cents a node-second), as an operator prices own hardware.
func TestLiveCost(t *testing.T) {
	dir := t.TempDir()
	in := startWith(t, dir, "", "", func(c *config.Server) {
		c.Sizes = []api.Size{{Name: "Standard_DS3_v2", Family: "standardDSv2Family", VCPUs: 4, MemoryGB: 14,
			LowPriorityCapable: true, PricePerHour: 360, LowPriorityPrice: 36}}
	})
	t.Cleanup(func() { cleanup(t, in) })
	ctx := context.Background()
	createCompute(t, in, "name: priced\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\nidle_time_before_scale_down: 2\ntags:\n  team: vision\n")
	j := submit(t, in, "command: sleep 2\ncompute: priced\nresources:\n  instance_count: 2\ntags:\n  project: cats\n")
	done := waitJob(t, in, j.Name, 90*time.Second)
	if done.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", done.Status, done.Error)
	}
	got, err := in.client.Job(ctx, "default", j.Name)
	if err != nil {
		t.Fatal(err)
	}
	secs := got.EndTime.Sub(got.StartTime).Seconds()
	want := 2 * secs * 0.1
	if c := got.Cost; c == nil || math.Abs(c.Amount-want) > 0.005 || c.PricePerHour != 360 || math.Abs(c.NodeHours-2*secs/3600) > 1e-9 {
		t.Fatalf("job cost = %+v, want $%.2f (2 nodes × %.3f s × $0.10)", got.Cost, want, secs)
	}
	waitFor(t, "the compute to scale to 0", 60*time.Second, func() bool {
		c, err := in.client.Compute(ctx, "default", "priced")
		return err == nil && c.CurrentNodeCount == 0
	})
	c, err := in.client.Compute(ctx, "default", "priced")
	if err != nil {
		t.Fatal(err)
	}
	// Both nodes lived at least the job's run plus the 2 s idle time.
	if c.Cost == nil || c.Cost.Amount < want+2*2*0.1-0.01 {
		t.Fatalf("compute cost = %+v, want at least the job's $%.2f plus 2 idle seconds on each node", c.Cost, want)
	}
	byCompute, err := in.client.Cost(ctx, "default", "compute", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(byCompute.Rows) != 1 || byCompute.Rows[0].Key != "priced" || math.Abs(byCompute.Total-c.Cost.Amount) > 0.01 {
		t.Errorf("by compute = %+v, want one row matching the compute's cost %+v", byCompute, c.Cost)
	}
	byNode, err := in.client.Cost(ctx, "default", "node", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(byNode.Rows) != 2 {
		t.Errorf("by node = %+v, want the two removed nodes", byNode.Rows)
	}
	byTag, err := in.client.Cost(ctx, "default", "tag", "1h")
	if err != nil {
		t.Fatal(err)
	}
	if len(byTag.Rows) != 1 || byTag.Rows[0].Key != "project=cats" || math.Abs(byTag.Rows[0].Amount-want) > 0.005 {
		t.Errorf("by tag = %+v, want project=cats at $%.2f", byTag.Rows, want)
	}
	// Per user: the admin submitted the job.
	byUser, err := in.client.Cost(ctx, "default", "user", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(byUser.Rows) != 1 || byUser.Rows[0].Key != "admin" || math.Abs(byUser.Rows[0].Amount-want) > 0.005 {
		t.Errorf("by user = %+v, want admin at $%.2f", byUser.Rows, want)
	}
	future, err := in.client.Cost(ctx, "default", "compute", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if err != nil || future.Total != 0 {
		t.Errorf("cost since a future time = %+v, %v; want nothing", future, err)
	}
	if _, err := in.client.Cost(ctx, "default", "colour", ""); err == nil {
		t.Error("by colour: want a validation error")
	}
	if _, err := in.client.Cost(ctx, "default", "job", "last tuesday"); err == nil {
		t.Error("since 'last tuesday': want a validation error")
	}
}
