package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/tidetest"
	"github.com/tideml/tide/internal/tidetest/simagent"
)

// steps is how far every job counts, one step per 0.1 s.
const steps = 20

// counterScript counts to steps, saving each step in the checkpoint folder,
// and starts from the saved step: a job that resumes instead of restarting.
// It saves atomically (write, then rename), as checkpointing code must: a
// job stopped in the middle of `echo $n > step` leaves an empty file, and
// tide keeps the checkpoint folder as the job left it.
const counterScript = `n=$(cat $TIDE_CHECKPOINT_DIR/step 2>/dev/null || echo 0)
echo "attempt $TIDE_ATTEMPT starts at step $n"
while [ $n -lt %d ]; do n=$((n+1))
  echo $n > $TIDE_CHECKPOINT_DIR/step.tmp && mv $TIDE_CHECKPOINT_DIR/step.tmp $TIDE_CHECKPOINT_DIR/step
  echo "step $n"; sleep 0.1
done
`

// realJob runs the counter on a real agent under a lock per job: a second
// copy running at once cannot take it and says so in the file concurrent.
const realJob = `name: %[1]s
compute: spot
tide: {retries: {on_node_failure: %[3]d}}
command: flock -n %[2]s/%[1]s.lock sh %[2]s/counter.sh || echo %[1]s >> %[2]s/concurrent
`

// simJob runs on a simulated node, whose agent counts (stormRunner).
const simJob = "name: %s\ncompute: spot-sim\ntide: {retries: {on_node_failure: %d}}\ncommand: echo counted by the simulated agent\n"

// realNodes is how many nodes of a storm run real agents.
const realNodes = 8

// storm is a server with two low-priority computes, spot (8 nodes with
// real agents: `tide agent` on the local provider) and spot-sim (the rest,
// simagent: goroutines speaking the agent protocol for the fake
// provider's nodes), and checkpointing jobs spread over both in
// proportion to their nodes.
type storm struct {
	t             *testing.T
	s             *server
	fleet         *simagent.Fleet
	runner        *stormRunner
	shared        string
	names         []string
	nodes, budget int
	start         time.Time
}

// startStorm starts the server (extra: top-level config lines), the
// computes and the agents, and submits the jobs with a retry budget of
// budget node failures.
func startStorm(t *testing.T, nodes, jobs, budget int, extra string) *storm {
	tokens := filepath.Join(t.TempDir(), "tokens")
	st := &storm{t: t, nodes: nodes, budget: budget, runner: &stormRunner{running: map[string]int{}}}
	st.s = newServer(t, options{extra: extra + "quotas: {dedicated: -1, low_priority: -1}\nlimits: {submit_rate: 100000, submit_burst: 100000, max_queued_jobs: 100000}\n",
		locations: fmt.Sprintf("  - name: sim\n    provider: fake\n    settings: {token_dir: %q}\n", tokens)})
	st.shared = tidetest.SharedDir(t)
	if err := os.WriteFile(filepath.Join(st.shared, "counter.sh"), fmt.Appendf(nil, counterScript, steps), 0o644); err != nil {
		t.Fatal(err)
	}
	st.fleet = simagent.Start(simagent.Options{URL: "http://" + st.s.addr, TokenDir: tokens, Run: st.runner.run, Watch: true})
	t.Cleanup(st.fleet.Stop)
	// The computes get their nodes once every job is queued, so that the
	// storms find every node busy however slowly the jobs go in.
	spot := "type: amlcompute\nsize: Standard_DS1_v2\ntier: low_priority\nidle_time_before_scale_down: 600\n"
	computes := func(n int) []string {
		return []string{fmt.Sprintf("name: spot\nmin_instances: %d\nmax_instances: %d\n", min(n, realNodes), min(n, realNodes)) + spot,
			fmt.Sprintf("name: spot-sim\nlocation: sim\nmin_instances: %d\nmax_instances: %d\n", n-min(n, realNodes), n-min(n, realNodes)) + spot}
	}
	for _, c := range computes(0) {
		st.s.createCompute(c)
	}
	st.start = time.Now()
	st.names = make([]string, jobs)
	for i := range jobs {
		if i*realNodes/nodes != (i+1)*realNodes/nodes {
			st.names[i] = fmt.Sprintf("spot-%04d", i)
			st.s.submit(fmt.Sprintf(realJob, st.names[i], st.shared, budget))
		} else {
			st.names[i] = fmt.Sprintf("sim-%04d", i)
			st.s.submit(fmt.Sprintf(simJob, st.names[i], budget))
		}
	}
	for _, c := range computes(nodes) {
		cp, err := spec.ParseCompute("c.yml", []byte(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.s.client.PutCompute(context.Background(), "default", cp); err != nil {
			t.Fatalf("resizing compute %s: %v", cp.Name, err)
		}
	}
	t.Logf("%d jobs submitted in %s", jobs, time.Since(st.start).Round(time.Millisecond))
	return st
}

// TestPreemptionStorm runs checkpointing jobs on a storm's nodes (40, 8 of
// them real; 200 in the full form) and preempts half of the busy nodes of
// each compute at once, twice, through the API's preempt-node (the path a
// cloud's eviction takes). Every job completes, once; every retry resumes
// from the checkpoint its previous attempt saved (its step counter goes
// on); none is retried more than its budget (on_node_failure 3) or more
// often than its nodes were preempted; no job runs twice at once.
func TestPreemptionStorm(t *testing.T) {
	st := startStorm(t, scale(40, 200), jobCount(200, 1000), 3, "")
	s, ctx := st.s, context.Background()
	preempted := 0
	for round := range 2 {
		// Once half the nodes are busy (a quarter for the second storm,
		// while the first one's retries run), with real ones among them.
		var busy map[string][]api.Node
		waitFor(t, fmt.Sprintf("busy nodes for storm %d", round+1), 120*time.Second, func() bool {
			if err := st.fleet.Err(); err != nil {
				t.Fatal(err)
			}
			busy = map[string][]api.Node{}
			n := 0
			for _, c := range []string{"spot", "spot-sim"} {
				ns, err := s.client.Nodes(ctx, "default", c)
				if err != nil {
					return false
				}
				for _, nd := range ns {
					if nd.State == api.NodeRunning && nd.Job != "" {
						busy[c] = append(busy[c], nd)
						n++
					}
				}
			}
			return n >= st.nodes/2-st.nodes/4*round && len(busy["spot"]) >= 2
		})
		// Let the jobs count a few steps first.
		time.Sleep(time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, ns := range busy {
			for _, n := range ns[:len(ns)/2] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := s.client.PreemptNode(ctx, "default", n.Compute, n.ID)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("preempting %s: %v", n.ID, err)
						return
					}
					preempted++
				}()
			}
		}
		wg.Wait()
		t.Logf("storm %d: %d nodes preempted so far", round+1, preempted)
		// The next storm hits the replacements as well.
		time.Sleep(3 * time.Second)
	}
	r := st.check()
	r.bothKinds(t)
	record(row{scenario: fmt.Sprintf("preemption storm, %d nodes (%d real), x2", st.nodes, realNodes), jobs: len(st.names), preemptions: preempted, lost: r.lost, duplicated: r.dup, took: time.Since(st.start).Round(time.Second).String()})
}

// TestPreemptionRate runs a storm's jobs under the server's
// preemption_rate (evictions per node-hour, at random, busy or idle) at
// 360 per node-hour, a node evicted every 10 s on average, on 16 nodes (8
// real; 40 in the full form). What must hold is what the storm checks;
// the budget is 20 node failures: an attempt of 2-4 s (longer on a
// loaded machine) is preempted in about one in five to three, and a job
// that runs out of a fair budget by chance would fail the test.
func TestPreemptionRate(t *testing.T) {
	st := startStorm(t, scale(16, 40), jobCount(80, 400), 20, "preemption_rate: 360\n")
	r := st.check()
	r.bothKinds(t)
	record(row{scenario: fmt.Sprintf("preemption_rate 360/h, %d nodes (%d real)", st.nodes, realNodes), jobs: len(st.names), preemptions: r.preempted, lost: r.lost, duplicated: r.dup, took: time.Since(st.start).Round(time.Second).String()})
}

// check waits until every job ended and checks it: Completed, with one
// terminal event; retried for node failures within its budget and no
// more often than its nodes were preempted (the NodePreempted events of
// the job); resumed from its checkpoint at each retry; never running
// twice at once.
func (st *storm) check() stormResult {
	t, s, ctx := st.t, st.s, context.Background()
	deadline := time.Now().Add(time.Duration(scale(240, 1800)) * time.Second)
	lost, dup, preempted, retried, realRetried := 0, 0, 0, 0, 0
	for _, n := range st.names {
		j := s.ended(n, deadline)
		switch {
		case j == nil:
			t.Errorf("job %s is stuck", n)
			lost++
			continue
		case j.Status != api.JobCompleted:
			t.Errorf("job %s: %s (%s)", n, j.Status, j.Error)
			lost++
			continue
		}
		var es []api.Event
		retrying(t, "events of "+n, func() (err error) {
			es, err = s.client.JobEvents(ctx, "default", n)
			return err
		})
		terminal, hits := 0, 0
		for _, e := range es {
			switch {
			case api.JobTerminal(e.Kind):
				terminal++
			case e.Kind == "NodePreempted":
				hits++
			}
		}
		if terminal != 1 {
			t.Errorf("job %s ended %d times", n, terminal)
			dup++
		}
		preempted += hits
		if r := j.Retried.NodeFailure; r > st.budget || r > hits {
			t.Errorf("job %s retried %d times after node failures; its budget is %d and its nodes were preempted %d times", n, r, st.budget, hits)
		}
		retried += j.Retried.NodeFailure
		if strings.HasPrefix(n, "spot-") {
			realRetried += j.Retried.NodeFailure
		}
		lines, err := s.client.Logs(ctx, "default", n, 0)
		if err != nil {
			t.Fatal(err)
		}
		if problem := resumed(lines); problem != "" {
			var text strings.Builder
			for _, l := range lines {
				fmt.Fprintf(&text, "attempt %d: %s\n", l.Attempt, l.Text)
			}
			t.Errorf("job %s: %s:\n%s", n, problem, text.String())
			lost++
		}
	}
	// No job ran twice at once: the real ones' lock was free each time,
	// the simulated ones' attempts never overlapped.
	concurrent := effects(t, filepath.Join(st.shared, "concurrent"))
	run := st.runner
	run.mu.Lock()
	for _, n := range run.twice {
		concurrent[n]++
	}
	for _, err := range run.errs {
		t.Errorf("simulated agent: %v", err)
	}
	run.mu.Unlock()
	for n, c := range concurrent {
		t.Errorf("job %s ran beside another copy of itself (%d times)", n, c)
		dup++
	}
	if err := st.fleet.Err(); err != nil {
		t.Error(err)
	}
	t.Logf("%d nodes (%d real), %d jobs, %d preemptions of a job's node, %d retries after node failures (%d on real agents)", st.nodes, realNodes, len(st.names), preempted, retried, realRetried)
	return stormResult{lost: lost, dup: dup, preempted: preempted, retried: retried, realRetried: realRetried}
}

// stormResult is what a storm's check counted: jobs lost and duplicated,
// preemptions that hit a job, retries after node failures (in all and of
// jobs on real agents).
type stormResult struct{ lost, dup, preempted, retried, realRetried int }

// bothKinds fails the test unless jobs on real and on simulated agents
// were both retried: a storm that spared either kind checked nothing there.
func (r stormResult) bothKinds(t *testing.T) {
	if r.realRetried == 0 || r.retried == r.realRetried {
		t.Errorf("%d retries of jobs on real agents, %d in all: both kinds of node must be preempted", r.realRetried, r.retried)
	}
}

// stormRunner is the simulated agents' job: the counter of counterScript,
// with its checkpoint saved through the server's checkpoint routes.
type stormRunner struct {
	mu      sync.Mutex
	running map[string]int // job -> attempts running now
	twice   []string       // jobs found running twice at once
	errs    []error
}

func (r *stormRunner) run(ctx context.Context, a *simagent.Agent, as *api.Assignment, stop <-chan api.Cancel) api.AssignmentStatus {
	r.mu.Lock()
	if r.running[as.Job]++; r.running[as.Job] > 1 {
		r.twice = append(r.twice, as.Job)
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running[as.Job]--
		r.mu.Unlock()
	}()
	step := 0
	if as.Attempt > 1 {
		// As the real agent: a retry starts with the latest checkpoint.
		var b []byte
		r.try(ctx, "downloading the checkpoint of "+as.ID, func() (err error) {
			b, err = a.Checkpoint(ctx, as)
			return err
		})
		step = checkpointStep(b)
	}
	r.try(ctx, "logging "+as.ID, func() error {
		return a.Log(ctx, as, 1, fmt.Sprintf("attempt %d starts at step %d", as.Attempt, step))
	})
	end := func(st api.AssignmentStatus, line string) api.AssignmentStatus {
		r.try(ctx, "uploading the checkpoint of "+as.ID, func() error {
			return a.SaveCheckpoint(ctx, as, checkpointArchive(as.Job, step))
		})
		r.try(ctx, "logging "+as.ID, func() error { return a.Log(ctx, as, 2, line) })
		st.LastNodeSeq = 2
		return st
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for step < steps {
		select {
		case <-ctx.Done():
			return api.AssignmentStatus{}
		case c := <-stop:
			if !c.Preempt {
				return end(api.AssignmentStatus{Status: api.JobCanceled}, fmt.Sprintf("canceled at step %d", step))
			}
			return end(api.AssignmentStatus{Status: api.JobFailed, Preempted: true}, fmt.Sprintf("preempted; saved step %d", step))
		case <-tick.C:
			step++
		}
	}
	return end(api.AssignmentStatus{Status: api.JobCompleted}, fmt.Sprintf("step %d", step))
}

// try retries fn a few times (a keep-alive connection the server closed
// resets once in a while) and records its last error.
func (r *stormRunner) try(ctx context.Context, what string, fn func() error) {
	var err error
	for range 5 {
		if err = fn(); err == nil || ctx.Err() != nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Errorf("%s: %w", what, err))
	r.mu.Unlock()
}

// checkpointStep reads the step of a job's checkpoint archive (0: none).
func checkpointStep(archive []byte) int {
	files, err := simagent.UnpackCheckpoint(archive)
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscan(string(files["step"]), &n)
	return n
}

// checkpointArchive is the checkpoint folder holding step.
func checkpointArchive(job string, step int) []byte {
	return simagent.PackCheckpoint(job, map[string][]byte{"step": fmt.Appendf(nil, "%d\n", step)})
}

// resumed checks a job's log: its last attempt reached the last step, and
// each attempt started where the one before it stopped (the step its
// checkpoint held), not from 0. A real job stopped between saving step n
// and printing it resumes at the step after the last it printed.
func resumed(lines []api.LogLine) string {
	type attempt struct{ start, last int }
	var order []int
	byAttempt := map[int]*attempt{}
	for _, l := range lines {
		a := byAttempt[l.Attempt]
		var n int
		switch {
		case sscan(l.Text, "attempt %d starts at step %d", &n):
			if a == nil {
				a = &attempt{start: n, last: n}
				byAttempt[l.Attempt] = a
				order = append(order, l.Attempt)
			}
		case a == nil:
		case sscan(l.Text, "step %d", &n), sscan(l.Text, "preempted; saved step %d", &n):
			a.last = max(a.last, n)
		}
	}
	if len(order) == 0 {
		return "no attempt started"
	}
	for k := 1; k < len(order); k++ {
		prev, cur := byAttempt[order[k-1]], byAttempt[order[k]]
		if cur.start < prev.last || cur.start > prev.last+1 {
			return fmt.Sprintf("attempt %d started at step %d, but attempt %d had reached step %d", order[k], cur.start, order[k-1], prev.last)
		}
	}
	if last := byAttempt[order[len(order)-1]]; last.last != steps {
		return fmt.Sprintf("its last attempt stopped at step %d, not %d", last.last, steps)
	}
	return ""
}

// sscan reports whether text has the form format; a format with two
// numbers stores the second in n.
func sscan(text, format string, n *int) bool {
	var a, b int
	if strings.Count(format, "%d") == 2 {
		k, err := fmt.Sscanf(text, format, &a, &b)
		*n = b
		return err == nil && k == 2
	}
	k, err := fmt.Sscanf(text, format, &a)
	*n = a
	return err == nil && k == 1
}
