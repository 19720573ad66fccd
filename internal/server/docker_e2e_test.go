package server_test

// End-to-end tests of the docker runtime: real agents on a location with
// `runtime: docker` run their jobs in containers of a real Docker engine.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/dockerengine/dockertest"
	"github.com/tideml/tide/internal/spec"
)

// tinySize is a node size small enough that a job can exceed its memory
// quickly: the docker runtime limits a container to its node's size.
var tinySize = api.Size{Name: "Tide_Test_Tiny", Family: "standardDSv2Family", VCPUs: 1, MemoryGB: 0.0625}

// newDockerServer starts a server whose default location "dock" runs jobs
// with the docker runtime on local-provider nodes.
func newDockerServer(t *testing.T) *instance {
	t.Helper()
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) {
		c.Locations = append(c.Locations, config.Location{Name: "dock", Provider: "local", Runtime: "docker", Oversubscribe: true,
			Settings: map[string]any{"agent_command": []any{tideBin, "agent"}, "grace_period": "5s"}})
		c.Sizes = append(c.Sizes, tinySize)
	})
	t.Cleanup(func() { cleanup(t, in) })
	return in
}

const dockerCluster = `name: dock-cluster
type: amlcompute
size: Tide_Test_Tiny
location: dock
min_instances: 0
max_instances: 2
idle_time_before_scale_down: 30
`

func TestDockerRuntimeJobs(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.Busybox(t, engine)
	in := newDockerServer(t)
	c := createCompute(t, in, dockerCluster)
	if c, err := in.client.Compute(context.Background(), "default", c.Name); err != nil || c.Runtime != "docker" {
		t.Fatalf("compute runtime = %q, %v; want docker", c.Runtime, err)
	}

	// Azure ML's hello-world.yml, with its python image replaced by the
	// local busybox image (no registry is reachable here).
	b, err := os.ReadFile(filepath.Join(examples, "jobs/basics/hello-world.yml"))
	if err != nil {
		t.Fatal(err)
	}
	hello := strings.Replace(string(b), "library/python:latest", image, 1)
	if hello == string(b) {
		t.Fatal("hello-world.yml no longer names library/python:latest; update the test")
	}
	buildDir := t.TempDir()
	stamp := time.Now().Format("150405.000000000")
	if err := os.WriteFile(filepath.Join(buildDir, "Dockerfile"), []byte("FROM "+image+"\nRUN echo built "+stamp+" > /etc/built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	os.Chmod(data, 0o755)
	if err := os.WriteFile(filepath.Join(data, "iris.csv"), []byte("5.1,setosa\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	input := "inputs:\n  d:\n    type: uri_folder\n    path: file://" + data + "\n"
	cases := []struct {
		name   string
		yml    string
		status string
		want   []string // in the log
		err    string   // in the job's error
	}{
		{name: "hello world", yml: hello, status: api.JobCompleted, want: []string{"hello world"}},
		{name: "inside the image", status: api.JobCompleted, want: []string{"BusyBox", "shm 64"},
			yml: "command: busybox | head -n 1; echo shm $(df -m /dev/shm | tail -n 1 | tr -s ' ' | cut -d' ' -f2)\nresources:\n  shm_size: 64m\nenvironment:\n  image: " + image + "\n"},
		{name: "memory limit", status: api.JobFailed, err: "out of memory (limit 64 MiB)",
			yml: "command: head -c 300000000 /dev/zero | tail\nenvironment:\n  image: " + image + "\n"},
		{name: "build", status: api.JobCompleted, want: []string{"building image tide-build:", "built " + stamp},
			yml: "command: cat /etc/built\nenvironment:\n  build:\n    path: " + buildDir + "\n"},
		{name: "ro_mount input", status: api.JobFailed, want: []string{"5.1,setosa", "shown read-only at", "Read-only file system"},
			yml: "command: cat ${{inputs.d}}/iris.csv && echo x > ${{inputs.d}}/iris.csv\nenvironment:\n  image: " + image + "\n" + input},
		{name: "download input", status: api.JobCompleted, want: []string{"5.1,setosa", "changed"},
			yml: "command: cat ${{inputs.d}}/iris.csv && echo changed > ${{inputs.d}}/iris.csv && cat ${{inputs.d}}/iris.csv\nenvironment:\n  image: " + image + "\n" +
				strings.Replace(input, "\n    path:", "\n    mode: download\n    path:", 1)},
		{name: "missing image", status: api.JobFailed, err: "tide-test/no-such-image:1",
			yml: "command: echo never\nenvironment:\n  image: tide-test/no-such-image:1\n"},
	}
	var jobs []*api.Job
	for _, tc := range cases {
		jobs = append(jobs, submit(t, in, tc.yml, "compute=dock-cluster"))
	}
	for i, tc := range cases {
		j := waitJob(t, in, jobs[i].Name, 90*time.Second)
		text := logText(t, in, j.Name)
		if j.Status != tc.status || !strings.Contains(j.Error, tc.err) {
			t.Errorf("%s: %s (%s); want %s with error containing %q; log:\n%s", tc.name, j.Status, j.Error, tc.status, tc.err, text)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: log lacks %q:\n%s", tc.name, w, text)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(data, "iris.csv")); err != nil || string(b) != "5.1,setosa\n" {
		t.Errorf("the input's file on the host after the jobs: %q, %v", b, err)
	}
	if tag := buildTag(t, in, jobs[3].Name); tag != "" {
		_ = engine.RemoveImage(context.Background(), tag)
	}
	left, err := engine.ListContainers(context.Background(), map[string]string{"tide.node": ""})
	if err == nil {
		for _, c := range left {
			if strings.Contains(strings.Join(c.Names, ","), jobs[0].Name) {
				t.Errorf("container %v left behind", c.Names)
			}
		}
	}
}

// buildTag finds the image a build job used, from its log.
func buildTag(t *testing.T, in *instance, job string) string {
	for _, l := range strings.Split(logText(t, in, job), "\n") {
		if _, rest, ok := strings.Cut(l, "building image "); ok {
			return strings.Fields(rest)[0]
		}
	}
	return ""
}

func TestImageWithoutDockerEngineIsRejectedAtSubmit(t *testing.T) {
	// No engine listens on this socket.
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	in := newDockerServer(t)
	createCompute(t, in, dockerCluster)
	j, err := spec.ParseJob("job.yml", []byte("command: echo hi\ncompute: dock-cluster\nenvironment:\n  image: busybox\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.client.CreateJob(context.Background(), "default", j)
	if err == nil || !strings.Contains(err.Error(), "no Docker engine answers") || !strings.Contains(err.Error(), "runtime docker") {
		t.Fatalf("CreateJob = %v; want a rejection naming the missing engine", err)
	}
	j.Environment = nil
	if _, err = in.client.CreateJob(context.Background(), "default", j); err == nil || !strings.Contains(err.Error(), "environment: required on compute") {
		t.Fatalf("CreateJob without environment = %v; want a rejection asking for an image", err)
	}
	// A GPU size on a docker location whose host has no GPU (this test
	// machine has none) is rejected at submit time, not left to fail.
	if hasGPU, _ := filepath.Glob("/dev/nvidia[0-9]*"); len(hasGPU) > 0 {
		return
	}
	createCompute(t, in, "name: gpu-dock\ntype: amlcompute\nsize: Standard_NC4as_T4_v3\nlocation: dock\nmax_instances: 1\n")
	g, err := spec.ParseJob("job.yml", []byte("command: nvidia-smi\ncompute: gpu-dock\nenvironment:\n  image: busybox\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = in.client.CreateJob(context.Background(), "default", g); err == nil || !strings.Contains(err.Error(), "has 1 GPU(s) per node, but the host of location dock (runtime docker) has 0") {
		t.Fatalf("CreateJob on a GPU size without host GPUs = %v; want a rejection naming the GPU count", err)
	}
}

// TestGangJobOnDockerNodes runs a 2-node job on docker-provider nodes
// attached to the compute's network; the server listens on the network's
// gateway (the host's address on it), which the nodes reach.
func TestGangJobOnDockerNodes(t *testing.T) {
	engine := dockertest.Engine(t)
	nodeImage := dockertest.NodeImage(t, engine, tideBin)
	ctx := context.Background()
	network := "tide-e2e-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	if err := engine.CreateNetwork(ctx, network); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.RemoveNetwork(context.Background(), network) })
	gw, err := engine.NetworkGateway(ctx, network)
	if err != nil {
		t.Fatal(err)
	}
	in := startWith(t, t.TempDir(), net.JoinHostPort(gw, "0"), "", func(c *config.Server) {
		c.Locations = append(c.Locations, config.Location{Name: "containers", Provider: "docker",
			Settings: map[string]any{"image": nodeImage, "agent_binary": tideBin, "grace_period": "3s"}})
	})
	t.Cleanup(func() { cleanup(t, in) })
	createCompute(t, in, "name: docker-nodes\ntype: amlcompute\nsize: Standard_DS3_v2\nlocation: containers\nmin_instances: 0\nmax_instances: 2\nidle_time_before_scale_down: 30\nnetwork_settings:\n  vnet_name: "+network+"\n")
	createCompute(t, in, "name: no-net\ntype: amlcompute\nsize: Standard_DS3_v2\nlocation: containers\nmin_instances: 0\nmax_instances: 1\nnetwork_settings:\n  vnet_name: tide-e2e-no-such-network\n")

	j := submit(t, in, "command: echo rank $AZUREML_CR_NODE_RANK of $AZUREML_NODE_COUNT on $(hostname)\nresources:\n  instance_count: 2\n", "compute=docker-nodes")
	j = waitJob(t, in, j.Name, 120*time.Second)
	text := logText(t, in, j.Name)
	if j.Status != api.JobCompleted {
		t.Fatalf("gang job: %s (%s); log:\n%s", j.Status, j.Error, text)
	}
	for _, w := range []string{"rank 0 of 2 on ", "rank 1 of 2 on "} {
		if !strings.Contains(text, w) {
			t.Errorf("log lacks %q:\n%s", w, text)
		}
	}
	nodes, err := in.client.Nodes(ctx, "default", "docker-nodes")
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes = %v, %v; want 2", nodes, err)
	}
	for _, n := range nodes {
		if n.Provider != "docker" || !strings.HasPrefix(n.ProviderID, "container:") || n.Runtime != "process" {
			t.Errorf("node %s: provider %q id %q runtime %q; want a docker container running the process runtime", n.ID, n.Provider, n.ProviderID, n.Runtime)
		}
	}

	// An unknown network is a provisioning error on the compute.
	j2 := submit(t, in, "command: echo never\n", "compute=no-net")
	waitFor(t, "the unknown network reported on compute no-net", 30*time.Second, func() bool {
		evs, err := in.client.ComputeEvents(ctx, "default", "no-net")
		if err != nil {
			return false
		}
		for _, e := range evs {
			if strings.Contains(e.Message, `network_settings.vnet_name "tide-e2e-no-such-network"`) {
				return true
			}
		}
		return false
	})
	_, _ = in.client.CancelJob(ctx, "default", j2.Name)
}

// TestSandboxRuntimeJob runs a job on a location with runtime sandbox:
// bubblewrap, the host read-only, no network (vnet_name: none), the image
// noted as unused.
func TestSandboxRuntimeJob(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("bwrap not found; CI must install bubblewrap")
		}
		t.Skip("bwrap not found; install bubblewrap")
	}
	in := startWith(t, t.TempDir(), "", "", func(c *config.Server) {
		c.Locations = append(c.Locations, config.Location{Name: "sandboxed", Provider: "local", Runtime: "sandbox",
			Settings: map[string]any{"agent_command": []any{tideBin, "agent"}, "grace_period": "5s"}})
	})
	t.Cleanup(func() { cleanup(t, in) })
	createCompute(t, in, "name: sandbox-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nlocation: sandboxed\nmin_instances: 0\nmax_instances: 1\nnetwork_settings:\n  vnet_name: none\n")
	c, err := in.client.Compute(context.Background(), "default", "sandbox-cluster")
	if err != nil || c.Runtime != "sandbox" {
		t.Fatalf("compute runtime = %v, %v; want sandbox", c, err)
	}
	// A ro_mount input is bound read-only (--ro-bind), not copied: the
	// job sees the host file's inode and cannot write it.
	data := t.TempDir()
	os.Chmod(data, 0o777)
	if err := os.WriteFile(filepath.Join(data, "iris.csv"), []byte("5.1,setosa\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(data, "iris.csv"), &st); err != nil {
		t.Fatal(err)
	}
	j := submit(t, in, "command: echo pid $$; touch /etc/tide-escape 2>/dev/null || echo read-only; echo interfaces $(tail -n +3 /proc/net/dev | wc -l); "+
		"stat -c 'inode %i' ${{inputs.d}}/iris.csv; echo x >> ${{inputs.d}}/iris.csv || echo input-read-only\n"+
		"environment:\n  image: library/python:latest\ninputs:\n  d:\n    type: uri_folder\n    path: file://"+data+"\n", "compute=sandbox-cluster")
	j = waitJob(t, in, j.Name, 60*time.Second)
	text := logText(t, in, j.Name)
	if j.Status != api.JobCompleted {
		t.Fatalf("%s (%s); log:\n%s", j.Status, j.Error, text)
	}
	for _, w := range []string{"pid 2", "read-only", "interfaces 1", fmt.Sprintf("inode %d\n", st.Ino), "Read-only file system", "input-read-only", `environment.image "library/python:latest" is not used: this node's runtime is "sandbox"`} {
		if !strings.Contains(text, w) {
			t.Errorf("log lacks %q:\n%s", w, text)
		}
	}
}

// TestCancelDuringImageBuild: a job canceled while its image builds ends
// Canceled at once; the build does not run to its end.
func TestCancelDuringImageBuild(t *testing.T) {
	engine := dockertest.Engine(t)
	image := dockertest.Busybox(t, engine)
	in := newDockerServer(t)
	createCompute(t, in, dockerCluster)
	buildDir := t.TempDir()
	df := "FROM " + image + "\nRUN echo slow " + time.Now().Format("150405.000000000") + " && sleep 120\n"
	if err := os.WriteFile(filepath.Join(buildDir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	j := submit(t, in, "command: echo never\nenvironment:\n  build:\n    path: "+buildDir+"\n", "compute=dock-cluster")
	waitFor(t, "the build to start", 60*time.Second, func() bool {
		lines, err := in.client.Logs(context.Background(), "default", j.Name, 0)
		for _, l := range lines {
			if strings.Contains(l.Text, "Running in") {
				return err == nil
			}
		}
		return false
	})
	start := time.Now()
	if _, err := in.client.CancelJob(context.Background(), "default", j.Name); err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, in, j.Name, 20*time.Second)
	if j.Status != api.JobCanceled {
		t.Fatalf("job %s (%s); want Canceled; log:\n%s", j.Status, j.Error, logText(t, in, j.Name))
	}
	t.Logf("canceled %s after the cancel request", time.Since(start).Round(time.Millisecond))
}
