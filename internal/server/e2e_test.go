package server_test

// End-to-end tests: a real server (SQLite store, local provider) whose nodes
// are real `tide agent` processes built from cmd/tide, running real jobs.
// With TIDE_TEST_STORE=postgres the same tests run on a real PostgreSQL
// (make test runs them both ways).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/freeport"
	"github.com/tideml/tide/internal/server"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store/pgtest"
	"github.com/tideml/tide/internal/tidetest"
)

var tideBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := tidetest.Build("../../cmd/tide")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tideBin = bin
	code := pgtest.Run(m)
	cleanup()
	os.Exit(code)
}

var stores sync.Map // data dir -> store URL

// testStore returns the store of the test server on dataDir: SQLite in
// dataDir, or with TIDE_TEST_STORE=postgres a database of its own (the
// same one again when a test restarts its server).
func testStore(t testing.TB, dataDir string) string {
	if url, ok := stores.Load(dataDir); ok {
		return url.(string)
	}
	switch os.Getenv("TIDE_TEST_STORE") {
	case "", "sqlite":
		return ""
	case "postgres":
		url, _ := stores.LoadOrStore(dataDir, pgtest.Start(t))
		return url.(string)
	default:
		t.Fatalf("TIDE_TEST_STORE=%q: want sqlite or postgres", os.Getenv("TIDE_TEST_STORE"))
		return ""
	}
}

const examples = "../../../shared/data/azureml-examples/cli"

// instance is one running server.
type instance struct {
	t      testing.TB
	cfg    config.Server
	srv    *server.Server
	client *api.Client
	stop   context.CancelFunc
	done   chan error
}

func testConfig(dataDir string) config.Server {
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.ClientConfig = "-"
	// The tests use sizes bigger than this machine (big GPU sizes on fake
	// devices): the locations accept them with a warning.
	cfg.Locations = []config.Location{
		{Name: "local", Provider: "local", Default: true, Runtime: "process", Oversubscribe: true, Settings: map[string]any{"agent_command": []any{tideBin, "agent"}, "grace_period": "5s"}},
		{Name: "westus", Provider: "local", Runtime: "process", Oversubscribe: true, Settings: map[string]any{"agent_command": []any{tideBin, "agent"}, "grace_period": "5s"}},
	}
	cfg.HeartbeatInterval = 500 * time.Millisecond
	// Short, so that lost nodes are found quickly, but not so short that
	// an agent on a loaded CI machine fences its jobs (at half of it) for a
	// slow answer: 3 s did, under load 20.
	cfg.UnusableAfter = 6 * time.Second
	cfg.CancelGrace = 2 * time.Second
	cfg.PreemptGrace = 3 * time.Second
	cfg.Resync = time.Second
	return cfg
}

// start runs a server on dataDir on the given address ("" is 127.0.0.1:0;
// port 0 is a port from freeport, which nothing else takes while the
// server is down for a restart on it).
func start(t testing.TB, dataDir, addr, token string) *instance {
	t.Helper()
	return startWith(t, dataDir, addr, token, nil)
}

// startWith is start with a change to the test configuration (may be nil).
func startWith(t testing.TB, dataDir, addr, token string, configure func(*config.Server)) *instance {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		addr = net.JoinHostPort(host, strconv.Itoa(freeport.For(t)))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dataDir)
	if configure != nil {
		configure(&cfg)
	}
	cfg.Store = testStore(t, cfg.DataDir)
	cfg.Listen = ln.Addr().String()
	// Beyond loopback (a Docker network's gateway) the server serves TLS
	// with its own CA: agents and this client pin it.
	cfg.AdvertiseURL = cfg.Scheme() + "://" + cfg.Listen
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TIDE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if token == "" {
		token = srv.AdminToken
	}
	in := &instance{t: t, cfg: cfg, srv: srv, stop: cancel, done: make(chan error, 1)}
	go func() { in.done <- srv.Serve(ctx, ln) }()
	var hc *http.Client
	if fp := srv.CAFingerprint(); fp != "" {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: api.PinnedTLS(fp)}}
	}
	in.client, err = api.NewClient(cfg.AdvertiseURL, token, hc)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// shutdown stops the server; agents keep running.
func (in *instance) shutdown() {
	in.stop()
	if err := <-in.done; err != nil {
		in.t.Errorf("server: %v", err)
	}
}

// newServer starts a server and, at cleanup, deletes every compute so no
// agent outlives the test.
func newServer(t *testing.T) (*instance, string) {
	dir := t.TempDir()
	in := start(t, dir, "", "")
	t.Cleanup(func() { cleanup(t, in) })
	return in, dir
}

func cleanup(t testing.TB, in *instance) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, _ := in.client.Computes(ctx, "default")
	for _, c := range cs {
		if c.IsAttached() {
			_ = in.client.DetachCompute(ctx, "default", c.Name, true)
			continue
		}
		_ = in.client.DeleteCompute(ctx, "default", c.Name)
	}
	// Serverless jobs' computes go when their jobs end.
	js, _ := in.client.Jobs(ctx, "default", api.JobFilter{})
	for _, j := range js {
		if j.Serverless != nil {
			_, _ = in.client.CancelJob(ctx, "default", j.Name)
			cs = append(cs, api.Compute{Name: j.Compute})
		}
	}
	for _, c := range cs {
		for ctx.Err() == nil {
			if _, err := in.client.Compute(ctx, "default", c.Name); api.IsNotFound(err) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	in.shutdown()
}

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func createCompute(t testing.TB, in *instance, yml string) *api.Compute {
	t.Helper()
	c, err := spec.ParseCompute("test.yml", []byte(yml), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := in.client.PutCompute(context.Background(), "default", c)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "compute provisioned", 10*time.Second, func() bool {
		c, err := in.client.Compute(context.Background(), "default", out.Name)
		return err == nil && c.ProvisioningState == api.ProvisioningSucceeded
	})
	return out
}

func submit(t *testing.T, in *instance, yml string, sets ...string) *api.Job {
	t.Helper()
	j, err := spec.ParseJob("job.yml", []byte(yml), sets)
	if err != nil {
		t.Fatal(err)
	}
	out, err := in.client.CreateJob(context.Background(), "default", j)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func waitJob(t *testing.T, in *instance, name string, d time.Duration) *api.Job {
	t.Helper()
	var j *api.Job
	waitFor(t, "job "+name+" to end", d, func() bool {
		var err error
		j, err = in.client.Job(context.Background(), "default", name)
		return err == nil && api.JobTerminal(j.Status)
	})
	return j
}

func logText(t *testing.T, in *instance, name string) string {
	t.Helper()
	return logTextVia(t, in.client, name)
}

// logTextVia is a job's log through the client c.
func logTextVia(t *testing.T, c *api.Client, name string) string {
	t.Helper()
	var b strings.Builder
	err := c.StreamLogs(context.Background(), "default", name, api.StreamOptions{}, func(ev api.LogEvent) error {
		if ev.Type == api.LogEventLine {
			b.WriteString(ev.Line.Text + "\n")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

const cluster = `name: cpu-cluster
type: amlcompute
size: Standard_DS3_v2
min_instances: 0
max_instances: 2
idle_time_before_scale_down: 2
`

func TestAzureBasicsRunForReal(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, cluster)
	cases := []struct {
		file string
		want []string
	}{
		{"hello-world.yml", []string{"hello world", "environment.image"}},
		{"hello-world-input.yml", []string{"hello world", "42"}},
		{"hello-world-env-var.yml", []string{"hello world"}},
		{"hello-world-output.yml", nil},
		{"hello-world-output-data.yml", nil},
	}
	var jobs []*api.Job
	for _, c := range cases {
		b, err := os.ReadFile(filepath.Join(examples, "jobs/basics", c.file))
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, submit(t, in, string(b)))
	}
	for i, c := range cases {
		j := waitJob(t, in, jobs[i].Name, 60*time.Second)
		if j.Status != api.JobCompleted {
			t.Fatalf("%s: %s (%s) %v", c.file, j.Status, j.Error, j.LogTail)
		}
		text := logText(t, in, j.Name)
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: log lacks %q:\n%s", c.file, w, text)
			}
		}
	}
	arts, err := in.client.Artifacts(context.Background(), "default", jobs[3].Name)
	if err != nil || !hasArtifact(arts, "outputs/helloworld.txt") {
		t.Errorf("hello-world-output.yml artifacts: %v %v", arts, err)
	}
	arts, err = in.client.Artifacts(context.Background(), "default", jobs[4].Name)
	if err != nil || !hasArtifact(arts, "outputs/hello_output/helloworld.txt") {
		t.Errorf("hello-world-output-data.yml artifacts: %v %v", arts, err)
	}
}

func hasArtifact(arts []api.Artifact, path string) bool {
	for _, a := range arts {
		if a.Path == path {
			return true
		}
	}
	return false
}

func TestScaleUpAndDownWithIdleTime(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, cluster)
	a := submit(t, in, "command: sleep 1; echo a\ncompute: cpu-cluster\n")
	b := submit(t, in, "command: sleep 1; echo b\ncompute: cpu-cluster\n")
	peak := 0
	var ended time.Time
	waitFor(t, "both jobs", 60*time.Second, func() bool {
		c, err := in.client.Compute(context.Background(), "default", "cpu-cluster")
		if err == nil {
			peak = max(peak, c.CurrentNodeCount)
			if c.CurrentNodeCount > 2 || c.TargetNodeCount > 2 {
				t.Fatalf("above max_instances: %+v", c)
			}
		}
		ja, _ := in.client.Job(context.Background(), "default", a.Name)
		jb, _ := in.client.Job(context.Background(), "default", b.Name)
		if ja != nil && jb != nil && api.JobTerminal(ja.Status) && api.JobTerminal(jb.Status) {
			ended = ja.EndTime
			if jb.EndTime.After(ended) {
				ended = jb.EndTime
			}
			return true
		}
		return false
	})
	if peak != 2 {
		t.Errorf("peak nodes = %d, want 2", peak)
	}
	var gone time.Time
	waitFor(t, "scale down to 0", 30*time.Second, func() bool {
		c, err := in.client.Compute(context.Background(), "default", "cpu-cluster")
		if err == nil && c.CurrentNodeCount == 0 && c.AllocationState == api.AllocationSteady {
			gone = time.Now()
			return true
		}
		return false
	})
	if idle := gone.Sub(ended); idle < 2*time.Second {
		t.Errorf("nodes left %s after the jobs ended, before idle_time_before_scale_down 2s", idle)
		evs, _ := in.client.ComputeEvents(context.Background(), "default", "cpu-cluster")
		for _, e := range evs {
			t.Logf("event %s %s %s", e.Time.Format("15:04:05.000000"), e.Kind, e.Message)
		}
		t.Logf("ended %s gone %s", ended.Format("15:04:05.000000"), gone.UTC().Format("15:04:05.000000"))
	}
	ev, err := in.client.ComputeEvents(context.Background(), "default", "cpu-cluster")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range ev {
		kinds = append(kinds, e.Kind)
	}
	if !strings.Contains(strings.Join(kinds, ","), "ScaleUp") || !strings.Contains(strings.Join(kinds, ","), "ScaleDown") {
		t.Errorf("events = %v, want ScaleUp and ScaleDown", kinds)
	}
}

func TestGangJobRunsOnTwoNodes(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, cluster)
	j := submit(t, in, "command: echo rank=$NODE_RANK of $AZUREML_NODE_COUNT\ncompute: cpu-cluster\nresources:\n  instance_count: 2\n")
	j = waitJob(t, in, j.Name, 60*time.Second)
	if j.Status != api.JobCompleted || len(j.Ranks) != 2 || j.Ranks[0].Node == j.Ranks[1].Node {
		t.Fatalf("gang job: %s ranks %+v", j.Status, j.Ranks)
	}
	text := logText(t, in, j.Name)
	if !strings.Contains(text, "rank=0 of 2") || !strings.Contains(text, "rank=1 of 2") {
		t.Errorf("log:\n%s", text)
	}
	// A gang larger than max_instances is rejected at submit time.
	big, err := spec.ParseJob("big.yml", []byte("command: 'true'\ncompute: cpu-cluster\nresources:\n  instance_count: 3\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.client.CreateJob(context.Background(), "default", big); err == nil || !strings.Contains(err.Error(), "max_instances") {
		t.Errorf("instance_count 3 on max 2: err = %v", err)
	}
}

func TestCancelTimeoutAndFailure(t *testing.T) {
	in, _ := newServer(t)
	createCompute(t, in, cluster)
	long := submit(t, in, "command: echo started; sleep 60\ncompute: cpu-cluster\n")
	slow := submit(t, in, "command: sleep 60\ncompute: cpu-cluster\nlimits:\n  timeout: 2\n")
	waitFor(t, "long job running", 30*time.Second, func() bool {
		j, err := in.client.Job(context.Background(), "default", long.Name)
		return err == nil && j.Status == api.JobRunning
	})
	if _, err := in.client.CancelJob(context.Background(), "default", long.Name); err != nil {
		t.Fatal(err)
	}
	if j := waitJob(t, in, long.Name, 30*time.Second); j.Status != api.JobCanceled {
		t.Errorf("canceled job: %s", j.Status)
	}
	if j := waitJob(t, in, slow.Name, 30*time.Second); j.Status != api.JobFailed || !strings.Contains(j.Error, "timeout") {
		t.Errorf("timed-out job: %s %q", j.Status, j.Error)
	}
	bad := submit(t, in, "command: echo oops; exit 3\ncompute: cpu-cluster\n")
	j := waitJob(t, in, bad.Name, 30*time.Second)
	if j.Status != api.JobFailed || j.ExitCode == nil || *j.ExitCode != 3 || !strings.Contains(strings.Join(j.LogTail, "\n"), "oops") {
		t.Errorf("failing job: %s exit %v tail %v err %q", j.Status, j.ExitCode, j.LogTail, j.Error)
	}
}

func TestServerRestartMidJob(t *testing.T) {
	dir := t.TempDir()
	in := start(t, dir, "", "")
	token := in.srv.AdminToken
	addr := in.cfg.Listen
	createCompute(t, in, cluster)
	j := submit(t, in, "command: for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.5; done\ncompute: cpu-cluster\n")
	waitFor(t, "job running", 30*time.Second, func() bool {
		cur, err := in.client.Job(context.Background(), "default", j.Name)
		return err == nil && cur.Status == api.JobRunning
	})
	in.shutdown()
	time.Sleep(time.Second) // the job keeps running while no server is up
	in = start(t, dir, addr, token)
	t.Cleanup(func() { cleanup(t, in) })
	j = waitJob(t, in, j.Name, 60*time.Second)
	if j.Status != api.JobCompleted {
		t.Fatalf("job after restart: %s %s", j.Status, j.Error)
	}
	text := logText(t, in, j.Name)
	for i := 1; i <= 8; i++ {
		if !strings.Contains(text, fmt.Sprintf("line %d\n", i)) {
			t.Errorf("log lacks line %d:\n%s", i, text)
		}
	}
}
