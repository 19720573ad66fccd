package ssh_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/server/servertest"
)

// TestEndToEnd runs jobs through a real server (over TLS, pinned by the
// agents) on agents the ssh provider starts on the lab's hosts: a 2-node gang, a server restart mid-job, and
// a host cut off mid-job and brought back.
func TestEndToEnd(t *testing.T) {
	l := requireLab(t)
	settings := l.settings(l.shared(), 1, "")
	deleteAll(t, settings)
	opts := servertest.Options{
		DataDir: t.TempDir(),
		// The root end of host 0's veth: every host routes to it.
		Addr:     l.Hosts[0].RootIP + ":0",
		Location: config.Location{Name: "lab", Provider: "ssh", Settings: settings},
	}
	srv := servertest.Start(t, opts)
	defer func() { srv.Shutdown() }()
	// Beyond loopback the server serves TLS with its own CA, which the
	// agents on the lab's hosts pin (issue 17): everything below crosses
	// the lab's network over TLS.
	if !strings.HasPrefix(srv.Client.Server(), "https://") {
		t.Fatalf("the server on the lab's network serves %s, want https", srv.Client.Server())
	}
	ctx := t.Context()
	srv.PutCompute("name: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 2\nidle_time_before_scale_down: 600\n")

	// A gang of two needs both capacity-1 hosts.
	j := srv.Submit("command: echo rank=$NODE_RANK of $AZUREML_NODE_COUNT\ncompute: cpu-cluster\nresources:\n  instance_count: 2\n")
	j = srv.WaitJob(j.Name, 90*time.Second, servertest.Terminal)
	if j.Status != api.JobCompleted || len(j.Ranks) != 2 || j.Ranks[0].Node == j.Ranks[1].Node {
		t.Fatalf("gang job: %s %s ranks %+v", j.Status, j.Error, j.Ranks)
	}
	nodes, err := srv.Client.Nodes(ctx, "default", "cpu-cluster")
	if err != nil {
		t.Fatal(err)
	}
	hostOf := map[string]int{}
	for _, n := range nodes {
		for i, h := range l.Hosts {
			if strings.Contains(n.ProviderID, "@"+h.IP+":") {
				hostOf[n.ID] = i
			}
		}
	}
	if len(hostOf) != 2 || hostOf[j.Ranks[0].Node] == hostOf[j.Ranks[1].Node] {
		t.Fatalf("gang ranks %+v on nodes %+v; want one per host", j.Ranks, nodes)
	}

	// A server restart mid-job: the agents keep running and the new
	// server finds them through the hosts.
	srv = srv.RestartMidJob(opts, "cpu-cluster")

	// Cutting a host off mid-job makes its node unusable; the job's
	// attempt there ends (it is retried on the other host, tide's
	// on_node_failure retry); once the host is back, the node is
	// deleted there for real.
	j = srv.Submit("command: sleep 120\ncompute: cpu-cluster\n")
	j = srv.WaitJob(j.Name, 30*time.Second, func(j *api.Job) bool { return j.Status == api.JobRunning && len(j.Ranks) == 1 })
	node := j.Ranks[0].Node
	host := hostOf[node]
	restore := l.cut(t, host)
	var states []string
	if !servertest.Poll(ctx, 30*time.Second, func() bool {
		ns, _ := srv.Client.Nodes(ctx, "default", "cpu-cluster")
		states = states[:0]
		for _, n := range ns {
			states = append(states, n.ID+"="+n.State+" "+n.Error)
			if n.ID == node && n.State == api.NodeUnusable {
				return true
			}
		}
		return false
	}) {
		t.Errorf("node %s on a host cut off is not unusable: %v", node, states)
	}
	first := j.Attempt
	if j = srv.WaitJob(j.Name, 30*time.Second, func(j *api.Job) bool { return j.Attempt > first || servertest.Terminal(j) }); j.Attempt == first && !strings.Contains(j.Error, "unusable") {
		t.Errorf("job on a host cut off: %s attempt %d %q; want its attempt ended by the unusable node", j.Status, j.Attempt, j.Error)
	}
	_, _ = srv.Client.CancelJob(ctx, "default", j.Name)
	srv.WaitJob(j.Name, 30*time.Second, servertest.Terminal)
	restore()
	nodeDir := filepath.Join(settings["hosts"].([]any)[host].(map[string]any)["dir"].(string), "nodes", node)
	if !servertest.Poll(ctx, 60*time.Second, func() bool {
		_, err := os.Stat(nodeDir)
		return os.IsNotExist(err)
	}) {
		t.Errorf("the unusable node's folder %s is still there after the host came back", nodeDir)
	}
	// The host serves jobs again.
	j = srv.Submit("command: echo back\ncompute: cpu-cluster\n")
	if j = srv.WaitJob(j.Name, 60*time.Second, servertest.Terminal); j.Status != api.JobCompleted {
		t.Errorf("job after the host came back: %s %s", j.Status, j.Error)
	}
	// Deleting the compute stops every agent on the hosts.
	srv.DeleteCompute("cpu-cluster", 60*time.Second)
}
