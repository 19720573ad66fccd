package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tideml/tide/api"
)

// simAgent is a node whose agent is a goroutine: it speaks the real agent
// protocol (register, hold the assignment stream, heartbeat, report an
// assignment running and, when the benchmark says so, completed) with the
// token the server gave the node, but runs nothing.
type simAgent struct {
	base, id, token string
	hc              *http.Client // requests
	stream          *http.Client // the assignment stream
	beats           *atomic.Int64
	// held receives the agent each time it starts holding an assignment
	// (nil: nobody listens, and the agent completes each at once).
	held chan<- *simAgent

	mu   sync.Mutex
	cur  *api.Assignment // held, reported running
	last string          // the last assignment completed
}

func (a *simAgent) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("node %s: %s: HTTP %d: %s", a.id, path, resp.StatusCode, msg)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// status reports the state of assignment as.
func (a *simAgent) status(ctx context.Context, as *api.Assignment, status string) error {
	st := api.AssignmentStatus{ID: as.ID, NodeRank: as.NodeRank, Status: status, Time: time.Now().UTC()}
	if status == api.JobCompleted {
		st.ExitCode = new(int)
	}
	return a.post(ctx, "/v1/agent/assignments/"+url.PathEscape(as.ID)+"/status", st, nil)
}

// complete reports the held assignment completed; the node is idle then.
func (a *simAgent) complete(ctx context.Context) error {
	a.mu.Lock()
	as := a.cur
	a.cur = nil
	if as != nil {
		a.last = as.ID
	}
	a.mu.Unlock()
	if as == nil {
		return fmt.Errorf("node %s holds no assignment", a.id)
	}
	return a.status(ctx, as, api.JobCompleted)
}

// assigned handles an assign event: one already held or done is ignored
// (the server re-sends what the store holds when a stream catches up).
func (a *simAgent) assigned(ctx context.Context, data string) error {
	var as api.Assignment
	if err := json.Unmarshal([]byte(data), &as); err != nil {
		return fmt.Errorf("node %s: assignment: %w", a.id, err)
	}
	a.mu.Lock()
	dup := a.cur != nil && a.cur.ID == as.ID || a.last == as.ID
	if !dup {
		a.cur = &as
	}
	a.mu.Unlock()
	if dup {
		return nil
	}
	if err := a.status(ctx, &as, api.JobRunning); err != nil {
		return err
	}
	if a.held == nil {
		return a.complete(ctx)
	}
	a.held <- a
	return nil
}

// listen reads the assignment stream until it ends.
func (a *simAgent) listen(ctx context.Context, body io.ReadCloser, errs chan<- error) {
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 4096), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "assign":
			if err := a.assigned(ctx, strings.TrimPrefix(line, "data: ")); err != nil && ctx.Err() == nil {
				errs <- err
				return
			}
		case line == "":
			event = ""
		}
	}
	if ctx.Err() == nil {
		errs <- fmt.Errorf("node %s: the server closed the assignment stream: %v", a.id, sc.Err())
	}
}

// heartbeat is what a real agent reports (see the agent's heartbeatLoop): what it
// runs and used, the node's utilization and its input cache.
func (a *simAgent) heartbeat() api.AgentHeartbeat {
	hb := api.AgentHeartbeat{NodeID: a.id, Utilization: &api.NodeUtilization{CPUPercent: 1.5, MemoryBytes: 40 << 20},
		Cache: &api.NodeCache{LimitBytes: 10 << 30}}
	a.mu.Lock()
	if a.cur != nil {
		hb.Running = []string{a.cur.ID}
		hb.Usage = map[string]api.JobUsage{a.cur.ID: {CPUSeconds: 0.1, MemoryBytes: 1 << 20, PeakMemoryBytes: 1 << 20}}
	}
	a.mu.Unlock()
	return hb
}

// run registers, holds the stream and heartbeats until ctx ends. It
// returns the first error, or nil when ctx ended.
func (a *simAgent) run(ctx context.Context) error {
	var w api.AgentWelcome
	if err := a.post(ctx, "/v1/agent/register", api.AgentHello{NodeID: a.id, Capacity: api.Capacity{VCPUs: 4, MemoryGB: 14}}, &w); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/v1/agent/stream", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := a.stream.Do(req)
	if err != nil {
		return fmt.Errorf("node %s: stream: %w", a.id, err)
	}
	errs := make(chan error, 1)
	go a.listen(ctx, resp.Body, errs)
	every := time.Duration(w.HeartbeatSeconds) * time.Second
	if every <= 0 {
		every = 2 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case <-tick.C:
			if err := a.post(ctx, "/v1/agent/heartbeat", a.heartbeat(), nil); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				// A real agent retries; so does this one, at the next tick.
				// A keep-alive connection the server closed just as a
				// heartbeat was sent on it resets once in a while.
				if failed++; failed == 3 {
					return fmt.Errorf("node %s: 3 heartbeats in a row failed, the last: %w", a.id, err)
				}
				continue
			}
			failed = 0
			a.beats.Add(1)
		}
	}
}

// simFleet is the running agents of every sim node.
type simFleet struct {
	agents []*simAgent
	beats  atomic.Int64
	errs   chan error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// maxAgentConns bounds the connections the agents' requests (not their
// streams) share: each stream holds one connection, and this machine allows
// 20,000 open files per process, so 10,000 agents cannot each keep a
// second one as a real agent would.
const maxAgentConns = 512

// startSimAgents waits until the server has created n sim nodes, then runs
// an agent for each. held is passed to every agent (see simAgent.held).
func (s *tideServer) startSimAgents(n int, held chan<- *simAgent) *simFleet {
	t := s.t
	var ids []string
	poll(t, fmt.Sprintf("%d sim node tokens", n), 5*time.Minute, 50*time.Millisecond, func() bool {
		es, _ := os.ReadDir(s.tokenDir())
		ids = ids[:0]
		for _, e := range es {
			if !strings.HasPrefix(e.Name(), ".") {
				ids = append(ids, e.Name())
			}
		}
		return len(ids) == n
	})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxAgentConns, MaxConnsPerHost: maxAgentConns}}
	stream := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	f := &simFleet{errs: make(chan error, n), cancel: cancel}
	for _, id := range ids {
		tok, err := os.ReadFile(filepath.Join(s.tokenDir(), id))
		if err != nil {
			t.Fatal(err)
		}
		a := &simAgent{base: s.url, id: id, token: string(tok), hc: hc, stream: stream, beats: &f.beats, held: held}
		f.agents = append(f.agents, a)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := a.run(ctx); err != nil {
				f.errs <- err
			}
		}()
	}
	return f
}

// stop ends every agent.
func (f *simFleet) stop() {
	f.cancel()
	f.wg.Wait()
}

// check fails the benchmark with the first agent error, if any.
func (f *simFleet) check(s *tideServer) {
	select {
	case err := <-f.errs:
		s.t.Fatal(err)
	default:
	}
}

// simResult is the control plane's cost with simulated agents.
type simResult struct {
	Agents     int
	Window     time.Duration
	CPU        time.Duration
	Heartbeats int64
	HWMKB      int64
}

// tideSimAgents creates a compute of n nodes in the sim location, runs
// their agents as goroutines, and measures the server over window once
// every node is idle.
func (s *tideServer) tideSimAgents(n int, window time.Duration) simResult {
	const name = "sim"
	s.putCompute(name, "sim", n, n)
	f := s.startSimAgents(n, nil)
	defer func() {
		f.stop()
		s.deleteCompute(name)
	}()
	s.waitIdle(name, n, 2*time.Minute)
	r := s.measureBeats(f, window)
	r.Agents = n
	return r
}

// measureBeats measures the server over window while the agents heartbeat.
func (s *tideServer) measureBeats(f *simFleet, window time.Duration) simResult {
	u0 := s.usage()
	b0 := f.beats.Load()
	select {
	case err := <-f.errs:
		s.t.Fatal(err)
	case <-time.After(window):
	}
	u1 := s.usage()
	return simResult{Agents: len(f.agents), Window: window, CPU: u1.CPU - u0.CPU, Heartbeats: f.beats.Load() - b0, HWMKB: u1.HWMKB}
}
