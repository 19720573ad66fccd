package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// counter counts to 20, saving each step in the checkpoint folder, and
// starts from the saved step: a job that resumes instead of restarting.
// It saves atomically (write, then rename), as checkpointing code must: a
// job stopped in the middle of `echo $n > step` leaves an empty file, and
// tide keeps the checkpoint folder as the job left it.
const counter = `name: %s
compute: spot
command: >-
  n=$(cat $TIDE_CHECKPOINT_DIR/step 2>/dev/null || echo 0);
  echo "attempt $TIDE_ATTEMPT starts at step $n";
  while [ $n -lt 20 ]; do n=$((n+1));
  echo $n > $TIDE_CHECKPOINT_DIR/step.tmp && mv $TIDE_CHECKPOINT_DIR/step.tmp $TIDE_CHECKPOINT_DIR/step;
  echo "step $n"; sleep 0.1; done
`

// TestPreemptionStorm runs checkpointing jobs on 8 low-priority nodes and
// preempts half of the busy nodes at once, twice. Every job completes;
// every preempted attempt's retry resumes from the checkpoint its attempt
// saved; none uses more than its retry budget (on_node_failure 3).
func TestPreemptionStorm(t *testing.T) {
	jobs := scale(24, 200)
	s := newServer(t, options{})
	s.createCompute("name: spot\ntype: amlcompute\nsize: Standard_DS1_v2\ntier: low_priority\nmin_instances: 8\nmax_instances: 8\nidle_time_before_scale_down: 600\n")
	ctx := context.Background()
	start := time.Now()
	names := make([]string, jobs)
	for i := range jobs {
		names[i] = fmt.Sprintf("spot-%04d", i)
		s.submit(fmt.Sprintf(counter, names[i]))
	}

	// Two storms: once at least half the nodes are busy (a quarter for
	// the second, while the first one's retries run), preempt half of
	// the busy ones at once.
	preempted := 0
	for storm := range 2 {
		var busy []api.Node
		waitFor(t, fmt.Sprintf("busy nodes for storm %d", storm+1), 120*time.Second, func() bool {
			ns, err := s.client.Nodes(ctx, "default", "spot")
			if err != nil {
				return false
			}
			busy = busy[:0]
			for _, n := range ns {
				if n.State == api.NodeRunning && n.Job != "" {
					busy = append(busy, n)
				}
			}
			return len(busy) >= 4-2*storm
		})
		// Let the jobs save a few steps first.
		time.Sleep(time.Second)
		for _, n := range busy[:len(busy)/2] {
			if _, err := s.client.PreemptNode(ctx, "default", "spot", n.ID); err != nil {
				t.Errorf("preempting %s: %v", n.ID, err)
				continue
			}
			preempted++
		}
		// The next storm hits the replacements as well.
		time.Sleep(3 * time.Second)
	}

	lost, dup := 0, 0
	deadline := time.Now().Add(time.Duration(scale(240, 1800)) * time.Second)
	for _, n := range names {
		j := s.ended(n, deadline)
		if j == nil {
			t.Errorf("job %s is stuck", n)
			lost++
			continue
		}
		if j.Status != api.JobCompleted {
			t.Errorf("job %s: %s (%s)", n, j.Status, j.Error)
			lost++
			continue
		}
		if j.Retried.NodeFailure > 3 {
			t.Errorf("job %s retried %d times after node failures, over its budget of 3", n, j.Retried.NodeFailure)
		}
		lines, err := s.client.Logs(ctx, "default", n, 0)
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		for _, l := range lines {
			text.WriteString(l.Text + "\n")
		}
		log := text.String()
		if !strings.Contains(log, "step 20\n") {
			t.Errorf("job %s never reached step 20:\n%s", n, log)
			lost++
		}
		// A resumed attempt starts where the checkpoint left off: the
		// steps after it are printed once per attempt at most, and a
		// retry never starts over from 0 once a step was saved.
		if j.Attempt > 1 && strings.Contains(log, "step 1\n") && strings.Count(log, "starts at step 0") > 1 {
			t.Errorf("job %s started over instead of resuming:\n%s", n, log)
			dup++
		}
	}
	record(row{scenario: "preemption storm (half the busy nodes, x2)", jobs: jobs, preemptions: preempted, lost: lost, duplicated: dup, took: time.Since(start).Round(time.Second).String()})
}
