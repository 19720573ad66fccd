package controller

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/service"
)

// preempting handles low-priority evictions. A preempted node's agent gets
// the eviction notice (a cancel marked preempt, with the preemption grace
// period); once the job's attempt ended, or when the agent did not answer
// within the grace period and a margin, the attempt ends as a node failure
// (retried from its checkpoint) and the node is removed.
func (c *Controller) preempting(ctx context.Context, s *snapshot, now time.Time) error {
	c.simulateEvictions(ctx, s, now)
	for i := range s.nodes {
		n := &s.nodes[i]
		if n.State != api.NodePreempted || n.Job == "" {
			continue
		}
		if now.Sub(n.StateSince) < c.cfg.PreemptGrace+c.cfg.UnusableAfter {
			c.pushPreempt(*n, now)
			continue
		}
		ws, name, attempt, err := service.ParseAssignmentID(n.Job)
		if err != nil {
			continue
		}
		reason := fmt.Sprintf("node %s was preempted and its agent did not report within %s", n.ID, c.cfg.PreemptGrace+c.cfg.UnusableAfter)
		if _, err := service.NodeLost(ctx, c.store, ws, name, attempt, reason, now); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) pushPreempt(n api.Node, now time.Time) {
	c.mu.Lock()
	last, sent := c.canceled[n.Job+"@"+n.ID]
	if sent && now.Sub(last) < 10*time.Second {
		c.mu.Unlock()
		return
	}
	c.canceled[n.Job+"@"+n.ID] = now
	c.mu.Unlock()
	// The grace left, so that a repeated notice does not extend it.
	grace := max(c.cfg.PreemptGrace-now.Sub(n.StateSince), time.Second)
	c.hub.Push(n.ID, Message{Kind: "cancel", Data: api.Cancel{ID: n.Job, Preempt: true,
		Reason: "node preempted: " + n.Error, GraceSeconds: int(math.Ceil(grace.Seconds()))}})
}

// simulateEvictions preempts running low-priority nodes at random at the
// configured rate per node-hour: each node independently, with probability
// 1-exp(-rate·Δt) over the time since the last turn.
func (c *Controller) simulateEvictions(ctx context.Context, s *snapshot, now time.Time) {
	last := c.lastEvictionCheck
	c.lastEvictionCheck = now
	if c.cfg.PreemptionRate <= 0 || last.IsZero() {
		return
	}
	dt := now.Sub(last).Hours()
	lowPriority := map[string]bool{}
	for _, cp := range s.computes {
		if cp.Tier == api.TierLowPriority {
			lowPriority[key(cp.Workspace, cp.Name)] = true
		}
	}
	p := 1 - math.Exp(-c.cfg.PreemptionRate*dt)
	for _, n := range s.nodes {
		if n.State != api.NodeRunning && n.State != api.NodeIdle || !lowPriority[key(n.Workspace, n.Compute)] {
			continue
		}
		if c.rand() >= p {
			continue
		}
		reason := fmt.Sprintf("simulated eviction (preemption_rate %g per node-hour)", c.cfg.PreemptionRate)
		if err := service.MarkPreempted(ctx, c.store, n.ID, reason, now); err != nil {
			c.log.Warn("simulating an eviction", "node", n.ID, "err", err)
			continue
		}
		c.log.Info("simulated eviction", "node", n.ID)
	}
}
