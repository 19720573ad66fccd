package ssh_test

import (
	"maps"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/server/servertest"
)

// TestDeadHostDoesNotStall cuts one location's host off (its veth down:
// its sshd answers nothing, so every call to it waits out the location's
// timeout) and checks that jobs on the other location keep starting
// promptly meanwhile: the controller's provider calls run outside its
// turn (issue 20, "a slow or dead agent must not stall the turn for
// others").
func TestDeadHostDoesNotStall(t *testing.T) {
	l := requireLab(t)
	const hang = 20 * time.Second // the cut host's timeout
	settings := l.settings(l.shared(), 1, "")
	deleteAll(t, settings)
	hosts := settings["hosts"].([]any)
	one := func(i int) map[string]any {
		s := maps.Clone(settings)
		s["hosts"] = []any{hosts[i]}
		s["timeout"] = hang.String()
		return s
	}
	opts := servertest.Options{
		DataDir:  t.TempDir(),
		Addr:     l.Hosts[0].RootIP + ":0",
		Location: config.Location{Name: "lab0", Provider: "ssh", Settings: one(0)},
		Configure: func(cfg *config.Server) {
			cfg.Locations = append(cfg.Locations, config.Location{Name: "lab1", Provider: "ssh", Runtime: "process", Settings: one(1)})
		},
	}
	srv := servertest.Start(t, opts)
	defer func() { srv.Shutdown() }()
	ctx := t.Context()
	for i := range 2 {
		srv.PutCompute("name: cpu" + string(rune('0'+i)) + "\ntype: amlcompute\nlocation: lab" + string(rune('0'+i)) +
			"\nsize: Standard_DS3_v2\nmin_instances: 1\nmax_instances: 1\nidle_time_before_scale_down: 600\n")
	}
	if !servertest.Poll(ctx, 60*time.Second, func() bool {
		for _, c := range []string{"cpu0", "cpu1"} {
			ns, _ := srv.Client.Nodes(ctx, "default", c)
			if len(ns) != 1 || ns[0].State != api.NodeIdle {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the computes' nodes did not become idle")
	}
	restore := l.cut(t, 1)
	// Jobs on cpu0, one after the other, for longer than the cut host's
	// calls hang: each must start within a few seconds (it takes well
	// under one on an idle node).
	cut := time.Now()
	var worst time.Duration
	for time.Since(cut) < hang+5*time.Second {
		submitted := time.Now()
		j := srv.Submit("command: echo ok\ncompute: cpu0\n")
		j = srv.WaitJob(j.Name, 2*hang, func(j *api.Job) bool { return j.Status == api.JobRunning || servertest.Terminal(j) })
		took := time.Since(submitted)
		worst = max(worst, took)
		srv.WaitJob(j.Name, 30*time.Second, servertest.Terminal)
	}
	t.Logf("worst start while host 1 hung: %s", worst.Round(time.Millisecond))
	if worst > 5*time.Second {
		t.Errorf("a job on the healthy host took %s to start while the other host hung (its timeout %s); want under 5s", worst.Round(time.Millisecond), hang)
	}
	// A server that starts while the host hangs (its sshd frozen: a
	// dial waits out the timeout, where a cut host fails it at once): its
	// reconciliation with lab1 waits out the timeout, its first turn
	// waits 5s at most.
	restore()
	if err := l.Freeze(1, true); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Freeze(1, false) }()
	srv.Shutdown()
	opts.Addr, opts.Token = srv.Addr, srv.Token
	srv = servertest.Start(t, opts)
	submitted := time.Now()
	j := srv.Submit("command: echo ok\ncompute: cpu0\n")
	srv.WaitJob(j.Name, 2*hang, func(j *api.Job) bool { return j.Status != api.JobQueued })
	took := time.Since(submitted)
	t.Logf("after a restart while host 1 hung: a job on cpu0 placed in %s", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("after a restart while host 1 hung, a job on cpu0 took %s to be placed; want under 10s (the first turn waits 5s at most for the reconciliation)", took.Round(time.Millisecond))
	}
	if err := l.Freeze(1, false); err != nil {
		t.Fatal(err)
	}
	srv.WaitJob(j.Name, 60*time.Second, servertest.Terminal)
	srv.DeleteCompute("cpu0", 60*time.Second)
	srv.DeleteCompute("cpu1", 90*time.Second)
}
