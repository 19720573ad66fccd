package controller

import (
	"context"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// keepSamples is how long compute samples are kept.
const keepSamples = 7 * 24 * time.Hour

// jobSamples starts each compute's sample at time at from what a turn
// keeps: its queued and running jobs. addNodes adds its nodes.
func jobSamples(s *snapshot, at time.Time) map[string]api.ComputeSample {
	out := map[string]api.ComputeSample{}
	for _, cp := range s.computes {
		k := key(cp.Workspace, cp.Name)
		out[k] = api.ComputeSample{Time: at, Queued: s.queue.q.Count(k)}
	}
	for _, j := range s.jobs {
		k := key(j.Workspace, j.Compute)
		smp, ok := out[k]
		if !ok {
			continue
		}
		switch j.Status {
		case api.JobRunning, api.JobPreparing, api.JobFinalizing:
			smp.Running++
		}
		out[k] = smp
	}
	return out
}

// addNodes adds to the samples of jobSamples their computes' nodes by
// state.
func addNodes(out map[string]api.ComputeSample, nodes []api.Node) {
	for _, n := range nodes {
		k := key(n.Workspace, n.Compute)
		smp, ok := out[k]
		if !ok {
			continue
		}
		switch n.State {
		case api.NodeIdle:
			smp.Nodes.Idle++
		case api.NodeRunning:
			smp.Nodes.Running++
		case api.NodePreparing:
			smp.Nodes.Preparing++
		case api.NodeUnusable:
			smp.Nodes.Unusable++
		case api.NodeLeaving:
			smp.Nodes.Leaving++
		case api.NodePreempted:
			smp.Nodes.Preempted++
		}
		out[k] = smp
	}
}

// addUtilization adds to the samples what their computes' nodes used at
// their last heartbeat.
func addUtilization(out map[string]api.ComputeSample, use map[[2]string]store.ComputeUtilization) {
	for k, u := range use {
		smp, ok := out[key(k[0], k[1])]
		if !ok {
			continue
		}
		smp.CPUPercent, smp.MemoryBytes, smp.GPUPercent = u.CPUPercent, u.MemoryBytes, u.GPUPercent
		out[key(k[0], k[1])] = smp
	}
}

// sample records every compute's state once per SampleInterval, and
// drops samples older than a week once an hour. The turn takes what it
// keeps (the jobs, the nodes by state); the nodes' utilization needs
// their last heartbeats, which the kept nodes do not carry (see
// nodeFeed), so a goroutine of its own has the store sum them
// (ComputeUtilizations) and writes the samples. At 10,000 nodes reading
// and decoding every node for them took about 150 ms, and held the turn,
// and every placement waiting on it, once a minute; in a goroutine, it
// still cost as much CPU as the heartbeats of a few seconds. A sample
// not written is taken again at the next turn.
func (c *Controller) sample(ctx context.Context, s *snapshot, now time.Time) {
	if c.cfg.SampleInterval <= 0 {
		return // a controller built without the server's defaults
	}
	at := now.Truncate(c.cfg.SampleInterval)
	c.mu.Lock()
	due := at.After(c.lastSample) && !c.sampling
	prune := now.Sub(c.lastPrune) >= time.Hour
	c.sampling = c.sampling || due
	c.mu.Unlock()
	if !due {
		return
	}
	samples := jobSamples(s, at)
	addNodes(samples, s.nodes)
	go func() {
		err := c.writeSamples(ctx, samples, prune, now)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sampling = false
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("recording compute samples", "err", err)
			}
			return
		}
		c.lastSample = at
		if prune {
			c.lastPrune = now
		}
	}()
}

// writeSamples adds the nodes' utilization to samples (by compute key)
// and writes them.
func (c *Controller) writeSamples(ctx context.Context, samples map[string]api.ComputeSample, prune bool, now time.Time) error {
	var use map[[2]string]store.ComputeUtilization
	if err := c.store.View(ctx, func(tx store.Tx) (err error) {
		use, err = tx.ComputeUtilizations(ctx)
		return err
	}); err != nil {
		return err
	}
	addUtilization(samples, use)
	return c.store.Update(ctx, func(tx store.Tx) error {
		for k, smp := range samples {
			ws, name, _ := strings.Cut(k, "/")
			if err := tx.AddComputeSample(ctx, ws, name, smp); err != nil {
				return err
			}
		}
		if prune {
			return tx.PruneComputeSamples(ctx, now.Add(-keepSamples))
		}
		return nil
	})
}
