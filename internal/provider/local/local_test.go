package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/provider/local"
	"github.com/tideml/tide/internal/provider/providertest"
)

// TestMain makes the test binary double as the agent: cmd/tide is written
// in parallel, so the provider starts this binary with TIDE_TEST_AGENT=1
// and the agent's real flags, and it runs agent.Run as `tide agent` would.
func TestMain(m *testing.M) { providertest.AgentMain(m, nil) }

func newLocal(t *testing.T, dataDir string) *local.Provider {
	t.Helper()
	p, err := local.New(local.Config{
		AgentCommand: []string{os.Args[0], "agent"},
		DataDir:      dataDir,
		GracePeriod:  5 * time.Second,
		Env:          []string{"TIDE_TEST_AGENT=1"},
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// cleanup deletes every node left in dataDir, so no agent outlives the test.
func cleanup(t *testing.T, dataDir string) {
	t.Cleanup(func() {
		p := newLocal(t, dataDir)
		ctx := context.Background()
		nodes, err := p.List(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		for _, n := range nodes {
			if err := p.Delete(ctx, n.ID); err != nil && !provider.IsNotFound(err) {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) func() provider.Provider {
		dataDir := t.TempDir()
		cleanup(t, dataDir)
		return func() provider.Provider { return newLocal(t, dataDir) }
	})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0] != "Z"
}

// TestAgentLifecycle starts a node against a small server that pushes one
// long job, then deletes the node: the agent registered with its token and
// logical capacity, the token is not on its command line, and Delete leaves
// no process of the node behind (the job included).
func TestAgentLifecycle(t *testing.T) {
	var mu sync.Mutex
	var hellos []api.AgentHello
	var auth []string
	pidFile := filepath.Join(t.TempDir(), "job.pid")
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/agent/register", func(w http.ResponseWriter, r *http.Request) {
		var h api.AgentHello
		_ = json.NewDecoder(r.Body).Decode(&h)
		mu.Lock()
		hellos = append(hellos, h)
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(api.AgentWelcome{HeartbeatSeconds: 1})
	})
	mux.HandleFunc("GET /v1/agent/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		as := api.Assignment{ID: "ws1/sleeper/1", Workspace: "ws1", Job: "sleeper", Attempt: 1, NodeCount: 1,
			Command: "echo $$ > " + pidFile + "; exec sleep 300"}
		b, _ := json.Marshal(as)
		fmt.Fprintf(w, "event: assign\ndata: %s\n\n", b)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {}) // heartbeats, logs, status
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer srv.CloseClientConnections()

	dataDir := t.TempDir()
	cleanup(t, dataDir)
	p := newLocal(t, dataDir)
	req := providertest.Request("node-life")
	req.ServerURL = srv.URL
	req.Size.VCPUs = 64 // more than this machine has: allowed, the capacity is logical
	n, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if n.Capacity.VCPUs != 64 || !strings.HasPrefix(n.Capacity.Note, "logical: host has ") {
		t.Errorf("capacity = %+v", n.Capacity)
	}
	waitFor(t, 10*time.Second, "registration", func() bool { mu.Lock(); defer mu.Unlock(); return len(hellos) > 0 })
	mu.Lock()
	if hellos[0].NodeID != req.ID || hellos[0].Capacity.VCPUs != 64 || auth[0] != "Bearer "+req.Token {
		t.Errorf("hello = %+v, auth %q", hellos[0], auth[0])
	}
	mu.Unlock()
	agentPid, _ := strconv.Atoi(strings.TrimPrefix(n.ProviderID, "pid:"))
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", agentPid))
	if err != nil || strings.Contains(string(cmdline), req.Token) {
		t.Errorf("agent command line %q (%v) must not hold the token", cmdline, err)
	}

	var jobPid int
	waitFor(t, 10*time.Second, "the job to start", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		jobPid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	if err := p.Delete(t.Context(), req.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the agent and its job to be gone", func() bool { return !alive(agentPid) && !alive(jobPid) })
	if _, err := os.Stat(filepath.Join(dataDir, "nodes", req.ID)); !os.IsNotExist(err) {
		t.Errorf("node folder still there: %v", err)
	}
}

// TestExitedAgent: an agent that died is reported exited with a reason,
// and Delete still cleans up.
func TestExitedAgent(t *testing.T) {
	dataDir := t.TempDir()
	cleanup(t, dataDir)
	p := newLocal(t, dataDir)
	n, err := p.Create(t.Context(), providertest.Request("node-x"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimPrefix(n.ProviderID, "pid:"))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the node to show exited", func() bool {
		got, err := p.Get(t.Context(), "node-x")
		return err == nil && got.State == provider.StateExited && strings.Contains(got.Reason, "agent.log")
	})
	if err := p.Delete(t.Context(), "node-x"); err != nil {
		t.Fatal(err)
	}
}

func TestFactory(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string]any
		wantErr  string
	}{
		{name: "defaults", settings: nil},
		{name: "command list", settings: map[string]any{"agent_command": []any{"/bin/tide", "agent"}, "grace_period": "5s"}},
		{name: "bad grace", settings: map[string]any{"grace_period": "soon"}, wantErr: "grace_period: must be a duration"},
		{name: "outage", settings: map[string]any{"capacity_unavailable_for": "5m", "capacity_unavailable_after": "30s"}},
		{name: "outage not a duration", settings: map[string]any{"capacity_unavailable_for": 5}, wantErr: "capacity_unavailable_for: must be a positive duration"},
		{name: "outage with no length", settings: map[string]any{"capacity_unavailable_after": "1m"}, wantErr: "capacity_unavailable_after: needs capacity_unavailable_for"},
		{name: "unknown", settings: map[string]any{"colour": "blue"}, wantErr: "colour: unknown setting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := local.Factory("local", tt.settings, provider.Deps{DataDir: t.TempDir()})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || p.Name() != "local" {
				t.Fatalf("Factory: %v", err)
			}
		})
	}
}

// TestAgentWithoutPidIsFound: a server killed after it started a node's
// agent but before it wrote the agent's pid leaves node.json without one.
// The node's agent runs all the same: Get finds it by its folder and says
// it runs (taking it for dead let the controller run its jobs again beside
// it: the clean-clone CI's TestReplicasFailover ran two jobs twice), and
// Delete stops it.
func TestAgentWithoutPidIsFound(t *testing.T) {
	data := t.TempDir()
	p := newLocal(t, data)
	dir := filepath.Join(data, "nodes", "orphan-1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	nf := `{"id":"orphan-1","workspace":"ws","compute":"c","created":"2026-11-27T09:00:00Z","pid":0}`
	if err := os.WriteFile(filepath.Join(dir, "node.json"), []byte(nf), 0o644); err != nil {
		t.Fatal(err)
	}
	// An agent's stand-in: a session leader with the folder on its command line.
	cmd := exec.Command("/bin/sh", "-c", "sleep 60", "agent", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	n, err := p.Get(context.Background(), "orphan-1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "pid:" + strconv.Itoa(cmd.Process.Pid); n.State != provider.StateRunning || n.ProviderID != want {
		t.Errorf("Get = %s %s (%s); want %s %s", n.State, n.ProviderID, n.Reason, provider.StateRunning, want)
	}
	if err := p.Delete(context.Background(), "orphan-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("Delete left the node's agent running")
	}
}
