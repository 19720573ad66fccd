package slurm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/providertest"
	"github.com/tideml/tide/internal/provider/slurm"
	"github.com/tideml/tide/internal/server/servertest"
)

// TestMain starts the test's Slurm cluster, and makes the test binary
// double as the agent: the batch jobs run this binary with
// TIDE_TEST_AGENT=1 and the agent's real flags.
func TestMain(m *testing.M) { providertest.AgentMain(m, setupCluster) }

func (c *cluster) settings(workDir string) map[string]any {
	exe, _ := os.Executable()
	return map[string]any{
		"slurm_conf": c.conf, "work_dir": workDir, "agent_command": []any{exe, "agent"},
		"env": map[string]any{"TIDE_TEST_AGENT": "1"}, "stop_timeout": "20s",
	}
}

func open(t *testing.T, settings map[string]any) provider.Provider {
	t.Helper()
	return providertest.Open(t, slurm.Factory, settings)
}

// deleteAll deletes every node left, so no Slurm job outlives the test.
func deleteAll(t *testing.T, settings map[string]any) {
	providertest.DeleteAll(t, func() provider.Provider { return open(t, settings) })
}

func TestConformance(t *testing.T) {
	c := requireCluster(t)
	providertest.Run(t, func(t *testing.T) func() provider.Provider {
		settings := c.settings(t.TempDir())
		deleteAll(t, settings)
		return func() provider.Provider { return open(t, settings) }
	})
}

// waitNode polls Get until cond holds.
func waitNode(t *testing.T, p provider.Provider, id string, what string, cond func(*provider.Node) bool) *provider.Node {
	t.Helper()
	var n *provider.Node
	if !servertest.Poll(t.Context(), 30*time.Second, func() bool {
		var err error
		n, err = p.Get(t.Context(), id)
		return err == nil && cond(n)
	}) {
		t.Fatalf("node %s: timed out waiting for %s (last: %+v)", id, what, n)
	}
	return n
}

// pendingReason matches Slurm's reason for a job waiting for nodes: a job
// behind another pending one waits for Priority rather than Resources.
var pendingReason = regexp.MustCompile(`Slurm job \d+ is pending: (Resources|Priority)`)

func jobID(n *provider.Node) string { return strings.TrimPrefix(n.ProviderID, "slurm:") }

// TestSlurmStates checks how Slurm's view reaches tide: a pending job is
// a starting node with Slurm's reason, preemption a preempted node, a
// node failure an exited one; an unknown partition is Slurm's error.
func TestSlurmStates(t *testing.T) {
	c := requireCluster(t)
	ctx := t.Context()
	settings := c.settings(t.TempDir())
	deleteAll(t, settings)
	p := open(t, settings)

	// Three nodes of 4 CPUs fill the cluster; a fourth waits.
	for i := range 4 {
		if _, err := p.Create(ctx, providertest.Request(fmt.Sprintf("st-%d", i))); err != nil {
			t.Fatalf("Create: %v", err)
		}
	}
	waitNode(t, p, "st-3", "a pending reason", func(n *provider.Node) bool {
		return n.State == provider.StateStarting && pendingReason.MatchString(n.Reason)
	})
	for _, id := range []string{"st-0", "st-1", "st-2"} {
		waitNode(t, p, id, "running", func(n *provider.Node) bool { return n.State == provider.StateRunning })
	}

	// A node failure ends its job: the node exits with Slurm's reason.
	n := waitNode(t, p, "st-0", "running", func(n *provider.Node) bool { return n.State == provider.StateRunning })
	host, err := c.run("squeue", "--noheader", "--jobs="+jobID(n), "--format=%N")
	if err != nil {
		t.Fatal(err)
	}
	host = strings.TrimSpace(host)
	if _, err := c.run("scontrol", "update", "nodename="+host, "state=down", "reason=tide test: disk on fire"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.run("scontrol", "update", "nodename="+host, "state=resume") })
	waitNode(t, p, "st-0", "a node failure", func(n *provider.Node) bool {
		return n.State == provider.StateExited && strings.Contains(n.Reason, "NODE_FAIL")
	})
	if err := p.Delete(ctx, "st-0"); err != nil {
		t.Fatal(err)
	}

	// A job of the higher-priority partition preempts tide's nodes.
	if _, err := c.run("sbatch", "--output=/dev/null", "--partition=urgent", "--nodes=3", "--exclusive", "--time=1", "--wrap=sleep 1"); err != nil {
		t.Fatal(err)
	}
	waitNode(t, p, "st-1", "preemption", func(n *provider.Node) bool {
		return n.State == provider.StatePreempted && strings.Contains(n.Reason, "preempted")
	})

	// An unknown partition is Slurm's own error, and leaves nothing.
	bad := c.settings(t.TempDir())
	bad["partition"] = "nope"
	_, err = open(t, bad).Create(ctx, providertest.Request("bad-part"))
	if err == nil || !strings.Contains(err.Error(), "Invalid partition name specified") {
		t.Errorf("Create in an unknown partition: err = %v; want Slurm's invalid partition error", err)
	}
	if _, err := os.Stat(filepath.Join(bad["work_dir"].(string), "bad-part")); !os.IsNotExist(err) {
		t.Errorf("a failed Create left its folder: %v", err)
	}
}

// TestEndToEnd runs jobs through a real server on agents running as
// Slurm jobs: a 2-node gang and a server restart mid-job.
func TestEndToEnd(t *testing.T) {
	c := requireCluster(t)
	settings := c.settings(t.TempDir())
	deleteAll(t, settings)
	opts := servertest.Options{DataDir: t.TempDir(), Location: config.Location{Name: "hpc", Provider: "slurm", Settings: settings}}
	srv := servertest.Start(t, opts)
	defer func() { srv.Shutdown() }()
	srv.PutCompute("name: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 2\nidle_time_before_scale_down: 600\n")

	// While another job holds the whole cluster, the nodes wait in
	// preparing with Slurm's pending reason.
	blocker, err := c.run("sbatch", "--output=/dev/null", "--parsable", "--nodes=3", "--exclusive", "--wrap=sleep 300")
	if err != nil {
		t.Fatal(err)
	}
	j := srv.Submit("command: echo rank=$NODE_RANK of $AZUREML_NODE_COUNT\ncompute: cpu-cluster\nresources:\n  instance_count: 2\n")
	var nodes []api.Node
	if !servertest.Poll(t.Context(), 30*time.Second, func() bool {
		nodes, _ = srv.Client.Nodes(t.Context(), "default", "cpu-cluster")
		for _, n := range nodes {
			if n.State == api.NodePreparing && pendingReason.MatchString(n.Error) {
				return true
			}
		}
		return false
	}) {
		t.Errorf("no preparing node shows Slurm's pending reason: %+v", nodes)
	}
	if _, err := c.run("scancel", strings.TrimSpace(blocker)); err != nil {
		t.Fatal(err)
	}
	j = srv.WaitJob(j.Name, 90*time.Second, servertest.Terminal)
	if j.Status != api.JobCompleted || len(j.Ranks) != 2 || j.Ranks[0].Node == j.Ranks[1].Node {
		t.Fatalf("gang job: %s %s ranks %+v", j.Status, j.Error, j.Ranks)
	}

	srv = srv.RestartMidJob(opts, "cpu-cluster")

	// Slurm preempting the node ends the job's attempt there. The node
	// is marked preempted with Slurm's reason when the controller's check
	// comes before the agent's own reaction to Slurm's SIGTERM (leaving);
	// TestSlurmStates checks the provider's side deterministically.
	j = srv.Submit("command: sleep 120\ncompute: cpu-cluster\n")
	j = srv.WaitJob(j.Name, 30*time.Second, servertest.Running)
	first := j.Attempt
	if _, err := c.run("sbatch", "--output=/dev/null", "--partition=urgent", "--nodes=3", "--exclusive", "--time=1", "--wrap=sleep 1"); err != nil {
		t.Fatal(err)
	}
	j = srv.WaitJob(j.Name, 30*time.Second, func(j *api.Job) bool { return j.Attempt > first || servertest.Terminal(j) })
	evs, err := srv.Client.ComputeEvents(t.Context(), "default", "cpu-cluster")
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, e := range evs {
		events = append(events, e.Kind+": "+e.Message)
	}
	t.Logf("job after the preemption: %s attempt %d %q; events:\n%s", j.Status, j.Attempt, j.Error, strings.Join(events, "\n"))
	_, _ = srv.Client.CancelJob(t.Context(), "default", j.Name)
	srv.WaitJob(j.Name, 60*time.Second, servertest.Terminal)
	srv.DeleteCompute("cpu-cluster", 60*time.Second)
}

func TestSettings(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		settings map[string]any
		want     string // "" for no error
	}{
		{map[string]any{"work_dir": dir, "partition": "gpu", "extra_args": "--qos=normal --exclusive", "env": map[string]any{"A": 1}}, ""},
		{map[string]any{"work_dir": dir, "agent_command": []any{"/bin/tide", "agent"}, "stop_timeout": "5s"}, ""},
		{map[string]any{"partiton": "gpu"}, "partiton: unknown setting of the slurm provider"},
		{map[string]any{"work_dir": dir, "partition": ""}, "partition: must be a non-empty string"},
		{map[string]any{"work_dir": dir, "agent_command": []any{"tide", 3}}, "agent_command: must be a list of strings"},
		{map[string]any{"work_dir": dir, "stop_timeout": "soon"}, "stop_timeout: must be a positive duration"},
		{map[string]any{"work_dir": dir, "env": []any{"A=1"}}, "env: must be a map"},
	} {
		_, err := slurm.Factory("hpc", tc.settings, provider.Deps{})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("settings %v: err = %v; want %q", tc.settings, err, tc.want)
		}
	}
	// work_dir defaults to the location's data folder.
	if _, err := slurm.Factory("hpc", nil, provider.Deps{DataDir: dir}); err != nil {
		t.Errorf("default work_dir: %v", err)
	}
	if _, err := slurm.Factory("hpc", nil, provider.Deps{}); err == nil || !strings.Contains(err.Error(), "work_dir: required") {
		t.Errorf("no work_dir and no data dir: err = %v", err)
	}
}
