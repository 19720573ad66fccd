package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tideml/tide/api"
)

// simAgent is a node whose agent is a goroutine: it speaks the real agent
// protocol (register, hold the assignment stream, heartbeat) with the token
// the server gave the node, but runs nothing.
type simAgent struct {
	base, id, token string
	hc              *http.Client
	beats           *atomic.Int64
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
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("node %s: stream: %w", a.id, err)
	}
	go func() {
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
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
		case <-tick.C:
			if err := a.post(ctx, "/v1/agent/heartbeat", api.AgentHeartbeat{NodeID: a.id}, nil); err != nil {
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
	t := s.t
	const name = "sim"
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		s.deleteCompute(name)
	}()
	s.putCompute(name, "sim", n, n)
	nodes := filepath.Join(s.dir, "data", "locations", "sim", "nodes")
	var ids []string
	poll(t, fmt.Sprintf("%d sim node tokens", n), 2*time.Minute, 20*time.Millisecond, func() bool {
		es, _ := os.ReadDir(nodes)
		ids = ids[:0]
		for _, e := range es {
			if _, err := os.Stat(filepath.Join(nodes, e.Name(), "token")); err == nil {
				ids = append(ids, e.Name())
			}
		}
		return len(ids) == n
	})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * n, MaxConnsPerHost: 0}}
	var beats atomic.Int64
	errs := make(chan error, n)
	for _, id := range ids {
		tok, err := os.ReadFile(filepath.Join(nodes, id, "token"))
		if err != nil {
			t.Fatal(err)
		}
		a := &simAgent{base: s.url, id: id, token: string(tok), hc: hc, beats: &beats}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	s.waitIdle(name, n, 2*time.Minute)
	u0 := s.usage()
	b0 := beats.Load()
	select {
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(window):
	}
	u1 := s.usage()
	return simResult{Agents: n, Window: window, CPU: u1.CPU - u0.CPU, Heartbeats: beats.Load() - b0, HWMKB: u1.HWMKB}
}
