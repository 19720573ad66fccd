package bench

import (
	"time"

	"github.com/tideml/tide/internal/tidetest/simagent"
)

// startSimAgents waits until the server has created n sim nodes, then runs
// an agent for each (simagent). held receives each agent that starts
// holding an assignment (nil: the agents complete each at once).
func (s *tideServer) startSimAgents(n int, held chan<- *simagent.Agent) *simagent.Fleet {
	f := simagent.Start(simagent.Options{URL: s.url, TokenDir: s.tokenDir(), Hold: held})
	if err := f.WaitNodes(n, 5*time.Minute); err != nil {
		f.Stop()
		s.t.Fatal(err)
	}
	return f
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
		f.Stop()
		s.deleteCompute(name)
	}()
	s.waitIdle(name, n, 2*time.Minute)
	r := s.measureBeats(f, window)
	r.Agents = n
	return r
}

// measureBeats measures the server over window while the agents heartbeat.
func (s *tideServer) measureBeats(f *simagent.Fleet, window time.Duration) simResult {
	u0 := s.usage()
	b0 := f.Beats.Load()
	t0 := time.Now()
	select {
	case err := <-f.Errs():
		s.t.Fatal(err)
	case <-time.After(window):
	}
	u1 := s.usage()
	// The window as it ran: on a loaded machine this goroutine wakes late,
	// and the CPU and heartbeats counted are those of the longer window.
	return simResult{Agents: f.Len(), Window: time.Since(t0).Round(10 * time.Millisecond), CPU: u1.CPU - u0.CPU, Heartbeats: f.Beats.Load() - b0, HWMKB: u1.HWMKB}
}
