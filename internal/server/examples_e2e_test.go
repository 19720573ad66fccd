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
		tideexamples.CopyCode(j, exampleDir+"/"+name)
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
