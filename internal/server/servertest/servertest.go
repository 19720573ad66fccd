// Package servertest runs a real tide server inside a test, on one
// location, for providers' end-to-end tests: the provider starts real
// agents that register with it and run real jobs.
package servertest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/freeport"
	"github.com/tideml/tide/internal/server"
	"github.com/tideml/tide/internal/spec"
)

// Options say how to start a server.
type Options struct {
	// DataDir is the server's data folder; reuse it to restart a server.
	DataDir string
	// Addr is the HOST:PORT to listen on; agents must reach it.
	// Default 127.0.0.1:0; port 0 is a port from freeport.
	Addr string
	// Token is the admin token; empty on a first start (the server makes
	// one), the first server's on a restart.
	Token string
	// Location is the server's only location (made the default).
	Location config.Location
	// Configure, when set, changes the configuration last.
	Configure func(*config.Server)
}

// Server is one running server.
type Server struct {
	t *testing.T
	// Client is an admin client of the server.
	Client *api.Client
	// Addr is the address it listens on and Token its admin token: pass
	// them to Start to restart it.
	Addr, Token string
	stop        context.CancelFunc
	done        chan error
}

// Start runs a server with fast heartbeats (unusable after 3s) and short
// cancel and preemption grace periods (2s). Stop it
// with Shutdown.
func Start(t *testing.T, o Options) *Server {
	t.Helper()
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if host, port, err := net.SplitHostPort(o.Addr); err == nil && port == "0" {
		// A port nothing else takes while the server is down between a
		// Shutdown and its restart on Addr (see freeport).
		o.Addr = net.JoinHostPort(host, strconv.Itoa(freeport.For(t)))
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = o.DataDir
	cfg.ClientConfig = "-"
	o.Location.Default = true
	if o.Location.Runtime == "" {
		o.Location.Runtime = "process"
	}
	cfg.Locations = []config.Location{o.Location}
	cfg.HeartbeatInterval = 500 * time.Millisecond
	// See internal/server's testConfig: 3 s fenced jobs under load.
	cfg.UnusableAfter = 6 * time.Second
	cfg.CancelGrace = 2 * time.Second
	cfg.PreemptGrace = 2 * time.Second
	cfg.Resync = time.Second
	cfg.Listen = ln.Addr().String()
	// Beyond loopback (the ssh lab's hosts) the server serves TLS with its
	// own CA: the agents and this client pin its fingerprint.
	cfg.AdvertiseURL = cfg.Scheme() + "://" + cfg.Listen
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TIDE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, log)
	if err != nil {
		cancel()
		ln.Close()
		t.Fatal(err)
	}
	s := &Server{t: t, Addr: cfg.Listen, Token: o.Token, stop: cancel, done: make(chan error, 1)}
	if s.Token == "" {
		s.Token = srv.AdminToken
	}
	go func() { s.done <- srv.Serve(ctx, ln) }()
	var hc *http.Client
	if fp := srv.CAFingerprint(); fp != "" {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: api.PinnedTLS(fp)}}
	}
	s.Client, err = api.NewClient(cfg.AdvertiseURL, s.Token, hc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Shutdown stops the server; agents keep running.
func (s *Server) Shutdown() {
	s.stop()
	if err := <-s.done; err != nil {
		s.t.Errorf("server: %v", err)
	}
}

// PutCompute creates the compute described by yml in workspace "default".
func (s *Server) PutCompute(yml string) {
	s.t.Helper()
	c, err := spec.ParseCompute("compute.yml", []byte(yml), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, _, err := s.Client.PutCompute(s.t.Context(), "default", c); err != nil {
		s.t.Fatal(err)
	}
}

// DeleteCompute deletes a compute and waits until it is gone (its nodes
// deleted through the provider).
func (s *Server) DeleteCompute(name string, d time.Duration) {
	s.t.Helper()
	ctx := s.t.Context()
	if err := s.Client.DeleteCompute(ctx, "default", name); err != nil {
		s.t.Fatal(err)
	}
	if !Poll(ctx, d, func() bool {
		_, err := s.Client.Compute(ctx, "default", name)
		return api.IsNotFound(err)
	}) {
		s.t.Errorf("compute %s not deleted after %s", name, d)
	}
}

// Submit creates the job described by yml.
func (s *Server) Submit(yml string) *api.Job {
	s.t.Helper()
	j, err := spec.ParseJob("job.yml", []byte(yml), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	out, err := s.Client.CreateJob(s.t.Context(), "default", j)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// WaitJob polls the job until done holds, failing the test after d.
func (s *Server) WaitJob(name string, d time.Duration, done func(*api.Job) bool) *api.Job {
	s.t.Helper()
	j := &api.Job{}
	if !Poll(s.t.Context(), d, func() bool {
		cur, err := s.Client.Job(s.t.Context(), "default", name)
		if err == nil {
			j = cur
		}
		return err == nil && done(cur)
	}) {
		s.t.Fatalf("job %s: timed out after %s (status %s %s)", name, d, j.Status, j.Error)
	}
	return j
}

// RestartMidJob runs a 3-second job on compute and restarts the server
// (same address, data folder and token) while it runs: the new server
// must find the job's node again and see the job complete. It returns the
// new server; s is shut down.
func (s *Server) RestartMidJob(o Options, compute string) *Server {
	s.t.Helper()
	j := s.Submit("command: for i in 1 2 3 4 5 6; do echo line $i; sleep 0.5; done\ncompute: " + compute + "\n")
	s.WaitJob(j.Name, 30*time.Second, Running)
	s.Shutdown()
	o.Addr, o.Token = s.Addr, s.Token
	next := Start(s.t, o)
	if j = next.WaitJob(j.Name, 60*time.Second, Terminal); j.Status != api.JobCompleted {
		s.t.Fatalf("job across a server restart: %s %s", j.Status, j.Error)
	}
	return next
}

// Terminal reports whether j has ended.
func Terminal(j *api.Job) bool { return api.JobTerminal(j.Status) }

// Running reports whether j runs.
func Running(j *api.Job) bool { return j.Status == api.JobRunning }

// Poll checks cond every 50ms until it holds (true) or d passes (false).
func Poll(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
