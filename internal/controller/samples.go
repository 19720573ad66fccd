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
// state and what they used at their last heartbeat.
func addNodes(out map[string]api.ComputeSample, nodes []api.Node) {
	gpus := map[string][]float64{}
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
		if u := n.Utilization; u != nil {
			smp.CPUPercent += u.CPUPercent
			smp.MemoryBytes += u.MemoryBytes
			if u.GPUPercent != nil {
				gpus[k] = append(gpus[k], *u.GPUPercent)
			}
		}
		out[k] = smp
	}
	for k, g := range gpus {
		smp := out[k]
		sum := 0.0
		for _, v := range g {
			sum += v
		}
		mean := sum / float64(len(g))
		smp.GPUPercent = &mean
		out[k] = smp
	}
}

// sample records every compute's state once per SampleInterval, and
// drops samples older than a week once an hour. The turn takes what it
// keeps (the jobs); the nodes' figures need their last heartbeats, which
// the kept nodes do not carry (see nodeFeed), so a goroutine of its own
// reads the nodes whole and writes the samples: at 10,000 nodes that read
// and its decoding took about 150 ms, and held the turn, and every
// placement waiting on it, once a minute. A sample not written is taken
// again at the next turn.
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

// writeSamples adds the nodes to samples (by compute key) and writes them.
func (c *Controller) writeSamples(ctx context.Context, samples map[string]api.ComputeSample, prune bool, now time.Time) error {
	var nodes []api.Node
	if err := c.store.View(ctx, func(tx store.Tx) (err error) {
		nodes, err = tx.ListNodes(ctx, "", "")
		return err
	}); err != nil {
		return err
	}
	addNodes(samples, nodes)
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
