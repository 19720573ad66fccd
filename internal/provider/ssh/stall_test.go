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
	for n := 0; time.Since(cut) < hang+5*time.Second; n++ {
		submitted := time.Now()
		j := srv.Submit("command: echo ok\ncompute: cpu0\n")
		j = srv.WaitJob(j.Name, 2*hang, func(j *api.Job) bool { return j.Status == api.JobRunning || servertest.Terminal(j) })
		took := time.Since(submitted)
		worst = max(worst, took)
		t.Logf("job %d, %s after the cut: started in %s (%s)", n, submitted.Sub(cut).Round(time.Millisecond), took.Round(time.Millisecond), j.Status)
		srv.WaitJob(j.Name, 30*time.Second, servertest.Terminal)
	}
	t.Logf("worst start while host 1 hung: %s", worst.Round(time.Millisecond))
	if worst > 5*time.Second {
		t.Errorf("a job on the healthy host took %s to start while the other host hung (its timeout %s); want under 5s", worst.Round(time.Millisecond), hang)
	}
	restore()
	srv.DeleteCompute("cpu0", 60*time.Second)
	srv.DeleteCompute("cpu1", 90*time.Second)
}
