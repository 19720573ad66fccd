package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// TestPreemptionThenNoCapacity is what spot users fear most: the nodes are
// evicted and the cloud has no capacity to replace them for a while. A
// storm's jobs run on its 8 real nodes alone (40 jobs; 200 in the full
// form): the fake provider keeps its nodes in the server's memory, so a
// restarted server would find the simulated ones gone. Once the nodes are
// busy the server restarts with its local location's capacity unavailable
// (capacity_unavailable_for, from the server's start) and, once the agents
// are back, every busy node is preempted at once. The evicted jobs wait,
// with a pending reason naming the outage, and none resumes before it
// ends; then each resumes from its checkpoint, retried once per eviction
// (waiting for capacity costs no retry), and every job completes, once.
func TestPreemptionThenNoCapacity(t *testing.T) {
	window := time.Duration(scale(8, 60)) * time.Second
	st := startStorm(t, realNodes, jobCount(40, 200), 3, "")
	s, ctx := st.s, context.Background()
	var busy []api.Node
	waitFor(t, "busy real nodes", 120*time.Second, func() bool {
		ns, err := s.client.Nodes(ctx, "default", "spot")
		busy = busy[:0]
		for _, n := range ns {
			if n.State == api.NodeRunning && n.Job != "" {
				busy = append(busy, n)
			}
		}
		return err == nil && len(busy) >= realNodes*3/4
	})

	// The outage runs from the restarted server's start.
	cfg, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	cfg = []byte(strings.Replace(string(cfg), "      grace_period: 5s\n", fmt.Sprintf("      grace_period: 5s\n      capacity_unavailable_for: %s\n", window), 1))
	if err := os.WriteFile(s.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	s.start()
	until := began.Add(window)
	// Once every agent is back in touch (so that the eviction notices
	// reach the jobs at once, not after they ended by themselves), the
	// busy nodes are preempted, all together.
	waitFor(t, "the agents back after the restart", window, func() bool {
		ns, err := s.client.Nodes(ctx, "default", "spot")
		back := 0
		busy = busy[:0]
		for _, n := range ns {
			if n.LastHeartbeat.After(began) {
				back++
			}
			if n.State == api.NodeRunning && n.Job != "" {
				busy = append(busy, n)
			}
		}
		return err == nil && len(ns) == realNodes && back == realNodes && len(busy) >= realNodes/2
	})
	var wg sync.WaitGroup
	evicted := make([]string, len(busy))
	for i, n := range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.client.PreemptNode(ctx, "default", "spot", n.ID)
			if err != nil {
				t.Errorf("preempting %s: %v", n.ID, err)
				return
			}
			if _, job, _, err := service.ParseAssignmentID(got.Job); err == nil {
				evicted[i] = job
			}
		}()
	}
	wg.Wait()
	t.Logf("%d busy real nodes preempted at the start of a %s outage", len(busy), window)

	// An evicted job waits for capacity, and says so.
	var reason string
	waitFor(t, "a pending reason naming the outage", window, func() bool {
		for _, n := range evicted {
			if j, err := s.client.Job(ctx, "default", n); err == nil && j.Status == api.JobQueued {
				reason = j.PendingReason
				if strings.Contains(reason, "capacity unavailable until") {
					return true
				}
			}
		}
		return false
	})
	t.Logf("pending reason of an evicted job: %s", reason)

	r := st.check()
	resumedEarly := 0
	for _, n := range evicted {
		if n == "" {
			continue
		}
		lines, err := s.client.Logs(ctx, "default", n, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if l.Attempt > 1 && strings.Contains(l.Text, "starts at step") && l.Time.Before(until) {
				t.Errorf("job %s: attempt %d started at %s, inside the outage (until %s)", n, l.Attempt, l.Time.Format(time.TimeOnly), until.Format(time.TimeOnly))
				resumedEarly++
			}
		}
	}
	record(row{scenario: fmt.Sprintf("preempted, then no capacity for %s", window), jobs: len(st.names), preemptions: r.preempted, lost: r.lost + resumedEarly, duplicated: r.dup, took: time.Since(st.start).Round(time.Second).String()})
}
