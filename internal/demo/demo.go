// Package demo is `tide demo`: tide's main job in one command. It starts a
// server with the embedded SQLite store and the local provider in a
// throw-away folder, creates an Azure-ML-style cluster that scales from 0 to
// 2 nodes, submits example jobs, streams their logs, shows the cluster
// growing and shrinking back to 0, prints a summary and stops everything it
// started. When the host has Debian's python3-sklearn and python3-torch it
// also runs two of the examples under examples/: the scikit-learn
// classifier and the 2-node PyTorch DDP job.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/server"
)

// Options tune the demo.
type Options struct {
	// Out receives the demo's narration; Log the server's log.
	Out io.Writer
	Log *slog.Logger
	// IdleSeconds is the cluster's idle_time_before_scale_down.
	IdleSeconds int
	// KeepDir keeps the throw-away folder for inspection.
	KeepDir bool
}

// Job is one example job of the demo.
type Job struct {
	Name    string
	Command string
	Inputs  map[string]api.JobInput
	Outputs map[string]api.JobOutput
}

// Jobs are the demo's example jobs: Azure ML's hello-world shapes, with an
// input and a named output.
var Jobs = []Job{
	{Name: "hello-world", Command: `echo "hello world from $(hostname), node rank $NODE_RANK"`},
	{Name: "hello-inputs", Command: `echo "${{inputs.greeting}}, the answer is ${{inputs.answer}}"; sleep 1`,
		Inputs: map[string]api.JobInput{"greeting": {Type: api.InputLiteral, Value: "hello tide"}, "answer": {Type: api.InputLiteral, Value: "42"}}},
	{Name: "hello-outputs", Command: `for i in 1 2 3; do echo "step $i"; sleep 1; done; echo "trained" > ${{outputs.model}}/model.txt; ls ${{outputs.model}}`,
		Outputs: map[string]api.JobOutput{"model": {Type: "uri_folder"}}},
}

// Run runs the demo until it is done or ctx ends.
func Run(ctx context.Context, o Options) (err error) {
	if o.IdleSeconds == 0 {
		o.IdleSeconds = 5
	}
	out := o.Out
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	dir, err := os.MkdirTemp("", "tide-demo-")
	if err != nil {
		return err
	}
	if !o.KeepDir {
		defer os.RemoveAll(dir)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cfg := config.Default()
	cfg.DataDir, cfg.Listen, cfg.ClientConfig = dir, ln.Addr().String(), "-"
	cfg.AdvertiseURL = "http://" + ln.Addr().String()
	cfg.HeartbeatInterval, cfg.UnusableAfter = time.Second, 10*time.Second
	cfg.CancelGrace = 3 * time.Second
	if err := cfg.Validate(); err != nil {
		return err
	}
	srvCtx, stopServer := context.WithCancel(context.WithoutCancel(ctx))
	srv, err := server.New(srvCtx, cfg, o.Log)
	if err != nil {
		ln.Close()
		stopServer()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(srvCtx, ln) }()
	defer func() {
		stopServer()
		if serr := <-served; err == nil {
			err = serr
		}
	}()
	say("tide demo: server on %s, data in %s (SQLite store, local provider)", cfg.AdvertiseURL, dir)
	// The demo's server is its own (its token is written nowhere else), so
	// the token to paste into Studio is printed with its URL.
	say("Studio: open %s/ and sign in with this demo's token %s", cfg.AdvertiseURL, srv.AdminToken)

	c, err := api.NewClient(cfg.AdvertiseURL, srv.AdminToken, nil)
	if err != nil {
		return err
	}
	ws := api.DefaultWorkspace
	cluster := &api.Compute{Name: "cpu-cluster", Type: api.ComputeTypeAmlCompute, Size: "Standard_DS3_v2", Tier: api.TierDedicated,
		MinInstances: 0, MaxInstances: 2, IdleTimeBeforeScaleDown: o.IdleSeconds}
	if _, _, err := c.PutCompute(ctx, ws, cluster); err != nil {
		return fmt.Errorf("creating the cluster: %w", err)
	}
	defer cleanup(c, ws, cluster.Name, say)
	say("created compute %s: %s, min_instances 0, max_instances 2, idle_time_before_scale_down %ds", cluster.Name, cluster.Size, o.IdleSeconds)

	if err := startInstance(ctx, c, ws, say); err != nil {
		return err
	}

	watch := newWatcher(c, ws, cluster.Name, say)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watch.run(watchCtx)

	start := time.Now()
	// The ML examples are prepared first so that every job queues at once
	// and the cluster does not scale down between the two groups.
	var ml []*api.Job
	if missing := MLMissing(); missing != "" {
		say("skipping the ML examples: %s", missing)
	} else if ml, err = mlJobs(ctx, c, ws, dir, start.Format("150405")); err != nil {
		return err
	}
	var submitted []*api.Job
	for _, dj := range Jobs {
		j, err := c.CreateJob(ctx, ws, &api.Job{Name: dj.Name + "-" + start.Format("150405"), Type: "command", Command: dj.Command,
			Compute: cluster.Name, Inputs: dj.Inputs, Outputs: dj.Outputs, ExperimentName: "tide-demo"})
		if err != nil {
			return fmt.Errorf("submitting %s: %w", dj.Name, err)
		}
		say("submitted job %s", j.Name)
		submitted = append(submitted, j)
	}
	for _, mj := range ml {
		j, err := c.CreateJob(ctx, ws, mj)
		if err != nil {
			return fmt.Errorf("submitting %s: %w", mj.Name, err)
		}
		say("submitted job %s (examples/%s, %d node(s))", j.Name, mj.DisplayName, j.InstanceCount())
		submitted = append(submitted, j)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, j := range submitted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.StreamLogs(ctx, ws, j.Name, api.StreamOptions{}, func(ev api.LogEvent) error {
				mu.Lock()
				defer mu.Unlock()
				switch ev.Type {
				case api.LogEventLine:
					if j.InstanceCount() > 1 {
						say("  [%s node-%d] %s", j.Name, ev.Line.Node, ev.Line.Text)
					} else {
						say("  [%s] %s", j.Name, ev.Line.Text)
					}
				case api.LogEventStatus:
					say("  [%s] status %s", j.Name, ev.Job.Status)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var jobs []*api.Job
	failed := 0
	for _, j := range submitted {
		cur, err := c.Job(ctx, ws, j.Name)
		if err != nil {
			return err
		}
		jobs = append(jobs, cur)
		if cur.Status != api.JobCompleted {
			failed++
		}
	}
	if arts, err := c.Artifacts(ctx, ws, submitted[2].Name); err == nil {
		for _, a := range arts {
			say("artifact of %s: %s (%d bytes)", submitted[2].Name, a.Path, a.Size)
		}
	}
	say("all jobs ended; waiting for the idle nodes to scale down after %ds...", o.IdleSeconds)
	deadline := time.Now().Add(time.Duration(o.IdleSeconds)*time.Second + 60*time.Second)
	for time.Now().Before(deadline) {
		cp, err := c.Compute(ctx, ws, cluster.Name)
		if err != nil {
			return err
		}
		if cp.CurrentNodeCount == 0 && cp.TargetNodeCount == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	stopWatch()
	watch.wait()
	if err := finishInstance(ctx, c, ws, say); err != nil {
		return err
	}
	summary(out, jobs, watch, time.Since(start))
	if failed > 0 {
		return fmt.Errorf("%d demo job(s) did not complete", failed)
	}
	return nil
}

// cleanup deletes the demo cluster and waits for its nodes to go, so no
// agent outlives the demo.
func cleanup(c *api.Client, ws, name string, say func(string, ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.DeleteCompute(ctx, ws, name); err != nil {
		return
	}
	for ctx.Err() == nil {
		if _, err := c.Compute(ctx, ws, name); api.IsNotFound(err) {
			say("deleted compute %s; stopping the server", name)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// watcher polls the cluster and narrates its scaling, and measures node
// lifetimes for the summary.
type watcher struct {
	c        *api.Client
	ws, name string
	say      func(string, ...any)
	done     chan struct{}
	mu       sync.Mutex
	seen     map[string][2]time.Time
	peak     int
}

func newWatcher(c *api.Client, ws, name string, say func(string, ...any)) *watcher {
	return &watcher{c: c, ws: ws, name: name, say: say, done: make(chan struct{}), seen: map[string][2]time.Time{}}
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.done)
	last := ""
	start := time.Now()
	for {
		cp, err := w.c.Compute(ctx, w.ws, w.name)
		if err == nil {
			n := cp.NodeStateCounts
			line := fmt.Sprintf("%s: %d/%d nodes (%s) preparing %d, idle %d, running %d, leaving %d",
				w.name, cp.CurrentNodeCount, cp.TargetNodeCount, cp.AllocationState, n.Preparing, n.Idle, n.Running, n.Leaving)
			if line != last {
				w.say("[%5.1fs] %s", time.Since(start).Seconds(), line)
				last = line
			}
		}
		if nodes, err := w.c.Nodes(ctx, w.ws, w.name); err == nil {
			now := time.Now()
			w.mu.Lock()
			w.peak = max(w.peak, len(nodes))
			for _, n := range nodes {
				s, ok := w.seen[n.ID]
				if !ok {
					s[0] = now
				}
				s[1] = now
				w.seen[n.ID] = s
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *watcher) wait() { <-w.done }

func summary(out io.Writer, jobs []*api.Job, w *watcher, total time.Duration) {
	fmt.Fprintln(out, "\nsummary")
	var waits []time.Duration
	for _, j := range jobs {
		wait := j.StartTime.Sub(j.CreatedOn)
		if j.StartTime.IsZero() {
			wait = 0
		}
		waits = append(waits, wait)
		fmt.Fprintf(out, "  job %-28s %-10s waited %5.1fs  ran %5.1fs\n", j.Name, j.Status, wait.Seconds(), j.EndTime.Sub(j.StartTime).Seconds())
	}
	slices.Sort(waits)
	var nodeSeconds float64
	for _, s := range w.seen {
		nodeSeconds += s[1].Sub(s[0]).Seconds()
	}
	fmt.Fprintf(out, "  jobs: %d, median wait %.1fs, nodes created: %d, peak nodes: %d, node-seconds used: %.0f, total %.1fs\n",
		len(jobs), waits[len(waits)/2].Seconds(), len(w.seen), w.peak, nodeSeconds, total.Seconds())
	fmt.Fprintln(out, "  the cluster scaled from 0 to", w.peak, "node(s) and back to 0.")
}
