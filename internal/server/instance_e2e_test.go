package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/service"
)

const instanceYAML = `name: ci-e2e
type: computeinstance
size: Standard_DS3_v2
setup_scripts:
  creation_script:
    command: "sleep 1; echo created >> created.txt"
  startup_script:
    command: "echo started >> startups.txt"
`

func instanceState(t *testing.T, in *instance, name string) *api.Compute {
	t.Helper()
	c, err := in.client.Compute(context.Background(), "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitState(t *testing.T, in *instance, name, state string, d time.Duration) *api.Compute {
	t.Helper()
	var c *api.Compute
	waitFor(t, "instance "+name+" "+state, d, func() bool {
		var err error
		c, err = in.client.Compute(context.Background(), "default", name)
		up := state == api.InstanceRunning || state == api.InstanceSettingUp
		if err == nil && up && (c.Instance.State == api.InstanceSetupFailed || c.Instance.State == api.InstanceUnusable) {
			t.Fatalf("instance is %s: %+v", c.Instance.State, c.Instance.Setup)
		}
		return err == nil && c.Instance.State == state
	})
	return c
}

// needJupyter skips when Debian's jupyter-notebook is not installed, except
// in CI, where .ci/run installs it.
func needJupyter(t *testing.T) bool {
	if _, err := exec.LookPath("jupyter-notebook"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("jupyter-notebook is missing; .ci/run installs it")
		}
		t.Log("jupyter-notebook is not installed: skipping the Jupyter steps")
		return false
	}
	return true
}

// The life of a compute instance on local nodes: created with setup
// scripts, Jupyter through the server's proxy, jobs one at a time, an idle
// shutdown with its reason, a start with its files kept, and a cron
// schedule stopping it at a virtual time.
func TestComputeInstanceLifecycle(t *testing.T) {
	dir := t.TempDir()
	in := start(t, dir, "", "")
	addr, token := in.cfg.Listen, in.srv.AdminToken
	defer func() { cleanup(t, in) }()
	ctx := context.Background()

	createCompute(t, in, instanceYAML)
	waitState(t, in, "ci-e2e", api.InstanceSettingUp, 60*time.Second)
	c := waitState(t, in, "ci-e2e", api.InstanceRunning, 60*time.Second)
	nodeDir := filepath.Join(dir, "locations", "local", "nodes", service.InstanceNodeID("default", "ci-e2e"))
	if b, err := os.ReadFile(filepath.Join(nodeDir, "created.txt")); err != nil || string(b) != "created\n" {
		t.Fatalf("creation script output: %q %v", b, err)
	}
	if op := c.Instance.LastOperation; op == nil || op.OperationName != api.OperationCreate || op.OperationStatus != api.OperationSucceeded {
		t.Fatalf("last operation %+v", op)
	}

	t.Log("created: SettingUp, then Running with the creation script's file")
	if needJupyter(t) {
		jupyterRunsOnePlusOne(t, in, c, token)
		t.Log("Jupyter: 1+1 = 2 through the proxy")
	} else {
		c = instanceState(t, in, "ci-e2e")
		if len(c.Instance.Applications) != 1 || c.Instance.Applications[0].Available || !strings.Contains(c.Instance.Applications[0].Reason, "not installed") {
			t.Fatalf("applications without Jupyter: %+v", c.Instance.Applications)
		}
	}

	// Jobs run there one at a time: the second waits, saying why.
	first := submit(t, in, "command: sleep 4\ncompute: azureml:ci-e2e\n")
	waitFor(t, "first job running", 30*time.Second, func() bool {
		j, _ := in.client.Job(ctx, "default", first.Name)
		return j != nil && j.Status == api.JobRunning
	})
	second := submit(t, in, "command: echo second\ncompute: azureml:ci-e2e\n")
	waitFor(t, "second job's reason", 10*time.Second, func() bool {
		j, _ := in.client.Job(ctx, "default", second.Name)
		return j != nil && strings.Contains(j.PendingReason, "runs one job at a time: queued behind job "+first.Name)
	})
	if st := instanceState(t, in, "ci-e2e").Instance.State; st != api.InstanceJobRunning {
		t.Fatalf("state while a job runs: %s", st)
	}
	for _, j := range []string{first.Name, second.Name} {
		if got := waitJob(t, in, j, 60*time.Second); got.Status != api.JobCompleted {
			t.Fatalf("job %s: %s %s", j, got.Status, got.Error)
		}
	}

	t.Log("two jobs ran one after the other")
	// Idle shutdown: nothing runs, no kernel, no SSH session.
	createCompute(t, in, instanceYAML+"idle_time_before_shutdown: PT3S\n")
	c = waitState(t, in, "ci-e2e", api.InstanceStopped, 60*time.Second)
	if op := c.Instance.LastOperation; op.OperationTrigger != api.TriggerIdleShutdown || !strings.Contains(op.Reason, "idle: no SSH session, no kernel activity, CPU") {
		t.Fatalf("idle shutdown recorded as %+v", op)
	}
	if evs, _ := in.client.ComputeEvents(ctx, "default", "ci-e2e"); !hasEvent(evs, "IdleShutdown", "stopped after") {
		t.Fatalf("no idle shutdown event: %+v", evs)
	}
	// A job waits for a stopped instance, saying how to start it.
	waiting := submit(t, in, "command: echo after\ncompute: azureml:ci-e2e\n")
	waitFor(t, "reason on a stopped instance", 10*time.Second, func() bool {
		j, _ := in.client.Job(ctx, "default", waiting.Name)
		return j != nil && strings.Contains(j.PendingReason, "instance ci-e2e is Stopped; start it with tide compute start ci-e2e")
	})
	if _, err := in.client.InstanceOperation(ctx, "default", "ci-e2e", "stop"); err == nil || !strings.Contains(err.Error(), "already Stopped") {
		t.Fatalf("stopping a stopped instance: %v", err)
	}

	t.Logf("stopped when idle: %s", c.Instance.LastOperation.Reason)
	// Start: the files are still there; only the startup script ran again.
	createCompute(t, in, instanceYAML) // no idle shutdown from here on
	if _, err := in.client.InstanceOperation(ctx, "default", "ci-e2e", "start"); err != nil {
		t.Fatal(err)
	}
	waitState(t, in, "ci-e2e", api.InstanceRunning, 60*time.Second)
	if b, _ := os.ReadFile(filepath.Join(nodeDir, "created.txt")); string(b) != "created\n" {
		t.Fatalf("created.txt after start: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(nodeDir, "startups.txt")); string(b) != "started\nstarted\n" {
		t.Fatalf("startups.txt after start: %q", b)
	}
	if j := waitJob(t, in, waiting.Name, 60*time.Second); j.Status != api.JobCompleted {
		t.Fatalf("job queued on the stopped instance: %s", j.Status)
	}

	t.Log("started again with its files")
	// A cron schedule at a virtual time: the server restarts on a clock set
	// ten seconds before 18:00 in Los Angeles (a day ahead of the real one).
	in.shutdown()
	la, _ := time.LoadLocation("America/Los_Angeles")
	tomorrow := time.Now().In(la).AddDate(0, 0, 1)
	virtual := time.Date(tomorrow.Year(), tomorrow.Month(), tomorrow.Day(), 17, 59, 50, 0, la)
	var offset atomic.Int64
	offset.Store(int64(time.Until(virtual)))
	in = startWith(t, dir, addr, token, func(cfg *config.Server) {
		cfg.Clock = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	createCompute(t, in, instanceYAML+`schedules:
  compute_start_stop:
    - action: stop
      trigger: {type: cron, expression: "0 18 * * *", time_zone: Pacific Standard Time}
`)
	c = instanceState(t, in, "ci-e2e")
	next := c.Instance.Schedules.ComputeStartStop[0].NextRun
	waitFor(t, "next firing shown", 10*time.Second, func() bool {
		c = instanceState(t, in, "ci-e2e")
		next = c.Instance.Schedules.ComputeStartStop[0].NextRun
		return !next.IsZero()
	})
	if want := virtual.Add(10 * time.Second); !next.Equal(want) {
		t.Fatalf("next firing %s, want %s", next, want)
	}
	c = waitState(t, in, "ci-e2e", api.InstanceStopped, 60*time.Second)
	if op := c.Instance.LastOperation; op.OperationTrigger != api.TriggerSchedule || op.OperationTime.Before(next) ||
		!strings.Contains(op.Reason, next.In(la).Format(time.RFC3339)) {
		t.Fatalf("schedule stop recorded as %+v", op)
	}
	t.Logf("stopped by its schedule: %s", c.Instance.LastOperation.Reason)
}

func hasEvent(evs []api.Event, kind, text string) bool {
	for _, e := range evs {
		if e.Kind == kind && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}

// jupyterRunsOnePlusOne starts a kernel through the server's proxy
// (Jupyter's REST API), runs 1+1 over its WebSocket channels and checks
// the proxy refuses a caller without credentials.
func jupyterRunsOnePlusOne(t *testing.T, in *instance, c *api.Compute, token string) {
	t.Helper()
	ctx := context.Background()
	var app api.Application
	waitFor(t, "Jupyter listed as available", 60*time.Second, func() bool {
		c = instanceState(t, in, c.Name)
		if len(c.Instance.Applications) == 1 {
			app = c.Instance.Applications[0]
		}
		return app.Available
	})
	base := app.EndpointURI
	if !strings.HasSuffix(base, "/instances/ci-e2e/jupyter/") {
		t.Fatalf("Jupyter URL %q", base)
	}
	resp, err := http.Get(base + "api/kernels")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("proxy without credentials: %d, want 401", resp.StatusCode)
	}
	call := func(method, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		return http.DefaultClient.Do(req)
	}
	var kernel struct{ ID string }
	lastKernelErr := ""
	defer func() {
		if t.Failed() && lastKernelErr != "" {
			t.Logf("last answer to POST api/kernels: %s", lastKernelErr)
		}
	}()
	waitFor(t, "a kernel started through the proxy", 120*time.Second, func() bool {
		resp, err := call("POST", "api/kernels")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if resp.StatusCode != 201 {
			// 503 while Jupyter starts (slow on a loaded machine): keep
			// trying; the last answer is logged if it never comes.
			b, _ := io.ReadAll(resp.Body)
			lastKernelErr = fmt.Sprintf("%d %s", resp.StatusCode, b)
			return false
		}
		return json.NewDecoder(resp.Body).Decode(&kernel) == nil && kernel.ID != ""
	})
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "api/kernels/" + kernel.ID + "/channels"
	cfg, err := websocket.NewConfig(wsURL, strings.TrimSuffix(base, "/"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Header.Set("Authorization", "Bearer "+token)
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("WebSocket through the proxy: %v", err)
	}
	msgID := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	req := map[string]any{
		"header":        map[string]any{"msg_id": msgID, "username": "e2e", "session": "e2e", "msg_type": "execute_request", "version": "5.3"},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "channel": "shell",
		"content": map[string]any{"code": "1+1", "silent": false, "store_history": false, "user_expressions": map[string]any{}, "allow_stdin": false},
	}
	if err := websocket.JSON.Send(ws, req); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetDeadline(time.Now().Add(60 * time.Second))
	busy := false
	for result := ""; result == ""; {
		var msg struct {
			Header struct {
				MsgType string `json:"msg_type"`
			} `json:"header"`
			ParentHeader struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content json.RawMessage `json:"content"`
		}
		if err := websocket.JSON.Receive(ws, &msg); err != nil {
			t.Fatalf("reading the kernel's answer: %v", err)
		}
		if msg.ParentHeader.MsgID != msgID {
			continue
		}
		if msg.Header.MsgType == "status" && strings.Contains(string(msg.Content), "busy") {
			busy = true
		}
		if msg.Header.MsgType == "execute_result" {
			var content struct {
				Data map[string]string `json:"data"`
			}
			_ = json.Unmarshal(msg.Content, &content)
			result = content.Data["text/plain"]
			if result != "2" {
				t.Fatalf("1+1 = %q", result)
			}
		}
	}
	if !busy {
		t.Error("the kernel never reported busy")
	}
	// While connected, the agent reports the connection: the instance is
	// not idle.
	waitFor(t, "the kernel connection reported", 30*time.Second, func() bool {
		a := instanceState(t, in, c.Name).Instance.Activity
		return a != nil && a.Connections > 0 && a.Kernels == 1
	})
	ws.Close()
	resp, err = call("DELETE", "api/kernels/"+kernel.ID)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("deleting the kernel: %v %v", resp, err)
	}
	resp.Body.Close()
}

// A paused cluster (max_instances 0) queues a job with the reason and runs
// it when its schedule raises max_instances, at a virtual 08:00; an
// instance whose creation script fails is SetupFailed with the script's
// log, and a job for it waits saying so.
func TestPausedClusterScheduleAndFailedSetup(t *testing.T) {
	dir := t.TempDir()
	tomorrow := time.Now().UTC().AddDate(0, 0, 1)
	virtual := time.Date(tomorrow.Year(), tomorrow.Month(), tomorrow.Day(), 7, 59, 55, 0, time.UTC)
	offset := time.Until(virtual)
	in := startWith(t, dir, "", "", func(cfg *config.Server) {
		cfg.Clock = func() time.Time { return time.Now().Add(offset) }
	})
	defer func() { cleanup(t, in) }()
	ctx := context.Background()

	createCompute(t, in, `name: paused
type: amlcompute
max_instances: 0
tide:
  schedules:
    - trigger: {type: cron, expression: "0 8 * * *", time_zone: UTC}
      max_instances: 2
`)
	j := submit(t, in, "command: echo ran\ncompute: azureml:paused\n")
	waitFor(t, "the paused reason", 10*time.Second, func() bool {
		got, _ := in.client.Job(ctx, "default", j.Name)
		return got != nil && got.Status == api.JobQueued &&
			strings.Contains(got.PendingReason, "compute paused: max_instances is 0; a schedule raises it at "+virtual.Add(5*time.Second).Format(time.RFC3339))
	})
	if got := waitJob(t, in, j.Name, 90*time.Second); got.Status != api.JobCompleted {
		t.Fatalf("job on the resumed cluster: %s %s", got.Status, got.Error)
	}
	c := instanceState(t, in, "paused")
	if c.MaxInstances != 2 {
		t.Fatalf("max_instances after the schedule: %d", c.MaxInstances)
	}
	if evs, _ := in.client.ComputeEvents(ctx, "default", "paused"); !hasEvent(evs, "Schedule", "set min_instances 0, max_instances 2 (were 0, 0)") {
		t.Fatalf("no schedule event: %+v", evs)
	}

	createCompute(t, in, `name: ci-broken
type: computeinstance
setup_scripts:
  creation_script:
    command: "echo installing; echo no such package >&2; exit 3"
`)
	c = waitState(t, in, "ci-broken", api.InstanceSetupFailed, 60*time.Second)
	run := c.Instance.Setup[len(c.Instance.Setup)-1]
	if run.Script != "creation_script" || run.ExitCode == nil || *run.ExitCode != 3 || !strings.Contains(run.Log, "installing\nno such package") {
		t.Fatalf("failed setup recorded as %+v", run)
	}
	broken := submit(t, in, "command: echo never\ncompute: azureml:ci-broken\n")
	waitFor(t, "the SetupFailed reason", 10*time.Second, func() bool {
		got, _ := in.client.Job(ctx, "default", broken.Name)
		return got != nil && strings.Contains(got.PendingReason, "ci-broken is SetupFailed")
	})
	// Jupyter on an instance that is not running says how to fix it.
	if _, err := in.client.InstanceOperation(ctx, "default", "ci-broken", "stop"); err != nil {
		t.Fatal(err)
	}
	waitState(t, in, "ci-broken", api.InstanceStopped, 60*time.Second)
	req, _ := http.NewRequest("GET", in.cfg.AdvertiseURL+"/v1/workspaces/default/instances/ci-broken/jupyter/api/kernels", nil)
	req.Header.Set("Authorization", "Bearer "+in.srv.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 409 || !strings.Contains(string(b), "instance is Stopped; start it with tide compute start ci-broken") {
		t.Fatalf("Jupyter on a stopped instance: %d %s", resp.StatusCode, b)
	}
	// Deleting the instance removes its kept disk.
	nodeDir := filepath.Join(dir, "locations", "local", "nodes", service.InstanceNodeID("default", "ci-broken"))
	if _, err := os.Stat(filepath.Join(nodeDir, ".tide", "setup", "creation_script.log")); err != nil {
		t.Fatalf("the stopped instance's disk: %v", err)
	}
	if err := in.client.DeleteCompute(ctx, "default", "ci-broken"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the disk removed", 30*time.Second, func() bool {
		_, err := os.Stat(nodeDir)
		return os.IsNotExist(err)
	})
}
