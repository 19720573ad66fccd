package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// A job submitted to a compute with an idle node, while no other job is
// queued in its workspace, is placed in its submission's own transaction
// (controller.PlaceSubmitted): the answer to the submission already shows
// it Preparing on that node, its events say Queued then Assigned, and it
// runs. A job submitted while the node is busy (the node the last turn
// left free, taken since) is answered Queued and runs after, from a turn.
func TestSubmitPlacesOnAnIdleNode(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	createCompute(t, in, "name: warm\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 1\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	waitFor(t, "the warm node", 60*time.Second, func() bool {
		c, err := in.client.Compute(ctx, "default", "warm")
		return err == nil && c.NodeStateCounts.Idle == 1
	})
	nodes, err := in.client.Nodes(ctx, "default", "warm")
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes of warm: %v %v", nodes, err)
	}
	first := submit(t, in, "command: sleep 1; echo first\ncompute: warm\n")
	if first.Status != api.JobPreparing || first.Attempt != 1 || len(first.Ranks) != 1 || first.Ranks[0].Node != nodes[0].ID {
		t.Fatalf("submission's answer: %s attempt %d ranks %+v (%s); want Preparing, attempt 1, on node %s", first.Status, first.Attempt, first.Ranks, first.PendingReason, nodes[0].ID)
	}
	second := submit(t, in, "command: echo second\ncompute: warm\n")
	if second.Status != api.JobQueued || len(second.Ranks) != 0 {
		t.Errorf("a job submitted while the node runs another: %s ranks %+v; want Queued", second.Status, second.Ranks)
	}
	for _, j := range []*api.Job{first, second} {
		if got := waitJob(t, in, j.Name, 60*time.Second); got.Status != api.JobCompleted {
			t.Fatalf("job %s: %s %s", j.Name, got.Status, got.Error)
		}
	}
	if text := logText(t, in, first.Name); text != "first\n" {
		t.Errorf("log of %s = %q, want \"first\\n\"", first.Name, text)
	}
	if text := logText(t, in, second.Name); text != "second\n" {
		t.Errorf("log of %s = %q, want \"second\\n\"", second.Name, text)
	}
	evs, err := in.client.JobEvents(ctx, "default", first.Name)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if !strings.HasPrefix(strings.Join(kinds, ","), "Queued,Assigned,") {
		t.Errorf("events of %s = %v, want Queued, Assigned first", first.Name, kinds)
	}
}
