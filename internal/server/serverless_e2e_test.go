package server_test

// Serverless jobs end to end with real agents: a job file with no compute
// runs on nodes made for it alone, which are gone once it ends; gangs,
// quota waits and refusals, and spot preemption with resume.

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	tideexamples "github.com/tideml/tide/examples"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/spec"
)

// waitGone waits until a serverless job's compute, and so its nodes, are
// deleted.
func waitGone(t *testing.T, in *instance, compute string) {
	t.Helper()
	waitFor(t, "compute "+compute+" deleted", 30*time.Second, func() bool {
		_, err := in.client.Compute(context.Background(), "default", compute)
		return api.IsNotFound(err)
	})
}

func TestServerlessHelloWorldRunsOnItsOwnNode(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(examples, "jobs/basics/hello-world.yml"))
	if err != nil {
		t.Fatal(err)
	}
	j := submit(t, in, string(b))
	sl := j.Serverless
	if sl == nil || sl.InstanceType != config.DefaultServerlessInstanceType || sl.InstanceCount != 1 || sl.Tier != api.TierDedicated || sl.Location != "local" {
		t.Fatalf("submitted job's serverless = %+v, want 1 × %s dedicated in local", sl, config.DefaultServerlessInstanceType)
	}
	if !strings.HasPrefix(j.Compute, api.ServerlessPrefix) {
		t.Fatalf("compute = %q, want a hidden %s* compute", j.Compute, api.ServerlessPrefix)
	}
	// Its compute is the job's, not the workspace's: not listed, not
	// deletable.
	cs, err := in.client.Computes(ctx, "default")
	if err != nil || len(cs) != 0 {
		t.Errorf("compute list = %v %v, want no computes", cs, err)
	}
	if err := in.client.DeleteCompute(ctx, "default", j.Compute); api.ProblemCode(err) != api.CodeConflict || !strings.Contains(err.Error(), "serverless job "+j.Name) {
		t.Errorf("deleting a serverless job's compute: %v, want 409 naming the job", err)
	}
	got := waitJob(t, in, j.Name, 60*time.Second)
	if got.Status != api.JobCompleted {
		t.Fatalf("hello-world serverless: %s (%s) %v", got.Status, got.Error, got.LogTail)
	}
	if text := logText(t, in, j.Name); !strings.Contains(text, "hello world") {
		t.Errorf("log lacks hello world:\n%s", text)
	}
	if len(got.Ranks) != 1 || !strings.HasPrefix(got.Ranks[0].Node, j.Compute+"-") {
		t.Errorf("ranks %+v: want one node of %s", got.Ranks, j.Compute)
	}
	// compute serverless lists the serverless jobs, as in a job file.
	if js, err := in.client.Jobs(ctx, "default", api.JobFilter{Compute: "serverless"}); err != nil || len(js) != 1 || js[0].Name != j.Name {
		t.Errorf("job list --compute serverless = %v %v, want %s", js, err, j.Name)
	}
	// The compute goes once its provider deleted its node.
	waitGone(t, in, j.Compute)
	// The job keeps its price once its compute is gone.
	if got, err := in.client.Job(ctx, "default", j.Name); err != nil || got.Cost == nil || got.Cost.PricePerHour != 0.293 {
		t.Errorf("cost of the ended serverless job: %+v %v, want Standard_DS3_v2's 0.293/h", got.Cost, err)
	}
	ev := events(t, in, j.Name)
	if !strings.Contains(ev, "submitted serverless: 1 × Standard_DS3_v2 (dedicated) in location local") {
		t.Errorf("job events:\n%s", ev)
	}
}

func TestServerlessGangOnFreshNodes(t *testing.T) {
	in, _ := newServer(t)
	j := submit(t, in, "command: echo rank=$NODE_RANK of $AZUREML_NODE_COUNT agent=$PPID\ncompute: serverless\nresources:\n  instance_type: Standard_DS2_v2\n  instance_count: 2\n")
	if j.Serverless == nil || j.Serverless.InstanceType != "Standard_DS2_v2" || j.Serverless.InstanceCount != 2 {
		t.Fatalf("serverless = %+v", j.Serverless)
	}
	got := waitJob(t, in, j.Name, 60*time.Second)
	if got.Status != api.JobCompleted || len(got.Ranks) != 2 || got.Ranks[0].Node == got.Ranks[1].Node {
		t.Fatalf("gang: %s ranks %+v", got.Status, got.Ranks)
	}
	text := logText(t, in, j.Name)
	if !strings.Contains(text, "rank=0 of 2") || !strings.Contains(text, "rank=1 of 2") {
		t.Errorf("log:\n%s", text)
	}
	waitGone(t, in, j.Compute)
	// Their agents are gone too: no idle time.
	agents := regexp.MustCompile(`agent=(\d+)`).FindAllStringSubmatch(text, -1)
	if len(agents) != 2 {
		t.Fatalf("want two agent pids in the log:\n%s", text)
	}
	for _, m := range agents {
		if cmd, err := os.ReadFile("/proc/" + m[1] + "/cmdline"); err == nil && strings.Contains(string(cmd), "agent") {
			t.Errorf("agent %s still runs after its serverless job ended: %q", m[1], cmd)
		}
	}
}

func TestServerlessQuotaWaitsAndRefuses(t *testing.T) {
	dir := t.TempDir()
	four := 4 // one Standard_DS3_v2 node
	in := startWith(t, dir, "", "", func(c *config.Server) {
		c.Quotas.Families = map[string]catalog.FamilyQuota{"standardDSv2Family": {Dedicated: &four}}
	})
	t.Cleanup(func() { cleanup(t, in) })
	ctx := context.Background()

	// Two nodes can never fit four vCPUs: refused at submit.
	big, err := spec.ParseJob("big.yml", []byte("command: 'true'\nresources:\n  instance_count: 2\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.client.CreateJob(ctx, "default", big)
	if api.ProblemCode(err) != api.CodeQuotaExceeded || !strings.Contains(err.Error(), "resources.instance_count: 2 node(s) of Standard_DS3_v2 need 8") ||
		!strings.Contains(err.Error(), "quotas.families.standardDSv2Family.dedicated") {
		t.Errorf("a gang over the quota: %v, want 409 naming the quota", err)
	}
	if js, _ := in.client.Jobs(ctx, "default", api.JobFilter{}); len(js) != 0 {
		t.Errorf("a refused job was stored: %+v", js)
	}

	// The first job holds the quota; the second waits for it, saying so.
	flag := filepath.Join(dir, "release")
	first := submit(t, in, "command: while [ ! -e "+flag+" ]; do sleep 0.1; done\n")
	second := submit(t, in, "command: echo second ran\n")
	runningNode(t, in, first.Compute, first.Name)
	waitFor(t, "the second job's pending reason", 20*time.Second, func() bool {
		j, err := in.client.Job(ctx, "default", second.Name)
		return err == nil && j.Status == api.JobQueued && strings.Contains(j.PendingReason, "waiting for quota: 1 × Standard_DS3_v2 node(s) need 4 standardDSv2Family dedicated vCPUs in location local; 4 of the limit 4 are reserved")
	})
	if ns, err := in.client.Nodes(ctx, "default", second.Compute); err != nil || len(ns) != 0 {
		t.Errorf("the waiting job has nodes: %+v %v", ns, err)
	}
	// Quota usage counts the running serverless job.
	us, err := in.client.Usages(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if u.Family == "standardDSv2Family" && u.Tier == api.TierDedicated && u.CurrentValue != 4 {
			t.Errorf("usage of standardDSv2Family dedicated = %d, want 4", u.CurrentValue)
		}
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if j := waitJob(t, in, first.Name, 30*time.Second); j.Status != api.JobCompleted {
		t.Fatalf("first: %s (%s)", j.Status, j.Error)
	}
	if j := waitJob(t, in, second.Name, 60*time.Second); j.Status != api.JobCompleted {
		t.Fatalf("second: %s (%s)", j.Status, j.Error)
	}
	waitGone(t, in, first.Compute)
	waitGone(t, in, second.Compute)
}

func TestServerlessSpotIsPreemptedAndResumes(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	j := submit(t, in, strings.Replace(counter, "compute: spot-cluster\n", "queue_settings:\n  job_tier: spot\n", 1))
	if j.Serverless == nil || j.Serverless.Tier != api.TierLowPriority {
		t.Fatalf("job_tier spot: serverless = %+v, want low_priority", j.Serverless)
	}
	node := runningNode(t, in, j.Compute, j.Name)
	waitFor(t, "a few steps", 30*time.Second, func() bool {
		lines, _ := in.client.Logs(ctx, "default", j.Name, 0)
		for _, l := range lines {
			if l.Text == "step 3" {
				return true
			}
		}
		return false
	})
	if _, err := in.client.PreemptNode(ctx, "default", j.Compute, node.ID); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, in, j.Name, 90*time.Second)
	if got.Status != api.JobCompleted || got.Attempt != 2 || got.Retried.NodeFailure != 1 || got.Ranks[0].Node == node.ID {
		t.Fatalf("after preemption: %s attempt %d retried %+v ranks %+v\n%s", got.Status, got.Attempt, got.Retried, got.Ranks, events(t, in, j.Name))
	}
	if text := logText(t, in, j.Name); strings.Count(text, "step 1\n") != 1 || !strings.Contains(text, "step 12\n") {
		t.Errorf("the job did not resume from its checkpoint:\n%s", text)
	}
	waitGone(t, in, j.Compute)
}

func TestServerlessBadInput(t *testing.T) {
	in, _ := newServer(t)
	ctx := context.Background()
	bad, err := spec.ParseJob("bad.yml", []byte("command: 'true'\nresources:\n  instance_type: Standard_DS3_v9\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.client.CreateJob(ctx, "default", bad)
	if api.ProblemCode(err) != api.CodeValidation || !strings.Contains(err.Error(), `resources.instance_type: unknown VM size "Standard_DS3_v9"; nearest sizes: Standard_DS3_v2`) {
		t.Errorf("unknown instance_type: %v", err)
	}
	// A compute may not take the names serverless jobs use.
	for _, name := range []string{"serverless", "serverless-abc"} {
		if _, err := spec.ParseCompute("c.yml", []byte("name: "+name+"\ntype: amlcompute\n"), nil); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("file of a compute named %s: %v, want reserved", name, err)
		}
		c := &api.Compute{Name: name, Type: api.ComputeTypeAmlCompute, Size: "Standard_DS3_v2", MaxInstances: 1}
		if _, _, err := in.client.PutCompute(ctx, "default", c); api.ProblemCode(err) != api.CodeValidation || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("compute named %s: %v, want reserved", name, err)
		}
	}
	// On a cluster, instance_type and job_tier are ignored as in Azure, and
	// the job's log says so.
	createCompute(t, in, cluster)
	j := submit(t, in, "command: echo on the cluster\ncompute: azureml:cpu-cluster\nresources:\n  instance_type: Standard_NC6s_v3\nqueue_settings:\n  job_tier: spot\n")
	if j.Serverless != nil || j.Compute != "cpu-cluster" {
		t.Fatalf("a job naming a cluster ran serverless: %+v", j.Serverless)
	}
	got := waitJob(t, in, j.Name, 60*time.Second)
	text := logText(t, in, j.Name)
	if got.Status != api.JobCompleted || !strings.Contains(text, "resources.instance_type Standard_NC6s_v3 is ignored: the job runs on compute cpu-cluster, whose nodes are Standard_DS3_v2") {
		t.Errorf("%s; log:\n%s", got.Status, text)
	}
	if !strings.Contains(text, "queue_settings.job_tier spot is ignored: the job runs on compute cpu-cluster") {
		t.Errorf("no word on the ignored job_tier; log:\n%s", text)
	}
}

// TestServerlessPyTorchDDP runs the 2-node PyTorch DDP example with its
// compute line removed: serverless, on two fresh nodes.
func TestServerlessPyTorchDDP(t *testing.T) {
	requireML(t)
	in, dir := newServer(t)
	ctx := context.Background()
	exampleDir := dir + "/examples"
	if err := tideexamples.WriteTo(exampleDir); err != nil {
		t.Fatal(err)
	}
	envs, err := tideexamples.Environments()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envs {
		if _, _, err := in.client.CreateEnvironment(ctx, "default", e); err != nil {
			t.Fatalf("registering environment %s: %v", e.Name, err)
		}
	}
	j, err := tideexamples.Job(tideexamples.PyTorchDDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := tideexamples.UploadCode(ctx, in.client, j, exampleDir+"/"+tideexamples.PyTorchDDP); err != nil {
		t.Fatal(err)
	}
	j.Compute = ""
	j.Resources.InstanceType = "Standard_DS2_v2"
	out, err := in.client.CreateJob(ctx, "default", j)
	if err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, in, out.Name, 4*time.Minute)
	if got.Status != api.JobCompleted || len(got.Ranks) != 2 || got.Ranks[0].Node == got.Ranks[1].Node {
		t.Fatalf("serverless DDP: %s (%s) ranks %+v\n%s", got.Status, got.Error, got.Ranks, strings.Join(got.LogTail, "\n"))
	}
	text := logText(t, in, out.Name)
	for _, w := range []string{"rank 0: joined a world of 2", "rank 1: joined a world of 2", "rank 0: accuracy: 0.9"} {
		if !strings.Contains(text, w) {
			t.Errorf("log lacks %q:\n%s", w, text)
		}
	}
	waitGone(t, in, out.Compute)
}
