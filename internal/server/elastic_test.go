package server_test

// Elasticity users can trust, end to end with real agents: preemption with
// resume from a checkpoint, retries, priorities, pending reasons,
// provisioning failures with back-off, and live updates.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/service"
)

const lowPriority = `name: spot-cluster
type: amlcompute
size: Standard_DS3_v2
tier: low_priority
min_instances: 0
max_instances: 1
idle_time_before_scale_down: 1
`

// counter counts to 12, saving each step in the checkpoint folder, and
// starts from the saved step: a job that resumes instead of restarting.
const counter = `command: >-
  n=$(cat $TIDE_CHECKPOINT_DIR/step 2>/dev/null || echo 0);
  echo "attempt $TIDE_ATTEMPT starts at step $n";
  while [ $n -lt 12 ]; do n=$((n+1)); echo $n > $TIDE_CHECKPOINT_DIR/step; echo "step $n"; sleep 0.25; done
compute: spot-cluster
`

func events(t *testing.T, in *instance, job string) string {
	t.Helper()
	es, err := in.client.JobEvents(context.Background(), "default", job)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%s: %s\n", e.Kind, e.Message)
	}
	return b.String()
}

func runningNode(t *testing.T, in *instance, compute, job string) api.Node {
	t.Helper()
	var node api.Node
	waitFor(t, "job "+job+" running", 60*time.Second, func() bool {
		j, err := in.client.Job(context.Background(), "default", job)
		if err != nil || j.Status != api.JobRunning || len(j.Ranks) == 0 {
			return false
		}
		ns, _ := in.client.Nodes(context.Background(), "default", compute)
		for _, n := range ns {
			if n.ID == j.Ranks[0].Node {
				node = n
				return true
			}
		}
		return false
	})
	return node
}

func TestPreemptionResumesFromCheckpoint(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, lowPriority)
	j := submit(t, in, counter)
	node := runningNode(t, in, "spot-cluster", j.Name)
	waitFor(t, "a few steps", 30*time.Second, func() bool {
		lines, _ := in.client.Logs(context.Background(), "default", j.Name, 0)
		for _, l := range lines {
			if l.Text == "step 3" {
				return true
			}
		}
		return false
	})

	n, err := in.client.PreemptNode(context.Background(), "default", "spot-cluster", node.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n.State != api.NodePreempted {
		t.Errorf("node state after preempt-node: %s, want preempted", n.State)
	}
	got := waitJob(t, in, j.Name, 90*time.Second)
	if got.Status != api.JobCompleted || got.Attempt != 2 || got.Retried.NodeFailure != 1 {
		t.Fatalf("job after preemption: %s attempt %d retried %+v (%s)\n%s", got.Status, got.Attempt, got.Retried, got.Error, events(t, in, j.Name))
	}
	if got.Ranks[0].Node == node.ID {
		t.Errorf("attempt 2 ran on the preempted node %s", node.ID)
	}
	text := logText(t, in, j.Name)
	if strings.Count(text, "step 1\n") != 1 || !strings.Contains(text, "step 12\n") || strings.Contains(text, "attempt 2 starts at step 0") {
		t.Errorf("the job did not resume from its checkpoint:\n%s", text)
	}
	if !strings.Contains(text, "restored the checkpoint") {
		t.Errorf("the log does not say the checkpoint was restored:\n%s", text)
	}
	ev := events(t, in, j.Name)
	for _, want := range []string{"NodePreempted", "Requeued: attempt 1 ended by a node failure"} {
		if !strings.Contains(ev, want) {
			t.Errorf("job events lack %q:\n%s", want, ev)
		}
	}
	// Dedicated nodes cannot be preempted.
	createCompute(t, in, cluster)
	d := submit(t, in, "command: sleep 2\ncompute: cpu-cluster\n")
	dn := runningNode(t, in, "cpu-cluster", d.Name)
	if _, err := in.client.PreemptNode(context.Background(), "default", "cpu-cluster", dn.ID); api.ProblemCode(err) != api.CodeConflict || !strings.Contains(err.Error(), "low_priority") {
		t.Errorf("preempting a dedicated node: %v", err)
	}

	// A node reads and writes the checkpoints and artifacts of its own
	// jobs only: dn, with its real token, is refused those of j.
	token := in.srv.NodeToken(dn.ID)
	id := url.PathEscape(service.AssignmentID("default", j.Name, 2))
	for _, method := range []string{"PUT /checkpoint", "GET /checkpoint", "PUT /artifacts"} {
		verb, what, _ := strings.Cut(method, " ")
		req, _ := http.NewRequest(verb, in.cfg.AdvertiseURL+"/v1/agent/assignments/"+id+what, strings.NewReader("not a tar"))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(body), "does not run job "+j.Name) {
			t.Errorf("%s of another node's job: %d %s, want 403", method, resp.StatusCode, body)
		}
	}
}

// agentToken reads a local node's token from its agent's environment.
func TestRetriesByCause(t *testing.T) {
	in, _ := newServer(t)
	// Room for four nodes: the nodes this test kills count against
	// max_instances until the server has declared them lost, which takes
	// longer on a loaded machine (a CI run timed out waiting with 2).
	createCompute(t, in, strings.Replace(cluster, "max_instances: 2", "max_instances: 4", 1))
	// A failing command is retried on_exit_code times, then fails.
	exit := submit(t, in, "command: echo try $TIDE_ATTEMPT; exit 3\ncompute: cpu-cluster\ntide:\n  retries:\n    on_exit_code: 2\n")
	// By default a failing command is not retried.
	once := submit(t, in, "command: exit 4\ncompute: cpu-cluster\n")
	got := waitJob(t, in, exit.Name, 60*time.Second)
	if got.Status != api.JobFailed || got.Attempt != 3 || got.Retried.ExitCode != 2 || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Errorf("on_exit_code 2: %s attempt %d retried %+v exit %v", got.Status, got.Attempt, got.Retried, got.ExitCode)
	}
	if text := logText(t, in, exit.Name); !strings.Contains(text, "try 1") || !strings.Contains(text, "try 3") {
		t.Errorf("log of three attempts:\n%s", text)
	}
	if got := waitJob(t, in, once.Name, 60*time.Second); got.Status != api.JobFailed || got.Attempt != 1 {
		t.Errorf("default retries: %s attempt %d", got.Status, got.Attempt)
	}

	// A lost node (its agent killed) retries the job on a new node by
	// default; with on_node_failure 0 the job fails instead. An agent
	// stopped with SIGTERM (its backend taking the node away) reports the
	// node failure itself, and the retry runs elsewhere, not on it.
	for _, tc := range []struct {
		retries string
		signal  syscall.Signal
		want    string
		attempt int
	}{
		{"", syscall.SIGKILL, api.JobCompleted, 2},
		{"tide:\n  retries:\n    on_node_failure: 0\n", syscall.SIGKILL, api.JobFailed, 1},
		{"", syscall.SIGTERM, api.JobCompleted, 2},
	} {
		// Running long enough to be seen running between two polls of
		// a loaded machine.
		j := submit(t, in, "command: sleep 4; echo done\ncompute: cpu-cluster\n"+tc.retries)
		n := runningNode(t, in, "cpu-cluster", j.Name)
		var pid int
		if _, err := fmt.Sscanf(n.ProviderID, "pid:%d", &pid); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, tc.signal); err != nil {
			t.Fatal(err)
		}
		got := waitJob(t, in, j.Name, 60*time.Second)
		if got.Status != tc.want || got.Attempt != tc.attempt || tc.want == api.JobFailed && !strings.Contains(got.Error, "unusable") {
			t.Errorf("retries %q after a lost node (%v): %s attempt %d (%s)\n%s", tc.retries, tc.signal, got.Status, got.Attempt, got.Error, events(t, in, j.Name))
		}
		if got.Attempt == 2 && got.Ranks[0].Node == n.ID {
			t.Errorf("%v: attempt 2 ran on the node whose agent was stopped, %s", tc.signal, n.ID)
		}
		// The node is removed once its provider says the agent is gone.
		waitFor(t, "the stopped node to be removed", 30*time.Second, func() bool {
			nodes, err := in.client.Nodes(context.Background(), "default", "cpu-cluster")
			return err == nil && !slices.ContainsFunc(nodes, func(m api.Node) bool { return m.ID == n.ID })
		})
	}
}

func TestPriorityOrderAndPendingReasons(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, "name: one-node\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 1\nidle_time_before_scale_down: 30\n")
	blocker := submit(t, in, "command: sleep 3\ncompute: one-node\n")
	runningNode(t, in, "one-node", blocker.Name)
	low := submit(t, in, "command: 'true'\ncompute: one-node\nqueue_settings:\n  priority: low\n")
	medium := submit(t, in, "command: 'true'\ncompute: one-node\n")
	high := submit(t, in, "command: 'true'\ncompute: one-node\nqueue_settings:\n  priority: high\n")
	// While the one node is busy, the queued jobs say so, in queue order.
	const want = "compute at max_instances (1 node(s), all busy)"
	position := map[string]int{high.Name: 1, medium.Name: 2, low.Name: 3}
	waitFor(t, "pending reasons", 10*time.Second, func() bool {
		js, err := in.client.Jobs(context.Background(), "default", api.JobFilter{Status: api.JobQueued})
		if err != nil || len(js) != 3 {
			return false
		}
		for _, j := range js {
			if j.PendingReason != want {
				return false
			}
			if j.QueuePosition != position[j.Name] {
				t.Errorf("%s: queue position %d, want %d", j.Name, j.QueuePosition, position[j.Name])
			}
		}
		return true
	})
	if j, _ := in.client.Job(context.Background(), "default", low.Name); j.QueuePosition != 3 {
		t.Errorf("job show: queue position %d, want 3", j.QueuePosition)
	}
	var starts []time.Time
	for _, name := range []string{high.Name, medium.Name, low.Name} {
		j := waitJob(t, in, name, 60*time.Second)
		starts = append(starts, j.StartTime)
	}
	if !starts[0].Before(starts[1]) || !starts[1].Before(starts[2]) {
		t.Errorf("start order high %v, medium %v, low %v: want high first", starts[0], starts[1], starts[2])
	}
	// A job larger than the compute is rejected at submit time with the fix.
	_, err := in.client.CreateJob(context.Background(), "default", &api.Job{Type: "command", Command: "true", Compute: "one-node", Resources: &api.JobResources{InstanceCount: 3}})
	if err == nil || !strings.Contains(err.Error(), "max_instances 1") || !strings.Contains(err.Error(), "tide compute update one-node --max-instances 3") {
		t.Errorf("instance_count above max_instances: %v", err)
	}
}

func TestProvisioningTimeoutBacksOff(t *testing.T) {
	in := startWith(t, t.TempDir(), "", "", func(cfg *config.Server) {
		cfg.ProvisionTimeout = time.Second
		// An agent that never registers: the node times out.
		cfg.Locations = append(cfg.Locations, config.Location{Name: "broken", Provider: "local", Runtime: "process",
			Settings: map[string]any{"agent_command": []any{"/bin/sh", "-c", "sleep 300"}}})
	})
	t.Cleanup(func() { cleanup(t, in) })
	createCompute(t, in, "name: broken-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nlocation: broken\nmax_instances: 1\n")
	j := submit(t, in, "command: 'true'\ncompute: broken-cluster\n")
	// First the node is starting (for up to provision_timeout)...
	waitFor(t, "a pending reason naming the starting node", 10*time.Second, func() bool {
		cur, err := in.client.Job(context.Background(), "default", j.Name)
		return err == nil && strings.Contains(cur.PendingReason, "waiting for 1 node(s): 1 starting since ")
	})
	// ... then it times out, and the reason says so.
	waitFor(t, "a pending reason naming the failure", 30*time.Second, func() bool {
		cur, err := in.client.Job(context.Background(), "default", j.Name)
		return err == nil && strings.Contains(cur.PendingReason, "provisioning is failing") && strings.Contains(cur.PendingReason, "did not register")
	})
	waitFor(t, "three failures", 30*time.Second, func() bool {
		c, err := in.client.Compute(context.Background(), "default", "broken-cluster")
		return err == nil && len(c.Errors) >= 3
	})
	es, err := in.client.ComputeEvents(context.Background(), "default", "broken-cluster")
	if err != nil {
		t.Fatal(err)
	}
	var delays []string
	for _, e := range es {
		if e.Kind == "ProvisioningTimeout" {
			delays = append(delays, e.Message[strings.LastIndex(e.Message, "retrying in"):])
		}
	}
	if len(delays) < 3 || delays[0] != "retrying in 1s)" || delays[1] != "retrying in 2s)" || delays[2] != "retrying in 4s)" {
		t.Errorf("back-off: %q, want 1s, 2s, 4s", delays)
	}
}

func TestLiveUpdateOfMax(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, "name: shrink\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\nidle_time_before_scale_down: 60\n")
	a := submit(t, in, "command: sleep 3\ncompute: shrink\n")
	b := submit(t, in, "command: sleep 3\ncompute: shrink\n")
	runningNode(t, in, "shrink", a.Name)
	runningNode(t, in, "shrink", b.Name)
	one := 1
	if _, err := in.client.PatchCompute(context.Background(), "default", "shrink", api.ComputePatch{MaxInstances: &one}); err != nil {
		t.Fatal(err)
	}
	// Lowering max kills no running job; the extra node goes once idle,
	// long before its idle time of 60 s.
	for _, j := range []*api.Job{a, b} {
		if got := waitJob(t, in, j.Name, 60*time.Second); got.Status != api.JobCompleted {
			t.Errorf("job %s after max lowered: %s %s", j.Name, got.Status, got.Error)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := in.client.Compute(context.Background(), "default", "shrink")
		if err == nil && c.CurrentNodeCount == 1 {
			break
		}
		if time.Now().After(deadline) {
			es, _ := in.client.ComputeEvents(context.Background(), "default", "shrink")
			t.Fatalf("still %d nodes 20s after max_instances went to 1: %+v\nevents: %+v", c.CurrentNodeCount, c.NodeStateCounts, es)
		}
		time.Sleep(100 * time.Millisecond)
	}
	es, _ := in.client.ComputeEvents(context.Background(), "default", "shrink")
	if last := es[len(es)-1]; last.Kind != "ScaleDown" || !strings.Contains(last.Message, "more than its cap of 1") {
		t.Errorf("last compute event %+v, want a scale-down over the new cap", last)
	}
}

// TestGangReservation checks the reservation end to end: a 2-node job at
// the head of the queue holds the node that frees up, a 1-node job behind
// it waits with the reason naming it, and the gang starts first.
func TestGangReservation(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, "name: pair\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 2\nidle_time_before_scale_down: 30\n")
	blocker := submit(t, in, "command: while [ ! -f \"$TIDE_RELEASE\" ]; do sleep 0.1; done\ncompute: pair\nenvironment_variables:\n  TIDE_RELEASE: "+filepath.Join(t.TempDir(), "release")+"\n")
	runningNode(t, in, "pair", blocker.Name)
	gang := submit(t, in, "command: echo gang\ncompute: pair\nresources:\n  instance_count: 2\n")
	small := submit(t, in, "command: echo small\ncompute: pair\n")
	want := "waiting behind " + gang.Name + " (higher in the queue), which holds the free nodes of its compute"
	waitFor(t, "the small job's reason", 60*time.Second, func() bool {
		j, err := in.client.Job(context.Background(), "default", small.Name)
		return err == nil && j.PendingReason == want
	})
	if err := os.WriteFile(blocker.EnvironmentVariables["TIDE_RELEASE"], nil, 0o644); err != nil {
		t.Fatal(err)
	}
	g, s := waitJob(t, in, gang.Name, 60*time.Second), waitJob(t, in, small.Name, 60*time.Second)
	if g.Status != api.JobCompleted || s.Status != api.JobCompleted || !g.StartTime.Before(s.StartTime) {
		t.Errorf("gang %s started %v, small %s started %v: want both completed, the gang first", g.Status, g.StartTime, s.Status, s.StartTime)
	}
}

// TestGangNotStarvedByBootingNodes: a gang at the head holds the free node
// even while nodes boot. With the old rule (jobs behind the head could take
// free nodes while free plus booting nodes covered the gang), the one-node
// job submitted after the gang took the warm node at once, because nodes
// were booting for both; with a steady stream of such jobs every node that
// finished booting went to a newcomer and the gang waited indefinitely
// (issue 23: 264 Philly gangs waited up to 1,912 s in simulation). Now the
// gang starts first.
func TestGangNotStarvedByBootingNodes(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, "name: warm\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 1\nmax_instances: 3\nidle_time_before_scale_down: 30\n")
	waitFor(t, "the warm node", 60*time.Second, func() bool {
		c, err := in.client.Compute(context.Background(), "default", "warm")
		return err == nil && c.NodeStateCounts.Idle == 1
	})
	gang := submit(t, in, "command: echo gang\ncompute: warm\nresources:\n  instance_count: 2\n")
	small := submit(t, in, "command: echo small\ncompute: warm\n")
	g, s := waitJob(t, in, gang.Name, 60*time.Second), waitJob(t, in, small.Name, 60*time.Second)
	if g.Status != api.JobCompleted || s.Status != api.JobCompleted {
		t.Fatalf("gang %s, small %s: want both completed", g.Status, s.Status)
	}
	// Jobs placed in one controller turn share its time, so the gang's
	// assignment is never later than the small job's.
	ga, sa := assignedAt(t, in, gang.Name), assignedAt(t, in, small.Name)
	if sa.Before(ga) {
		t.Errorf("the small job was assigned at %v, before the gang at the head (%v): it took the node held for the gang", sa, ga)
	}
}

// assignedAt returns when the controller assigned job name its nodes.
func assignedAt(t *testing.T, in *instance, name string) time.Time {
	t.Helper()
	evs, err := in.client.JobEvents(context.Background(), "default", name)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == "Assigned" {
			return e.Time
		}
	}
	t.Fatalf("job %s has no Assigned event: %+v", name, evs)
	return time.Time{}
}

// TestIdleWindowIsSteady (issue 21, defect 3): while an idle node waits
// out its idle time, the compute is Steady at its size, as in Azure, not
// Resizing the whole window.
func TestIdleWindowIsSteady(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, "name: lingering\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 1\nidle_time_before_scale_down: 120\n")
	j := submit(t, in, "command: echo done\ncompute: lingering\n")
	if got := waitJob(t, in, j.Name, 60*time.Second); got.Status != api.JobCompleted {
		t.Fatalf("job: %s", got.Status)
	}
	ctx := context.Background()
	waitFor(t, "the node idle", 30*time.Second, func() bool {
		c, err := in.client.Compute(ctx, "default", "lingering")
		return err == nil && c.NodeStateCounts.Idle == 1
	})
	// Several controller turns (a heartbeat interval is 500 ms here).
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		c, err := in.client.Compute(ctx, "default", "lingering")
		if err != nil {
			t.Fatal(err)
		}
		if c.AllocationState != api.AllocationSteady || c.TargetNodeCount != 1 || c.CurrentNodeCount != 1 {
			t.Fatalf("in the idle window: %s, %d/%d nodes; want Steady at 1/1", c.AllocationState, c.CurrentNodeCount, c.TargetNodeCount)
		}
	}
}
