// Package instance decides what happens to compute instances: which state
// each is in, when its node starts and stops (operations, idle shutdown,
// schedules), and what a cluster's schedules set. Decide is pure: the
// controller gives it the instance, its node and the time, and applies
// the answer.
package instance

import (
	"fmt"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/schedule"
	"github.com/tideml/tide/internal/spec"
)

// CPUIdlePercent is the CPU share (percent of one core) below which an
// instance's processes count as idle: a Jupyter server and shells waiting
// for input stay under it.
const CPUIdlePercent = 5.0

// Action is what the controller must do to an instance's node.
type Action int

const (
	// None: leave the node as it is.
	None Action = iota
	// Start: create the node (on its kept disk, if any).
	Start
	// Stop: stop the node, keeping its disk.
	Stop
)

// Decision is what Decide answers.
type Decision struct {
	Action Action
	// State is the instance's state now.
	State string
	// Desired is the instance's desired state after this decision (a
	// schedule or an idle shutdown may change it).
	Desired string
	// Operation, when not nil, replaces the instance's last operation (a
	// new one, or the current one finished).
	Operation *api.LastOperation
	// Event, when set, is recorded on the compute.
	Event string
	// SchedulesCheckedOn is the new time schedules were checked up to.
	SchedulesCheckedOn time.Time
	// NextRuns are the next firings of the schedules, by index.
	NextRuns []time.Time
	// Wake is when Decide should run again (zero: no timer needed).
	Wake time.Time
}

// Input is what Decide decides from.
type Input struct {
	Compute *api.Compute
	// Node is the instance's node record, nil when there is none.
	Node *api.Node
	Now  time.Time
}

// Decide decides an instance's state and what to do to its node.
func Decide(in Input) Decision {
	c, n, now := in.Compute, in.Node, in.Now
	inst := c.Instance
	d := Decision{Desired: inst.Desired, SchedulesCheckedOn: c.SchedulesCheckedOn}
	if d.Desired == "" {
		d.Desired = api.InstanceRunning
	}
	if c.ProvisioningState == api.ProvisioningDeleting {
		d.State = api.InstanceDeleting
		return d
	}
	// Schedules first: a firing changes what is desired. The check time
	// moves only when something fired (or on the first check): a firing
	// after it is found on any later turn, even after a server restart.
	act, at, fired, next := firing(inst, c.SchedulesCheckedOn, now)
	d.NextRuns = next
	if fired || c.SchedulesCheckedOn.IsZero() && inst.Schedules != nil && len(inst.Schedules.ComputeStartStop) > 0 {
		d.SchedulesCheckedOn = now
	}
	want := map[string]string{"start": api.InstanceRunning, "stop": api.InstanceStopped}[act]
	if fired && want != d.Desired {
		d.Desired = want
		op := map[string]string{"start": api.OperationStart, "stop": api.OperationStop}[act]
		d.Operation = &api.LastOperation{OperationName: op, OperationTime: now, OperationStatus: api.OperationInProgress,
			OperationTrigger: api.TriggerSchedule, Reason: fmt.Sprintf("schedule fired at %s", at.Format(time.RFC3339))}
		d.Event = fmt.Sprintf("%s by schedule (fired at %s)", map[string]string{"start": "starting", "stop": "stopping"}[act], at.Format(time.RFC3339))
	}
	for _, t := range d.NextRuns {
		if !t.IsZero() && (d.Wake.IsZero() || t.Before(d.Wake)) {
			d.Wake = t
		}
	}
	op := inst.LastOperation
	if d.Operation != nil {
		op = d.Operation
	}
	restarting := op != nil && op.OperationName == api.OperationRestart && op.OperationStatus == api.OperationInProgress
	if d.Desired == api.InstanceStopped {
		if n == nil {
			d.State = api.InstanceStopped
			d.finish(op, now)
			return d
		}
		d.State, d.Action = api.InstanceStopping, Stop
		return d
	}
	// Desired: running.
	if n == nil {
		d.Action = Start
		switch {
		case restarting:
			d.State = api.InstanceRestarting
		case op == nil || op.OperationName == api.OperationCreate:
			d.State = api.InstanceCreating
		default:
			d.State = api.InstanceStarting
		}
		return d
	}
	if restarting && !n.CreatedOn.After(op.OperationTime) {
		// The node predates the restart: stop it; it starts again once gone.
		d.State, d.Action = api.InstanceRestarting, Stop
		return d
	}
	switch n.State {
	case api.NodePreparing:
		d.State = api.InstanceStarting
		if restarting {
			d.State = api.InstanceRestarting
		} else if op == nil || op.OperationName == api.OperationCreate {
			d.State = api.InstanceCreating
		}
		return d
	case api.NodeLeaving:
		// A stop under way (or cut short by a server restart) finishes
		// first; the instance starts again once its node is gone.
		d.State, d.Action = api.InstanceStopping, Stop
		return d
	case api.NodeUnusable, api.NodePreempted:
		d.State = api.InstanceUnusable
		return d
	}
	switch setup := SetupState(inst); setup {
	case api.InstanceSettingUp, api.InstanceSetupFailed:
		d.State = setup
		return d
	}
	d.State = api.InstanceRunning
	if n.Job != "" {
		d.State = api.InstanceJobRunning
	}
	d.finish(op, now)
	if d.Operation == nil {
		if reason, stop := idle(inst, n, now); stop {
			d.Desired, d.Action, d.State = api.InstanceStopped, Stop, api.InstanceStopping
			d.Operation = &api.LastOperation{OperationName: api.OperationStop, OperationTime: now, OperationStatus: api.OperationInProgress,
				OperationTrigger: api.TriggerIdleShutdown, Reason: reason}
			d.Event = reason
		} else if wake := idleWake(inst, n); !wake.IsZero() && (d.Wake.IsZero() || wake.Before(d.Wake)) {
			d.Wake = wake
		}
	}
	return d
}

// finish marks the operation in progress done (the instance reached
// what it asked for).
func (d *Decision) finish(op *api.LastOperation, now time.Time) {
	if op == nil || op.OperationStatus != api.OperationInProgress {
		return
	}
	done := *op
	done.OperationStatus = api.OperationSucceeded
	d.Operation = &done
}

// SetupState is SettingUp while a setup script of this start has not
// succeeded, SetupFailed once one failed, else "".
func SetupState(inst *api.Instance) string {
	ss := inst.SetupScripts
	if ss == nil {
		return ""
	}
	state := ""
	for _, want := range []struct {
		script string
		set    bool
	}{{"creation_script", ss.CreationScript != nil}, {"startup_script", ss.StartupScript != nil}} {
		if !want.set {
			continue
		}
		run := LastRun(inst, want.script)
		switch {
		case run != nil && run.Status == "Failed":
			return api.InstanceSetupFailed
		case run == nil || run.Status != "Succeeded":
			state = api.InstanceSettingUp
		}
	}
	return state
}

// LastRun is the record of a setup script's last run, or nil.
func LastRun(inst *api.Instance, script string) *api.SetupRun {
	for i := len(inst.Setup) - 1; i >= 0; i-- {
		if inst.Setup[i].Script == script {
			return &inst.Setup[i]
		}
	}
	return nil
}

// Active reports whether an agent's activity report keeps its instance
// busy, and describes the report.
func Active(a *api.NodeActivity, job string) (bool, string) {
	if a == nil {
		return job != "", "no activity reported"
	}
	var busy []string
	if job != "" {
		busy = append(busy, "job "+job)
	}
	if a.SSHSessions > 0 {
		busy = append(busy, fmt.Sprintf("%d SSH session(s)", a.SSHSessions))
	}
	if a.KernelsBusy > 0 {
		busy = append(busy, fmt.Sprintf("%d kernel(s) busy", a.KernelsBusy))
	}
	if a.Connections > 0 {
		busy = append(busy, fmt.Sprintf("%d kernel connection(s)", a.Connections))
	}
	if a.CPUPercent >= CPUIdlePercent {
		busy = append(busy, fmt.Sprintf("CPU %.1f %%", a.CPUPercent))
	}
	if len(busy) > 0 {
		return true, strings.Join(busy, ", ")
	}
	return false, fmt.Sprintf("no SSH session, no kernel activity, CPU %.1f %%", a.CPUPercent)
}

// idleStart is when the instance's current idle stretch began: the last
// activity its agent reported, or when it became usable.
func idleStart(inst *api.Instance, n *api.Node) time.Time {
	t := n.ActiveAt
	for _, u := range []time.Time{n.RegisteredOn, n.StateSince} {
		if u.After(t) {
			t = u
		}
	}
	if op := inst.LastOperation; op != nil && op.OperationTime.After(t) {
		t = op.OperationTime
	}
	return t
}

func idle(inst *api.Instance, n *api.Node, now time.Time) (string, bool) {
	limit := spec.IdleShutdown(inst)
	if limit <= 0 || n.Job != "" || n.State != api.NodeIdle {
		return "", false
	}
	if busy, _ := Active(n.Activity, n.Job); busy {
		return "", false
	}
	since := idleStart(inst, n)
	if since.IsZero() || now.Sub(since) < limit {
		return "", false
	}
	_, what := Active(n.Activity, "")
	return fmt.Sprintf("stopped after %s idle: %s", fmtDuration(now.Sub(since)), what), true
}

func idleWake(inst *api.Instance, n *api.Node) time.Time {
	limit := spec.IdleShutdown(inst)
	if limit <= 0 || n.Job != "" {
		return time.Time{}
	}
	return idleStart(inst, n).Add(limit)
}

// fmtDuration writes 30m, 1h30m or 45s.
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d >= time.Minute {
		d = d.Round(time.Minute)
	}
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// firing returns the action of the latest schedule firing in
// (checked, now] (the one that wins when several fired while the server
// was down), when it fired, and each schedule's next firing after now. A
// first check (checked zero) fires nothing.
func firing(inst *api.Instance, checked, now time.Time) (action string, at time.Time, fired bool, next []time.Time) {
	if inst.Schedules == nil {
		return "", time.Time{}, false, nil
	}
	for _, s := range inst.Schedules.ComputeStartStop {
		tr, f := compile(s)
		if tr == nil {
			next = append(next, time.Time{})
			continue
		}
		next = append(next, tr.Next(now))
		if !f || checked.IsZero() {
			continue
		}
		if last := tr.Last(checked, now); !last.IsZero() && !last.Before(at) {
			action, at, fired = s.Action, last, true
		}
	}
	return action, at, fired, next
}

// compile returns a schedule's trigger and whether it is enabled.
func compile(s api.StartStopSchedule) (*schedule.Trigger, bool) {
	if s.Trigger == nil {
		return nil, false
	}
	tr, err := schedule.Compile(*s.Trigger)
	if err != nil {
		return nil, false
	}
	return tr, s.State != "disabled"
}

// ClusterDecision is what a cluster's schedules set.
type ClusterDecision struct {
	// Set is true when a schedule fired: Min and Max are the new counts.
	Set      bool
	Min, Max int
	At       time.Time
	// SchedulesCheckedOn, NextRuns and Wake are as in Decision.
	SchedulesCheckedOn time.Time
	NextRuns           []time.Time
	Wake               time.Time
}

// DecideCluster applies a cluster's tide.schedules: the latest firing in
// (SchedulesCheckedOn, now] sets min_instances and max_instances.
func DecideCluster(c *api.Compute, now time.Time) ClusterDecision {
	d := ClusterDecision{Min: c.MinInstances, Max: c.MaxInstances, SchedulesCheckedOn: c.SchedulesCheckedOn}
	if c.Tide == nil || len(c.Tide.Schedules) == 0 {
		return d
	}
	if d.SchedulesCheckedOn.IsZero() {
		d.SchedulesCheckedOn = now
	}
	var latest *api.StartStopSchedule
	for i, s := range c.Tide.Schedules {
		tr, enabled := compile(s)
		if tr == nil {
			d.NextRuns = append(d.NextRuns, time.Time{})
			continue
		}
		next := tr.Next(now)
		d.NextRuns = append(d.NextRuns, next)
		if d.Wake.IsZero() || next.Before(d.Wake) {
			d.Wake = next
		}
		if !enabled || c.SchedulesCheckedOn.IsZero() {
			continue
		}
		if last := tr.Last(c.SchedulesCheckedOn, now); !last.IsZero() && !last.Before(d.At) {
			latest, d.At = &c.Tide.Schedules[i], last
		}
	}
	if latest != nil {
		d.Set, d.SchedulesCheckedOn = true, now
		if latest.MinInstances != nil {
			d.Min = *latest.MinInstances
		}
		if latest.MaxInstances != nil {
			d.Max = *latest.MaxInstances
		}
		if d.Min > d.Max {
			// A schedule that lowers max below the standing min lowers
			// min too (pausing a cluster with min 1 pauses it).
			if latest.MaxInstances != nil {
				d.Min = d.Max
			} else {
				d.Max = d.Min
			}
		}
	}
	return d
}
