package ssh_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/server"
	"github.com/tideml/tide/internal/spec"
)

// server is one running tide server whose only location is the lab.
type tideServer struct {
	t      *testing.T
	client *api.Client
	stop   context.CancelFunc
	done   chan error
}

// startServer runs a server on dataDir listening on addr, an address the
// lab's hosts reach.
func startServer(t *testing.T, dataDir, addr, token string, settings map[string]any) (*tideServer, string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.ClientConfig = "-"
	cfg.Locations = []config.Location{{Name: "lab", Provider: "ssh", Default: true, Runtime: "process", Settings: settings}}
	cfg.HeartbeatInterval = 500 * time.Millisecond
	cfg.UnusableAfter = 3 * time.Second
	cfg.CancelGrace = 2 * time.Second
	cfg.Resync = time.Second
	cfg.Listen = ln.Addr().String()
	cfg.AdvertiseURL = "http://" + cfg.Listen
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
	s := &tideServer{t: t, stop: cancel, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ctx, ln) }()
	s.client, err = api.NewClient(cfg.AdvertiseURL, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, cfg.Listen, token
}

func (s *tideServer) shutdown() {
	s.stop()
	if err := <-s.done; err != nil {
		s.t.Errorf("server: %v", err)
	}
}

func (s *tideServer) submit(t *testing.T, yml string) *api.Job {
	t.Helper()
	j, err := spec.ParseJob("job.yml", []byte(yml), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.client.CreateJob(context.Background(), "default", j)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (s *tideServer) waitJob(t *testing.T, name string, d time.Duration, done func(*api.Job) bool) *api.Job {
	t.Helper()
	var j *api.Job
	if !waitUntil(t.Context(), d, func() bool {
		var err error
		j, err = s.client.Job(context.Background(), "default", name)
		return err == nil && done(j)
	}) {
		t.Fatalf("job %s: timed out after %s (status %s %s)", name, d, j.Status, j.Error)
	}
	return j
}

func terminal(j *api.Job) bool { return api.JobTerminal(j.Status) }

// TestEndToEnd runs jobs through a real server on agents the ssh provider
// starts on the lab's hosts: a 2-node gang, a server restart mid-job, and
// a host cut off mid-job and brought back.
func TestEndToEnd(t *testing.T) {
	l := requireLab(t)
	settings := l.settings(t.TempDir(), 1, "")
	deleteAll(t, settings)
	dataDir := t.TempDir()
	srv, addr, token := startServer(t, dataDir, l.hosts[0].rootIP+":0", "", settings)
	defer func() { srv.shutdown() }()
	ctx := t.Context()

	c, err := spec.ParseCompute("c.yml", []byte("name: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 2\nidle_time_before_scale_down: 600\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := srv.client.PutCompute(ctx, "default", c); err != nil {
		t.Fatal(err)
	}

	// A gang of two needs both capacity-1 hosts.
	j := srv.submit(t, "command: echo rank=$NODE_RANK of $AZUREML_NODE_COUNT on $(hostname -I)\ncompute: cpu-cluster\nresources:\n  instance_count: 2\n")
	j = srv.waitJob(t, j.Name, 90*time.Second, terminal)
	if j.Status != api.JobCompleted || len(j.Ranks) != 2 || j.Ranks[0].Node == j.Ranks[1].Node {
		t.Fatalf("gang job: %s %s ranks %+v", j.Status, j.Error, j.Ranks)
	}
	nodes, err := srv.client.Nodes(ctx, "default", "cpu-cluster")
	if err != nil {
		t.Fatal(err)
	}
	hostOf := map[string]int{}
	for _, n := range nodes {
		for i, h := range l.hosts {
			if strings.Contains(n.ProviderID, "@"+h.ip+":") {
				hostOf[n.ID] = i
			}
		}
	}
	if len(hostOf) != 2 || hostOf[j.Ranks[0].Node] == hostOf[j.Ranks[1].Node] {
		t.Fatalf("gang ranks %+v on nodes %+v; want one per host", j.Ranks, nodes)
	}

	// A server restart mid-job: the agents keep running and the new
	// server finds them through the hosts.
	j = srv.submit(t, "command: for i in 1 2 3 4 5 6; do echo line $i; sleep 0.5; done\ncompute: cpu-cluster\n")
	srv.waitJob(t, j.Name, 30*time.Second, func(j *api.Job) bool { return j.Status == api.JobRunning })
	srv.shutdown()
	srv, _, _ = startServer(t, dataDir, addr, token, settings)
	if j = srv.waitJob(t, j.Name, 60*time.Second, terminal); j.Status != api.JobCompleted {
		t.Fatalf("job across a server restart: %s %s", j.Status, j.Error)
	}

	// Cutting a host off mid-job makes its node unusable and fails the
	// job; once the host is back, the node is deleted there for real.
	j = srv.submit(t, "command: sleep 120\ncompute: cpu-cluster\n")
	j = srv.waitJob(t, j.Name, 30*time.Second, func(j *api.Job) bool { return j.Status == api.JobRunning && len(j.Ranks) == 1 })
	node := j.Ranks[0].Node
	host := hostOf[node]
	if err := l.cut(host, true); err != nil {
		t.Fatal(err)
	}
	cutDone := false
	defer func() {
		if !cutDone {
			_ = l.cut(host, false)
		}
	}()
	j = srv.waitJob(t, j.Name, 30*time.Second, terminal)
	if j.Status != api.JobFailed || !strings.Contains(j.Error, "unusable") {
		t.Errorf("job on a host cut off: %s %q; want failed, node unusable", j.Status, j.Error)
	}
	if err := l.cut(host, false); err != nil {
		t.Fatal(err)
	}
	cutDone = true
	nodeDir := filepath.Join(settings["hosts"].([]any)[host].(map[string]any)["dir"].(string), "nodes", node)
	if !waitUntil(ctx, 60*time.Second, func() bool {
		_, err := os.Stat(nodeDir)
		return os.IsNotExist(err)
	}) {
		t.Errorf("the unusable node's folder %s is still there after the host came back", nodeDir)
	}
	// The host serves jobs again.
	j = srv.submit(t, "command: echo back\ncompute: cpu-cluster\n")
	if j = srv.waitJob(t, j.Name, 60*time.Second, terminal); j.Status != api.JobCompleted {
		t.Errorf("job after the host came back: %s %s", j.Status, j.Error)
	}

	// Deleting the compute stops every agent on the hosts.
	if err := srv.client.DeleteCompute(ctx, "default", "cpu-cluster"); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(ctx, 60*time.Second, func() bool {
		_, err := srv.client.Compute(ctx, "default", "cpu-cluster")
		return api.IsNotFound(err)
	}) {
		t.Error("compute not deleted")
	}
}
