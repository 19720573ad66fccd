package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/simulate"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/store/postgres"
	"github.com/tideml/tide/internal/store/sqlite"
)

// agreeCluster is the compute both runs use: at most two nodes, idle nodes
// leave after 4 s.
const agreeCluster = `name: agree-cluster
type: amlcompute
size: Standard_DS3_v2
min_instances: 0
max_instances: 2
idle_time_before_scale_down: 4
`

// agreeTrace is the small trace replayed in real time: submit offset and
// run time in seconds. Its gaps sit far from the thresholds (boot ~1-2 s,
// idle 4 s), so both runs take the same decisions: a and b boot two
// nodes; c reuses one of them; the nodes leave; d, e and f boot two new
// nodes and f waits for d or e.
var agreeTrace = []struct {
	name      string
	at, sleep float64
}{
	{"a", 0, 2}, {"b", 0, 2}, {"c", 5.5, 1}, {"d", 20, 2}, {"e", 20, 2}, {"f", 20, 2},
}

// TestSimulatorAgreesWithLiveServer replays agreeTrace on a real server
// with the local provider and in the simulator, and compares nodes created
// and deleted (exactly) and each job's wait (within 1.5 s: the live
// controller's loop and the agents' process start add latency the
// simulator models only as one boot time, measured from the live run).
func TestSimulatorAgreesWithLiveServer(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time replay takes about 40 s")
	}
	in, _ := newServer(t)
	createCompute(t, in, agreeCluster)
	ctx := context.Background()
	start := time.Now()
	names := map[string]string{}
	for _, j := range agreeTrace {
		// Pacing the submits is the trace itself, not a wait for a state.
		time.Sleep(time.Until(start.Add(time.Duration(j.at * float64(time.Second)))))
		out := submit(t, in, fmt.Sprintf("command: sleep %g\ncompute: agree-cluster\n", j.sleep))
		names[j.name] = out.Name
	}
	live := map[string]*api.Job{}
	for k, n := range names {
		live[k] = waitJob(t, in, n, 90*time.Second)
		if live[k].Status != api.JobCompleted {
			t.Fatalf("job %s: %s", k, live[k].Status)
		}
	}
	waitFor(t, "scale down to 0", 60*time.Second, func() bool {
		c, err := in.client.Compute(ctx, "default", "agree-cluster")
		return err == nil && c.CurrentNodeCount == 0
	})
	evs, err := in.client.ComputeEvents(ctx, "default", "agree-cluster")
	if err != nil {
		t.Fatal(err)
	}
	liveUps, liveDowns := 0, 0
	for _, e := range evs {
		switch e.Kind {
		case "ScaleUp":
			var n int
			if _, err := fmt.Sscanf(e.Message, "scaling up by %d node(s)", &n); err != nil {
				t.Fatalf("event %q: %v", e.Message, err)
			}
			liveUps += n
		case "ScaleDown":
			liveDowns++
		}
	}

	// The simulator replays the same jobs as tide exports them, with the
	// boot time the live run had: the first job's wait.
	jobs := make([]api.Job, 0, len(live))
	for _, j := range live {
		jobs = append(jobs, *j)
	}
	var buf bytes.Buffer
	if _, err := simulate.WriteTrace(&buf, jobs, map[string]string{"agree-cluster": "Standard_DS3_v2"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	tr, err := simulate.ReadTrace("live.csv", &buf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := spec.ParseCompute("c.yml", []byte(agreeCluster), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Fit(c, catalog.Default().Lookup); err != nil {
		t.Fatal(err)
	}
	boot := live["a"].StartTime.Sub(live["a"].CreatedOn)
	size, _ := catalog.Default().Lookup(c.Size)
	res, err := simulate.Run(tr, simulate.Config{Compute: *c, Size: size, BootTime: boot})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("live: %d nodes created, %d deleted; simulated (boot %s): %d created, %d deleted", liveUps, liveDowns, boot.Round(time.Millisecond), res.ScaleUps, res.ScaleDowns)
	if liveUps != 4 || res.ScaleUps != liveUps {
		t.Errorf("nodes created: live %d, simulated %d, want 4 both", liveUps, res.ScaleUps)
	}
	// The simulation ends with the last job; the live nodes left after.
	if liveDowns != 4 || res.ScaleDowns != 2 {
		t.Errorf("nodes deleted: live %d (want 4), simulated before the last job ended %d (want 2)", liveDowns, res.ScaleDowns)
	}
	var liveWait float64
	for _, j := range live {
		liveWait += j.StartTime.Sub(j.CreatedOn).Seconds() / float64(len(live))
	}
	t.Logf("mean wait: live %.2fs, simulated %.2fs", liveWait, res.Wait.Mean)
	if math.Abs(liveWait-res.Wait.Mean) > 1.5 {
		t.Errorf("mean wait: live %.2fs, simulated %.2fs; want within 1.5s", liveWait, res.Wait.Mean)
	}
	if w := live["c"].StartTime.Sub(live["c"].CreatedOn); w > 2*time.Second {
		t.Errorf("job c waited %s live; want it to reuse an idle node", w)
	}
}

// TestAdaptivePolicyRunsLive checks the live wiring of the adaptive policy
// and that its history survives a restart: a compute's history, saved in
// the store by an earlier server, shows nodes reused 8 s after turning
// idle, which the compute's 2 s idle time always misses. The server loads
// it, and its idle node stays past 2 s and leaves at the learned timeout.
func TestAdaptivePolicyRunsLive(t *testing.T) {
	dir := t.TempDir()
	h := autoscaler.NewGapHistory()
	h.Reference = 2 * time.Second
	at := time.Now().Add(-2 * time.Hour)
	for range 40 {
		h.NodeIdle(at)
		h.Demand(at.Add(8*time.Second), 1)
		at = at.Add(time.Minute)
	}
	learned, _, ok := h.KeepAlive(time.Now())
	if !ok || learned < 8*time.Second || learned > 20*time.Second {
		t.Fatalf("the history learned %v (%v), want a timeout just over 8 s", learned, ok)
	}
	saved, err := json.Marshal(map[string]any{"history": h, "watermark": at})
	if err != nil {
		t.Fatal(err)
	}
	putSetting(t, dir, "adaptive_gaps/default/adaptive-cluster", string(saved))
	in := start(t, dir, "", "")
	t.Cleanup(func() { cleanup(t, in) })
	createCompute(t, in, "name: adaptive-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmax_instances: 4\nidle_time_before_scale_down: 2\ntide:\n  scale_down_policy: adaptive\n")
	ctx := context.Background()
	j := waitJob(t, in, submit(t, in, "command: sleep 1\ncompute: adaptive-cluster\n").Name, 60*time.Second)
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", j.Name, j.Status)
	}
	// The idle node stays past the 2 s idle time, and leaves at the
	// learned one.
	waitFor(t, "the idle node to leave", 60*time.Second, func() bool {
		c, err := in.client.Compute(ctx, "default", "adaptive-cluster")
		if err != nil {
			return false
		}
		if c.CurrentNodeCount == 0 && time.Since(j.EndTime) < learned-time.Second {
			t.Fatalf("the idle node left %s after the job; the learned timeout is %s", time.Since(j.EndTime), learned)
		}
		return c.CurrentNodeCount == 0
	})
	evs, err := in.client.ComputeEvents(ctx, "default", "adaptive-cluster")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("adaptive idle timeout (learned from idle gaps) %ds", int(learned.Seconds()))
	found := false
	for _, e := range evs {
		found = found || (e.Kind == "ScaleDown" && strings.Contains(e.Message, want))
	}
	if !found {
		for _, e := range evs {
			t.Logf("event %s %s", e.Kind, e.Message)
		}
		t.Errorf("no scale-down says %q", want)
	}
}

// putSetting writes a store setting before the server in dir starts.
func putSetting(t *testing.T, dir, key, value string) {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	var err error
	if url := testStore(t, dir); url != "" {
		st, err = postgres.Open(ctx, url, slog.New(slog.DiscardHandler))
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(dir, "tide.db"), slog.New(slog.DiscardHandler))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.PutSetting(ctx, key, value) }); err != nil {
		t.Fatal(err)
	}
}
