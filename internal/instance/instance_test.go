package instance

import (
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

var t0 = time.Date(2026, 3, 9, 17, 0, 0, 0, time.UTC)

func running(extra func(*api.Instance)) *api.Compute {
	c := &api.Compute{Name: "ci", Type: api.ComputeTypeInstance, ProvisioningState: api.ProvisioningSucceeded,
		Instance: &api.Instance{Desired: api.InstanceRunning, State: api.InstanceRunning, Node: "ci.default"}}
	if extra != nil {
		extra(c.Instance)
	}
	return c
}

func idleNode(since time.Time) *api.Node {
	return &api.Node{ID: "ci.default", State: api.NodeIdle, RegisteredOn: since, StateSince: since,
		Activity: &api.NodeActivity{CPUPercent: 0.4}}
}

func TestIdleShutdownNeedsTheWholeIdleTime(t *testing.T) {
	c := running(func(in *api.Instance) { in.IdleTimeBeforeShutdownMinutes = 30 })
	n := idleNode(t0)
	if d := Decide(Input{Compute: c, Node: n, Now: t0.Add(29 * time.Minute)}); d.Action != None || !d.Wake.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("before the idle time: %+v", d)
	}
	d := Decide(Input{Compute: c, Node: n, Now: t0.Add(30 * time.Minute)})
	if d.Action != Stop || d.Desired != api.InstanceStopped || d.Operation.OperationTrigger != api.TriggerIdleShutdown ||
		d.Event != "stopped after 30m idle: no SSH session, no kernel activity, CPU 0.4 %" {
		t.Fatalf("at the idle time: %+v %+v", d, d.Operation)
	}
	// Any activity restarts the count: an SSH session, a connected or busy
	// kernel, CPU use, a job.
	for what, busy := range map[string]func(n *api.Node){
		"ssh":    func(n *api.Node) { n.Activity.SSHSessions = 1 },
		"kernel": func(n *api.Node) { n.Activity.Connections = 1 },
		"busy":   func(n *api.Node) { n.Activity.KernelsBusy = 1 },
		"cpu":    func(n *api.Node) { n.Activity.CPUPercent = 40 },
		"job":    func(n *api.Node) { n.Job = "default/j/1" },
	} {
		n := idleNode(t0)
		busy(n)
		if d := Decide(Input{Compute: c, Node: n, Now: t0.Add(time.Hour)}); d.Action == Stop {
			t.Errorf("%s: stopped while busy", what)
		}
	}
	n = idleNode(t0)
	n.ActiveAt = t0.Add(20 * time.Minute)
	if d := Decide(Input{Compute: c, Node: n, Now: t0.Add(40 * time.Minute)}); d.Action == Stop {
		t.Error("stopped 20 minutes after the last activity")
	}
}

func TestMissedScheduleFiresOnceOnStart(t *testing.T) {
	c := running(func(in *api.Instance) {
		in.Schedules = &api.ComputeSchedules{ComputeStartStop: []api.StartStopSchedule{
			{Action: "stop", Trigger: &api.Trigger{Type: "cron", Expression: "0 18 * * *", TimeZone: "UTC"}},
			{Action: "start", Trigger: &api.Trigger{Type: "cron", Expression: "0 8 * * *", TimeZone: "UTC"}},
		}}
	})
	c.SchedulesCheckedOn = t0 // 17:00; the server was down from here
	n := idleNode(t0)
	d := Decide(Input{Compute: c, Node: n, Now: t0.Add(3 * time.Hour)})
	if d.Action != Stop || d.Operation.OperationTrigger != api.TriggerSchedule || !strings.Contains(d.Operation.Reason, "2026-03-09T18:00:00Z") {
		t.Fatalf("missed stop: %+v %+v", d, d.Operation)
	}
	if !d.SchedulesCheckedOn.Equal(t0.Add(3*time.Hour)) || !d.NextRuns[0].Equal(time.Date(2026, 3, 10, 18, 0, 0, 0, time.UTC)) {
		t.Fatalf("checked %s, next %v", d.SchedulesCheckedOn, d.NextRuns)
	}
	// Down over both firings: the later one (start, at 08:00) wins.
	d = Decide(Input{Compute: c, Node: n, Now: time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)})
	if d.Action == Stop || d.Desired != api.InstanceRunning {
		t.Fatalf("latest firing should win: %+v", d)
	}
	// A first check (never checked) fires nothing from the past.
	c.SchedulesCheckedOn = time.Time{}
	if d := Decide(Input{Compute: c, Node: n, Now: t0.Add(3 * time.Hour)}); d.Action != None || d.SchedulesCheckedOn.IsZero() {
		t.Fatalf("first check: %+v", d)
	}
}

func TestStatesAndSetup(t *testing.T) {
	c := running(func(in *api.Instance) {
		in.SetupScripts = &api.SetupScripts{CreationScript: &api.SetupScript{Command: "true"}}
		in.LastOperation = &api.LastOperation{OperationName: api.OperationCreate, OperationStatus: api.OperationInProgress}
	})
	if d := Decide(Input{Compute: c, Now: t0}); d.Action != Start || d.State != api.InstanceCreating {
		t.Fatalf("no node: %+v", d)
	}
	if d := Decide(Input{Compute: c, Node: &api.Node{State: api.NodePreparing}, Now: t0}); d.State != api.InstanceCreating || d.Action != None {
		t.Fatalf("preparing: %+v", d)
	}
	n := idleNode(t0)
	if d := Decide(Input{Compute: c, Node: n, Now: t0}); d.State != api.InstanceSettingUp {
		t.Fatalf("setting up: %+v", d)
	}
	c.Instance.Setup = []api.SetupRun{{Script: "creation_script", Status: "Failed"}}
	if d := Decide(Input{Compute: c, Node: n, Now: t0}); d.State != api.InstanceSetupFailed {
		t.Fatalf("failed setup: %+v", d)
	}
	c.Instance.Setup = []api.SetupRun{{Script: "creation_script", Status: "Succeeded"}}
	d := Decide(Input{Compute: c, Node: n, Now: t0})
	if d.State != api.InstanceRunning || d.Operation == nil || d.Operation.OperationStatus != api.OperationSucceeded {
		t.Fatalf("running: %+v", d)
	}
	n.Job = "default/j/1"
	if d := Decide(Input{Compute: c, Node: n, Now: t0}); d.State != api.InstanceJobRunning {
		t.Fatalf("job running: %+v", d)
	}
	// Restart: a node older than the request is stopped, then started.
	c.Instance.LastOperation = &api.LastOperation{OperationName: api.OperationRestart, OperationStatus: api.OperationInProgress, OperationTime: t0.Add(time.Minute)}
	n.Job = ""
	if d := Decide(Input{Compute: c, Node: n, Now: t0.Add(time.Minute)}); d.Action != Stop || d.State != api.InstanceRestarting {
		t.Fatalf("restart: %+v", d)
	}
	if d := Decide(Input{Compute: c, Now: t0.Add(2 * time.Minute)}); d.Action != Start || d.State != api.InstanceRestarting {
		t.Fatalf("restart, node gone: %+v", d)
	}
	c.Instance.Desired = api.InstanceStopped
	if d := Decide(Input{Compute: c, Now: t0}); d.State != api.InstanceStopped || d.Action != None {
		t.Fatalf("stopped: %+v", d)
	}
}

func TestClusterSchedulePausesAndResumes(t *testing.T) {
	four, zero := 4, 0
	c := &api.Compute{Name: "cpu", MinInstances: 1, MaxInstances: 4, SchedulesCheckedOn: t0, Tide: &api.ComputeExtensions{Schedules: []api.StartStopSchedule{
		{MaxInstances: &zero, Trigger: &api.Trigger{Type: "cron", Expression: "0 20 * * *", TimeZone: "UTC"}},
		{MaxInstances: &four, Trigger: &api.Trigger{Type: "cron", Expression: "0 8 * * *", TimeZone: "UTC"}},
	}}}
	d := DecideCluster(c, t0.Add(4*time.Hour)) // 21:00
	if !d.Set || d.Max != 0 || d.Min != 0 {
		t.Fatalf("night: %+v", d)
	}
	c.MinInstances, c.MaxInstances, c.SchedulesCheckedOn = 0, 0, d.SchedulesCheckedOn
	d = DecideCluster(c, time.Date(2026, 3, 10, 8, 0, 1, 0, time.UTC))
	if !d.Set || d.Max != 4 || d.Min != 0 {
		t.Fatalf("morning: %+v", d)
	}
	if d := DecideCluster(c, t0.Add(time.Hour)); d.Set || !d.Wake.Equal(t0.Add(3*time.Hour)) {
		t.Fatalf("nothing due: %+v", d)
	}
}
