package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/tideml/tide/api"
)

// demoInstance is the compute instance the demo runs next to the
// cluster: a creation script, a job, its applications, a stop.
const demoInstance = "demo-instance"

// startInstance creates the demo's compute instance; it comes up while
// the cluster's jobs run.
func startInstance(ctx context.Context, c *api.Client, ws string, say func(string, ...any)) error {
	ci := &api.Compute{Name: demoInstance, Type: api.ComputeTypeInstance, Size: "Standard_DS3_v2", MaxInstances: 1, Tier: api.TierDedicated,
		Instance: &api.Instance{IdleTimeBeforeShutdownMinutes: 30, SetupScripts: &api.SetupScripts{
			CreationScript: &api.SetupScript{Command: "echo 'set up by the creation script' > README.txt"},
		}}}
	if _, _, err := c.PutCompute(ctx, ws, ci); err != nil {
		return fmt.Errorf("creating the compute instance: %w", err)
	}
	say("created compute instance %s (one node; a creation script, idle shutdown after 30m)", demoInstance)
	return nil
}

// finishInstance waits for the instance, runs a job on it, lists its
// applications, stops it and deletes it.
func finishInstance(ctx context.Context, c *api.Client, ws string, say func(string, ...any)) error {
	defer cleanup(c, ws, demoInstance, say)
	cp, err := waitInstance(ctx, c, ws, "", func(s string) bool { return s == api.InstanceRunning }, say)
	if err != nil {
		return err
	}
	say("compute instance %s: %s", demoInstance, cp.Instance.State)
	j, err := c.CreateJob(ctx, ws, &api.Job{Name: "on-instance-" + time.Now().Format("150405"), Type: "command",
		Command: `cat "$TIDE_NODE_DIR/README.txt"`, Compute: demoInstance, ExperimentName: "tide-demo"})
	if err != nil {
		return fmt.Errorf("submitting a job to the instance: %w", err)
	}
	_ = c.StreamLogs(ctx, ws, j.Name, api.StreamOptions{}, func(ev api.LogEvent) error {
		if ev.Type == api.LogEventLine {
			say("  [%s] %s", j.Name, ev.Line.Text)
		}
		return nil
	})
	// Jupyter comes up a little after the instance: give it a few seconds.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if cp, err = c.Compute(ctx, ws, demoInstance); err != nil {
			return err
		}
		pending := func(a api.Application) bool {
			return !a.Available && (a.Reason == "the node's agent has not reported Jupyter yet" || a.Reason == "Jupyter is starting")
		}
		if app := cp.Instance.Applications; len(app) > 0 && !pending(app[0]) || time.Now().After(deadline) {
			break
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
	for _, a := range cp.Instance.Applications {
		if a.Available {
			say("application %s: %s (the server's proxy, with your tide token)", a.DisplayName, a.EndpointURI)
		} else {
			say("application %s: unavailable: %s", a.DisplayName, a.Reason)
		}
	}
	if _, err := c.InstanceOperation(ctx, ws, demoInstance, api.OperationStop); err != nil {
		return err
	}
	if cp, err = waitInstance(ctx, c, ws, api.InstanceRunning, func(s string) bool { return s == api.InstanceStopped }, say); err != nil {
		return err
	}
	say("compute instance %s: %s (its disk is kept; tide compute start %s brings it back)", demoInstance, cp.Instance.State, demoInstance)
	return nil
}

// waitInstance narrates the instance's states after last until done
// says it reached one, which the caller tells.
func waitInstance(ctx context.Context, c *api.Client, ws, last string, done func(string) bool, say func(string, ...any)) (*api.Compute, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		cp, err := c.Compute(ctx, ws, demoInstance)
		if err != nil {
			return nil, err
		}
		st := cp.Instance.State
		if done(st) {
			return cp, nil
		}
		if st != last {
			say("compute instance %s: %s", demoInstance, st)
			last = st
		}
		if st == api.InstanceSetupFailed || st == api.InstanceUnusable {
			return nil, fmt.Errorf("compute instance %s is %s", demoInstance, st)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("compute instance %s is still %s after 2 minutes", demoInstance, last)
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
