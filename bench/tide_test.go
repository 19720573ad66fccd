package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/freeport"
	"github.com/tideml/tide/internal/spec"
)

// tideServer is a `tide server` process started from tideBin.
type tideServer struct {
	t      testing.TB
	dir    string
	url    string
	cmd    *exec.Cmd
	client *api.Client
	admin  string // the admin's token, for /metrics
	done   chan struct{}
}

const ws = "default"

// startTide starts a server on store ("" for SQLite in its data folder).
// Its locations are local (real agents) and sim, whose fake provider hands
// each node's token to the benchmark (tokenDir), which speaks the agent
// protocol for the node from a goroutine (simagent.Agent). Its admission
// limits let every submission through: the benchmark measures dispatch, not
// the per-workspace submission rate (by default 200/s after a burst of
// 2,000, which held the dispatch section's second and third runs on one
// server to about 300 and 200 jobs/s). extra is appended to the
// configuration: other top-level keys.
func startTide(t testing.TB, store, extra string) *tideServer {
	t.Helper()
	dir := t.TempDir()
	port := freeport.For(t)
	cfg := fmt.Sprintf(`data_dir: %q
listen: 127.0.0.1:%d
store: %q
client_config: %q
quotas: {dedicated: -1, low_priority: -1}
limits: {submit_rate: 1000000, submit_burst: 1000000, max_queued_jobs: 1000000}
locations:
  - name: local
    provider: local
    default: true
    settings: {agent_command: [%q, agent], grace_period: 5s}
  - name: sim
    provider: fake
    settings: {token_dir: %q}
%s`, filepath.Join(dir, "data"), port, store, filepath.Join(dir, "client.yaml"), tideBin, filepath.Join(dir, "tokens"), extra)
	if err := os.WriteFile(filepath.Join(dir, "server.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	s := &tideServer{t: t, dir: dir, url: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	s.cmd = exec.Command(tideBin, "server", "--config", filepath.Join(dir, "server.yaml"), "--log-level", "warn")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting tide server: %v", err)
	}
	go func() {
		_ = s.cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	t.Cleanup(s.stop)
	poll(t, "the tide server's client config", 30*time.Second, 10*time.Millisecond, func() bool {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("tide server exited:\n%s", log)
		default:
		}
		cc, err := api.LoadClientConfig(filepath.Join(dir, "client.yaml"))
		if err != nil || cc.Token == "" {
			return false
		}
		s.admin = cc.Token
		s.client, err = api.NewClient(s.url, cc.Token, nil)
		return err == nil && s.client.Ready(context.Background()) == nil
	})
	return s
}

func (s *tideServer) pid() int { return s.cmd.Process.Pid }

func (s *tideServer) usage() procUsage {
	u, err := readProc(s.pid())
	if err != nil {
		s.t.Fatal(err)
	}
	return u
}

// tokenDir is where the sim location's fake provider writes node tokens.
func (s *tideServer) tokenDir() string { return filepath.Join(s.dir, "tokens") }

// stop deletes every compute, so that no agent outlives the benchmark, and
// stops the server.
func (s *tideServer) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	if s.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cs, _ := s.client.Computes(ctx, ws)
		for _, c := range cs {
			_ = s.client.DeleteCompute(ctx, ws, c.Name)
		}
		for _, c := range cs {
			for ctx.Err() == nil {
				if _, err := s.client.Compute(ctx, ws, c.Name); api.IsNotFound(err) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		cancel()
	}
	s.halt()
}

// halt stops the server and leaves its computes: enough when every node is
// a sim node (no agent process to outlive the benchmark).
func (s *tideServer) halt() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// compute creates a compute and waits until min nodes are idle.
func (s *tideServer) compute(name, location string, min, max int) {
	s.t.Helper()
	s.putCompute(name, location, min, max)
	s.waitIdle(name, min, 2*time.Minute)
}

// putCompute creates a compute.
func (s *tideServer) putCompute(name, location string, min, max int) {
	s.t.Helper()
	y := fmt.Sprintf("name: %s\ntype: amlcompute\nsize: Standard_DS3_v2\nlocation: %s\nmin_instances: %d\nmax_instances: %d\nidle_time_before_scale_down: 600\n", name, location, min, max)
	c, err := spec.ParseCompute(name+".yml", []byte(y), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, _, err := s.client.PutCompute(context.Background(), ws, c); err != nil {
		s.t.Fatalf("creating compute %s: %v", name, err)
	}
}

func (s *tideServer) waitIdle(name string, n int, d time.Duration) {
	s.t.Helper()
	poll(s.t, fmt.Sprintf("%d idle nodes on %s", n, name), d, 20*time.Millisecond, func() bool {
		cp, err := s.client.Compute(context.Background(), ws, name)
		return err == nil && cp.NodeStateCounts.Idle == n && cp.ProvisioningState == api.ProvisioningSucceeded
	})
}

func (s *tideServer) deleteCompute(name string) {
	s.t.Helper()
	ctx := context.Background()
	if err := s.client.DeleteCompute(ctx, ws, name); err != nil {
		s.t.Fatalf("deleting compute %s: %v", name, err)
	}
	poll(s.t, "compute "+name+" deleted", time.Minute, 20*time.Millisecond, func() bool {
		_, err := s.client.Compute(ctx, ws, name)
		return api.IsNotFound(err)
	})
}

// dispatchResult is one dispatch run.
type dispatchResult struct {
	Rate float64       // jobs per second, first submit to last completion
	CPU  time.Duration // control-plane CPU time spent in the run
}

// tideDispatch submits n no-op jobs from Nodes client goroutines and waits
// for all of them. The end is the latest end_time the server recorded, so
// the poll interval does not count.
func (s *tideServer) tideDispatch(compute string, n int) dispatchResult {
	t := s.t
	t.Helper()
	ctx := context.Background()
	u0 := s.usage()
	t0 := time.Now()
	names := make([]string, n)
	var wg sync.WaitGroup
	work := make(chan int, n)
	for i := range n {
		work <- i
	}
	close(work)
	errs := make(chan error, Nodes)
	for range Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				j, err := s.client.CreateJob(ctx, ws, &api.Job{Type: "command", Command: "true", Compute: compute})
				if err != nil {
					errs <- fmt.Errorf("submitting job %d: %w", i, err)
					return
				}
				names[i] = j.Name
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The last job submitted is nearly the last to end: wait for it cheaply,
	// then list once or a few times.
	poll(t, "the last job to end", 10*time.Minute, 10*time.Millisecond, func() bool {
		j, err := s.client.Job(ctx, ws, names[n-1])
		return err == nil && api.JobTerminal(j.Status)
	})
	want := map[string]bool{}
	for _, name := range names {
		want[name] = true
	}
	var end time.Time
	poll(t, fmt.Sprintf("%d jobs to end", n), 10*time.Minute, 50*time.Millisecond, func() bool {
		js, err := s.client.Jobs(ctx, ws, api.JobFilter{Compute: compute})
		if err != nil {
			return false
		}
		done := 0
		end = time.Time{}
		for _, j := range js {
			if !want[j.Name] {
				continue
			}
			if !api.JobTerminal(j.Status) {
				return false
			}
			if j.Status != api.JobCompleted {
				t.Fatalf("job %s: %s: %s", j.Name, j.Status, j.Error)
			}
			done++
			if j.EndTime.After(end) {
				end = j.EndTime
			}
		}
		return done == n
	})
	u1 := s.usage()
	return dispatchResult{Rate: float64(n) / end.Sub(t0).Seconds(), CPU: u1.CPU - u0.CPU}
}

var errFirstLine = errors.New("first line")

// tideLatency submits m jobs one at a time to an idle warm node and returns,
// for each, the time from submit to the first output line at the client.
func (s *tideServer) tideLatency(compute string, m int) []time.Duration {
	t := s.t
	ctx := context.Background()
	var lat []time.Duration
	for range m {
		t0 := time.Now()
		j, err := s.client.CreateJob(ctx, ws, &api.Job{Type: "command", Command: "echo first", Compute: compute})
		if err != nil {
			t.Fatal(err)
		}
		err = s.client.StreamLogs(ctx, ws, j.Name, api.StreamOptions{}, func(ev api.LogEvent) error {
			if ev.Type == api.LogEventLine {
				lat = append(lat, time.Since(t0))
				return errFirstLine
			}
			return nil
		})
		if !errors.Is(err, errFirstLine) {
			t.Fatalf("streaming job %s: %v", j.Name, err)
		}
		// Wait until the node is idle again so every submit finds it warm.
		s.waitIdle(compute, 1, time.Minute)
	}
	return lat
}

// zeroResult is one scale-from-zero run.
type zeroResult struct {
	SubmitToRunning time.Duration // client submit to the job's start_time
	NodeStart       time.Duration // slowest node: agent process start to registration
}

// tideFromZero submits a gang job of g nodes to a new compute with no
// nodes and measures how much of submit-to-running the nodes' own start
// does not explain.
func (s *tideServer) tideFromZero(name string, g int) zeroResult {
	t := s.t
	ctx := context.Background()
	s.compute(name, "local", 0, g)
	t0 := time.Now()
	j, err := s.client.CreateJob(ctx, ws, &api.Job{Type: "command", Command: "echo first", Compute: name,
		Resources: &api.JobResources{InstanceCount: g}})
	if err != nil {
		t.Fatal(err)
	}
	var cur *api.Job
	poll(t, "job "+j.Name+" to start", 2*time.Minute, 5*time.Millisecond, func() bool {
		cur, err = s.client.Job(ctx, ws, j.Name)
		return err == nil && !cur.StartTime.IsZero()
	})
	r := zeroResult{SubmitToRunning: cur.StartTime.Sub(t0)}
	if len(cur.Ranks) != g {
		t.Fatalf("job %s: %d ranks, want %d", j.Name, len(cur.Ranks), g)
	}
	for _, rk := range cur.Ranks {
		// The agent logs "registered" after the server answered, so on a
		// busy machine the job may start before the line is written.
		dir := filepath.Join(s.dir, "data", "locations", "local", "nodes", rk.Node)
		var d time.Duration
		poll(t, "node "+rk.Node+"'s \"registered\" line in "+dir+"/agent.log", 10*time.Second, 20*time.Millisecond, func() bool {
			var err error
			d, err = nodeStart(dir)
			return err == nil
		})
		r.NodeStart = max(r.NodeStart, d)
	}
	s.deleteCompute(name)
	return r
}

// nodeStart reads, from a local node's folder, how long its agent took from
// process start (node.json's created, taken just before the exec) to its
// "registered" log line.
func nodeStart(dir string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if err != nil {
		return 0, fmt.Errorf("node start: %w", err)
	}
	var nf struct {
		Created time.Time `json:"created"`
	}
	if err := json.Unmarshal(b, &nf); err != nil {
		return 0, fmt.Errorf("node start: %s: %w", dir, err)
	}
	f, err := os.Open(filepath.Join(dir, "agent.log"))
	if err != nil {
		return 0, fmt.Errorf("node start: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "msg=registered") {
			continue
		}
		ts, ok := strings.CutPrefix(strings.Fields(line)[0], "time=")
		if !ok {
			break
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return 0, fmt.Errorf("node start: %s: %w", dir, err)
		}
		return at.Sub(nf.Created), nil
	}
	return 0, fmt.Errorf("node start: %s/agent.log has no registered line", dir)
}
