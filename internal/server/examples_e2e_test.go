package server_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	tideexamples "github.com/tideml/tide/examples"
)

// requireML skips the test when the host lacks what the ML examples run
// with (Debian's python3-sklearn, python3-torch and openmpi-bin), and fails
// it under CI, which installs them.
func requireML(t *testing.T) {
	t.Helper()
	var missing []string
	if err := exec.Command("/usr/bin/python3", "-c", "import sklearn, torch").Run(); err != nil {
		missing = append(missing, "python3-sklearn and python3-torch (/usr/bin/python3 cannot import sklearn, torch)")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		missing = append(missing, "openmpi-bin (no mpirun)")
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("CI must install: %s", strings.Join(missing, "; "))
	}
	t.Skipf("missing: %s", strings.Join(missing, "; "))
}

// TestExamplesRunForReal runs the three examples under examples/ on two
// local nodes: the scikit-learn classifier, the 2-node PyTorch DDP job and
// the MPI hello world, each as its files say.
func TestExamplesRunForReal(t *testing.T) {
	requireML(t)
	in, dir := newServer(t)
	ctx := context.Background()
	exampleDir := dir + "/examples"
	if err := tideexamples.WriteTo(exampleDir); err != nil {
		t.Fatal(err)
	}
	c, err := tideexamples.Compute()
	if err != nil {
		t.Fatal(err)
	}
	c.IdleTimeBeforeScaleDown = 2
	if _, _, err := in.client.PutCompute(ctx, "default", c); err != nil {
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
	names := []string{tideexamples.SklearnDigits, tideexamples.PyTorchDDP, tideexamples.MPIHello}
	jobs := map[string]*api.Job{}
	for _, name := range names {
		j, err := tideexamples.Job(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := tideexamples.UploadCode(ctx, in.client, j, exampleDir+"/"+name); err != nil {
			t.Fatalf("uploading the code of %s: %v", name, err)
		}
		j.Name = strings.ReplaceAll(name, "-", "_")
		if jobs[name], err = in.client.CreateJob(ctx, "default", j); err != nil {
			t.Fatalf("submitting %s: %v", name, err)
		}
	}
	for _, name := range names {
		start := time.Now()
		j := waitJob(t, in, jobs[name].Name, 4*time.Minute)
		t.Logf("%s: %s after %.1fs of waiting (ran %.1fs)", name, j.Status, time.Since(start).Seconds(), j.EndTime.Sub(j.StartTime).Seconds())
		if j.Status != api.JobCompleted {
			t.Fatalf("%s: %s (%s)\n%s", name, j.Status, j.Error, strings.Join(j.LogTail, "\n"))
		}
		jobs[name] = j
	}

	sk := logText(t, in, jobs[tideexamples.SklearnDigits].Name)
	for _, want := range []string{"accuracy: 0.9", "wrote outputs/metrics.json", `the image of environment sklearn:1 ("mcr.microsoft.com/azureml/curated/sklearn-1.5:latest") is not used`} {
		if !strings.Contains(sk, want) {
			t.Errorf("sklearn-digits log lacks %q:\n%s", want, sk)
		}
	}
	if arts, err := in.client.Artifacts(ctx, "default", jobs[tideexamples.SklearnDigits].Name); err != nil || !hasArtifact(arts, "outputs/metrics.json") {
		t.Errorf("sklearn-digits artifacts: %v %v", arts, err)
	}

	// The DDP job trained on two nodes: both ranks logged, rank 0 reports.
	ddp := jobs[tideexamples.PyTorchDDP]
	if len(ddp.Ranks) != 2 || ddp.Ranks[0].Node == ddp.Ranks[1].Node {
		t.Errorf("pytorch-ddp ranks: %+v", ddp.Ranks)
	}
	lines, err := in.client.Logs(ctx, "default", ddp.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[int]string{}
	for _, l := range lines {
		byNode[l.Node] += l.Text + "\n"
	}
	for node, want := range map[int][]string{
		0: {"rank 0: joined a world of 2", "rank 0: epoch 15/15", "rank 0: accuracy: 0.9"},
		1: {"rank 1: joined a world of 2", "rank 1: epoch 15/15"},
	} {
		for _, w := range want {
			if !strings.Contains(byNode[node], w) {
				t.Errorf("pytorch-ddp node %d log lacks %q:\n%s", node, w, byNode[node])
			}
		}
	}
	if arts, err := in.client.Artifacts(ctx, "default", ddp.Name); err != nil || !hasArtifact(arts, "outputs/metrics.json") {
		t.Errorf("pytorch-ddp artifacts: %v %v", arts, err)
	}

	mpi := logText(t, in, jobs[tideexamples.MPIHello].Name)
	for _, want := range []string{"hello from MPI rank 0 of 2", "hello from MPI rank 1 of 2", "node 1 holds its 1 slot(s)"} {
		if !strings.Contains(mpi, want) {
			t.Errorf("mpi-hello log lacks %q:\n%s", want, mpi)
		}
	}
}

// TestDistributedLaunchersForReal runs launcher jobs on two local nodes with
// shell commands only: the rank variables every process sees, and one
// failing rank failing the job and stopping the others.
func TestDistributedLaunchersForReal(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, cluster)

	j := submit(t, in, `command: echo "R=$RANK W=$WORLD_SIZE N=$NODE_RANK L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE M=$MASTER_ADDR"
compute: cpu-cluster
resources: {instance_count: 2}
distribution: {type: pytorch, process_count_per_instance: 2}
`)
	j = waitJob(t, in, j.Name, time.Minute)
	if j.Status != api.JobCompleted {
		t.Fatalf("pytorch job: %s (%s) %v", j.Status, j.Error, j.LogTail)
	}
	text := logText(t, in, j.Name)
	for _, want := range []string{
		"[rank 0] R=0 W=4 N=0 L=0 LW=2 M=127.0.0.1", "[rank 1] R=1 W=4 N=0 L=1 LW=2 M=127.0.0.1",
		"[rank 2] R=2 W=4 N=1 L=0 LW=2 M=127.0.0.1", "[rank 3] R=3 W=4 N=1 L=1 LW=2 M=127.0.0.1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("pytorch log lacks %q:\n%s", want, text)
		}
	}

	j = submit(t, in, `command: echo "$TF_CONFIG"
compute: cpu-cluster
resources: {instance_count: 2}
distribution: {type: tensorflow, worker_count: 2}
`)
	j = waitJob(t, in, j.Name, time.Minute)
	text = logText(t, in, j.Name)
	if j.Status != api.JobCompleted || !strings.Contains(text, `"task":{"index":1,"type":"worker"}`) {
		t.Errorf("tensorflow job: %s (%s)\n%s", j.Status, j.Error, text)
	}

	// Rank 1 fails at once; rank 0 would sleep a minute but is stopped.
	start := time.Now()
	j = submit(t, in, `command: if [ "$RANK" = 1 ]; then echo rank 1 fails; exit 3; fi; exec sleep 60
compute: cpu-cluster
resources: {instance_count: 2}
distribution: {type: pytorch}
`)
	j = waitJob(t, in, j.Name, 40*time.Second)
	if j.Status != api.JobFailed || !strings.Contains(j.Error, "node 1: exit code 3") {
		t.Errorf("failing rank: %s (%s), want Failed with node 1's exit code", j.Status, j.Error)
	}
	if d := time.Since(start); d > 40*time.Second {
		t.Errorf("the failing job took %s: rank 0 was not stopped", d)
	}
}

// TestDDPResumesAfterPreemption preempts the node of rank 0 of the 2-node
// PyTorch DDP example mid-training on a low-priority compute: the job is
// retried on new nodes, restores the checkpoint rank 0 saved, resumes after
// the last saved epoch and completes.
func TestDDPResumesAfterPreemption(t *testing.T) {
	requireML(t)
	in, dir := newServer(t)
	ctx := context.Background()
	exampleDir := dir + "/examples"
	if err := tideexamples.WriteTo(exampleDir); err != nil {
		t.Fatal(err)
	}
	c, err := tideexamples.Compute()
	if err != nil {
		t.Fatal(err)
	}
	c.Tier, c.IdleTimeBeforeScaleDown = api.TierLowPriority, 2
	if _, _, err := in.client.PutCompute(ctx, "default", c); err != nil {
		t.Fatal(err)
	}
	envs, err := tideexamples.Environments()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envs {
		if _, _, err := in.client.CreateEnvironment(ctx, "default", e); err != nil {
			t.Fatal(err)
		}
	}
	j, err := tideexamples.Job(tideexamples.PyTorchDDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := tideexamples.UploadCode(ctx, in.client, j, exampleDir+"/"+tideexamples.PyTorchDDP); err != nil {
		t.Fatal(err)
	}
	j.Name = "ddp_preempted"
	// Slow epochs down a little so that the preemption lands mid-training.
	j.Inputs["epochs"] = api.JobInput{Type: api.InputLiteral, Value: "40"}
	if _, err := in.client.CreateJob(ctx, "default", j); err != nil {
		t.Fatal(err)
	}
	var rank0 string
	waitFor(t, "a saved epoch", 3*time.Minute, func() bool {
		cur, err := in.client.Job(ctx, "default", j.Name)
		if err != nil || cur.Status != api.JobRunning {
			return false
		}
		lines, _ := in.client.Logs(ctx, "default", j.Name, 0)
		for _, l := range lines {
			if strings.Contains(l.Text, "rank 0: epoch 3/40") {
				rank0 = cur.Ranks[0].Node
				return true
			}
		}
		return false
	})
	if _, err := in.client.PreemptNode(ctx, "default", c.Name, rank0); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, in, j.Name, 4*time.Minute)
	if got.Status != api.JobCompleted || got.Attempt != 2 || got.Retried.NodeFailure != 1 {
		t.Fatalf("DDP job after preemption: %s attempt %d retried %+v (%s)\n%s", got.Status, got.Attempt, got.Retried, got.Error, strings.Join(got.LogTail, "\n"))
	}
	lines, err := in.client.Logs(ctx, "default", j.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	var second strings.Builder
	for _, l := range lines {
		if l.Attempt == 2 {
			second.WriteString(l.Text + "\n")
		}
	}
	text := second.String()
	for _, want := range []string{"restored the checkpoint", "rank 0: resuming after epoch", "rank 0: epoch 40/40", "rank 0: accuracy: 0.9"} {
		if !strings.Contains(text, want) {
			t.Errorf("attempt 2 log lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "rank 0: epoch 1/40") {
		t.Errorf("attempt 2 started from epoch 1 instead of resuming:\n%s", text)
	}
}
