package server_test

// Replicas without a shared disk: two `tide server` processes on one real
// PostgreSQL, each with its own data dir, keep their files (code
// snapshots, artifacts, checkpoints, step outputs) in one blob container
// on a real Azurite, and read one secret key file each (copies of one
// key). What one replica received, the other serves.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	tideexamples "github.com/tideml/tide/examples"
	"github.com/tideml/tide/internal/azureblob/azuritetest"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store/pgtest"
)

func TestReplicasShareBlobStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, Azurite, two servers and agents")
	}
	az := azuritetest.Start(t)
	pg := pgtest.NewCluster(t)
	storeURL := pg.Database(t)
	dir := t.TempDir()
	addrs := []string{freeAddr(t), freeAddr(t)}
	// Agents speak to b first: what nodes upload (artifacts, checkpoints)
	// arrives through b, while a leads and hands step outputs on.
	agentOrder := []string{addrs[1], addrs[0]}
	storage := fmt.Sprintf("storage:\n  type: azure_blob\n  account_name: %s\n  container_name: tide-server\n  endpoint_url: %s\n  account_key: %s\n",
		azuritetest.Account, az.URL, azuritetest.Key)
	layout := func(name string) replicaLayout {
		return replicaLayout{dataDir: filepath.Join(dir, "data-"+name), machines: filepath.Join(dir, "machines"),
			extra: storage + fmt.Sprintf("preempt_grace: 2s\nsecrets_key_file: %q\n", filepath.Join(dir, "key-"+name))}
	}
	cfgA := writeReplicaConfigWith(t, dir, "a", addrs[0], storeURL, agentOrder, layout("a"))
	cfgB := writeReplicaConfigWith(t, dir, "b", addrs[1], storeURL, agentOrder, layout("b"))
	logReplicasOnFailure(t, dir, 40, "a", "b", "c")

	startReplica(t, dir, "a", addrs[0], cfgA)
	waitFor(t, "replica a to lead", 30*time.Second, func() bool { r, ok := ready(addrs[0]); return ok && r.Leading })
	// b's key file is a copy of the one a made: the operator's step.
	key, err := os.ReadFile(filepath.Join(dir, "key-a"))
	if err != nil {
		t.Fatalf("secrets_key_file written by the first replica: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key-b"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	b := startReplica(t, dir, "b", addrs[1], cfgB)
	waitFor(t, "replica b to serve", 30*time.Second, func() bool { r, ok := ready(addrs[1]); return ok && r.Leader == "a" && !r.Leading })

	// A third replica with a key of its own refuses to start, naming its
	// key file, instead of sealing secrets the others cannot open.
	addrC := freeAddr(t)
	lc := layout("c")
	lc.extra = storage // its own data dir's secrets.key
	cfgC := writeReplicaConfigWith(t, dir, "c", addrC, storeURL, agentOrder, lc)
	out, err := exec.Command(tideBin, "server", "--config", cfgC).CombinedOutput()
	os.WriteFile(filepath.Join(dir, "c.log"), out, 0o600)
	if wantKey := filepath.Join(lc.dataDir, "secrets.key"); err == nil || !strings.Contains(string(out), "the key in "+wantKey+" does not open what the other replicas sealed") {
		t.Errorf("replica c with its own secret key: %v\n%s", err, tail(string(out), 5))
	}

	ca, cb := replicaClients(t, dir, addrs)
	ctx := context.Background()
	comp, err := spec.ParseCompute("c.yml", []byte(strings.Replace(lowPriority, "idle_time_before_scale_down: 1", "idle_time_before_scale_down: 600", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.PutCompute(ctx, "default", comp); err != nil {
		t.Fatal(err)
	}
	deleteComputeOnCleanup(t, comp.Name, ca, cb)
	wait := func(c *api.Client, name string) *api.Job {
		t.Helper()
		var j *api.Job
		waitFor(t, "job "+name+" to end", 120*time.Second, func() bool {
			var err error
			j, err = c.Job(ctx, "default", name)
			return err == nil && api.JobTerminal(j.Status)
		})
		return j
	}

	// 1. Code uploaded through a; its node fetches it through b, uploads
	// outputs and logs through b; both replicas serve them.
	code := filepath.Join(dir, "src")
	os.MkdirAll(code, 0o755)
	os.WriteFile(filepath.Join(code, "train.py"), []byte("import os\nopen(os.path.join(os.environ['TIDE_OUTPUTS_DIR'], 'model.txt'), 'w').write('weights 42\\n')\nprint('trained')\n"), 0o644)
	j, err := spec.ParseJob("job.yml", []byte("code: src\ncommand: python3 train.py\ncompute: spot-cluster\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tideexamples.UploadCode(ctx, ca, j, dir); err != nil {
		t.Fatal(err)
	}
	j, err = ca.CreateJob(ctx, "default", j)
	if err != nil {
		t.Fatal(err)
	}
	if got := wait(cb, j.Name); got.Status != api.JobCompleted {
		t.Fatalf("job with code: %s (%s)", got.Status, got.Error)
	}
	for name, c := range map[string]*api.Client{"a": ca, "b": cb} {
		arts, err := c.Artifacts(ctx, "default", j.Name)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, a := range arts {
			paths = append(paths, a.Path)
		}
		if !strings.Contains(strings.Join(paths, " "), "outputs/model.txt") || !strings.Contains(strings.Join(paths, " "), "logs/") {
			t.Errorf("artifacts through replica %s: %v", name, paths)
		}
		body, _, err := c.OpenArtifact(ctx, "default", j.Name, "outputs/model.txt")
		if err != nil {
			t.Fatalf("outputs/model.txt through replica %s: %v", name, err)
		}
		got, _ := io.ReadAll(body)
		body.Close()
		if string(got) != "weights 42\n" {
			t.Errorf("outputs/model.txt through replica %s: %q", name, got)
		}
	}

	// 2. A pipeline: step outputs uploaded through b, handed on by a.
	p, err := spec.ParseJob("p.yml", []byte(`type: pipeline
settings:
  default_compute: azureml:spot-cluster
jobs:
  make:
    command: echo made > ${{outputs.out}}/data.txt
    outputs:
      out:
        type: uri_folder
  use:
    command: cat ${{inputs.x}}/data.txt
    inputs:
      x: ${{parent.jobs.make.outputs.out}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = ca.CreateJob(ctx, "default", p); err != nil {
		t.Fatal(err)
	}
	if got := wait(ca, p.Name); got.Status != api.JobCompleted {
		t.Fatalf("pipeline: %s (%s)", got.Status, got.Error)
	} else {
		for _, st := range got.Steps {
			if text := logTextVia(t, cb, st.Job); st.Name == "use" && !strings.Contains(text, "made\n") {
				t.Errorf("step use did not read step make's output:\n%s", text)
			}
		}
	}

	// 3. A checkpointing job preempted: its checkpoint went up through b;
	// b is gone when the next node starts, which reads it through a.
	// Slower steps than elsewhere: the eviction notice goes from the
	// leader to the node through the other replica.
	cj, err := spec.ParseJob("job.yml", []byte(strings.Replace(counter, "sleep 0.25", "sleep 1", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cj, err = ca.CreateJob(ctx, "default", cj); err != nil {
		t.Fatal(err)
	}
	var node string
	waitFor(t, "a few steps", 60*time.Second, func() bool {
		got, err := ca.Job(ctx, "default", cj.Name)
		if err != nil || len(got.Ranks) == 0 {
			return false
		}
		node = got.Ranks[0].Node
		lines, _ := ca.Logs(ctx, "default", cj.Name, 0)
		for _, l := range lines {
			if l.Text == "step 3" {
				return true
			}
		}
		return false
	})
	if _, err := ca.PreemptNode(ctx, "default", "spot-cluster", node); err != nil {
		t.Fatal(err)
	}
	var last *api.Job
	t.Cleanup(func() {
		if t.Failed() && last != nil {
			t.Logf("checkpointed job: %s attempt %d ranks %+v\n%s", last.Status, last.Attempt, last.Ranks, logTextVia(t, ca, cj.Name))
		}
	})
	waitFor(t, "the job requeued", 60*time.Second, func() bool {
		var err error
		last, err = ca.Job(ctx, "default", cj.Name)
		return err == nil && last.Attempt == 2
	})
	b.kill()
	got := wait(ca, cj.Name)
	text := logTextVia(t, ca, cj.Name)
	if got.Status != api.JobCompleted || !strings.Contains(text, "restored the checkpoint") || strings.Contains(text, "attempt 2 starts at step 0") {
		t.Errorf("checkpointed job: %s attempt %d (%s)\n%s", got.Status, got.Attempt, got.Error, text)
	}

	// Nothing of it is on the replicas' disks; all is in the container.
	for _, n := range []string{"a", "b"} {
		for _, sub := range []string{"artifacts", "blobs", "checkpoints"} {
			if _, err := os.Stat(filepath.Join(dir, "data-"+n, sub)); !os.IsNotExist(err) {
				t.Errorf("replica %s keeps %s in its data dir: %v", n, sub, err)
			}
		}
	}
	container := az.Container(t, "tide-server", nil)
	for _, name := range []string{"artifacts/default/" + j.Name + "/outputs/model.txt", "checkpoints/default/" + cj.Name + ".tar.gz"} {
		if _, err := container.Stat(ctx, name); err != nil {
			t.Errorf("blob %s: %v", name, err)
		}
	}
}
