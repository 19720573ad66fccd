package controller

import (
	"context"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// keepSamples is how long compute samples are kept.
const keepSamples = 7 * 24 * time.Hour

// computeSamples is each compute's state in the snapshot: nodes by state,
// queued and running jobs, and what its nodes used at their last
// heartbeat.
func computeSamples(s *snapshot, at time.Time) map[string]api.ComputeSample {
	out := map[string]api.ComputeSample{}
	gpus := map[string][]float64{}
	for _, cp := range s.computes {
		out[key(cp.Workspace, cp.Name)] = api.ComputeSample{Time: at}
	}
	for _, n := range s.nodes {
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
	for k, smp := range out {
		smp.Queued += s.queue.q.Count(k)
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
	return out
}

// sample records every compute's state once per SampleInterval, and
// drops samples older than a week once an hour.
func (c *Controller) sample(ctx context.Context, s *snapshot, now time.Time) error {
	if c.cfg.SampleInterval <= 0 {
		return nil // a controller built without the server's defaults
	}
	at := now.Truncate(c.cfg.SampleInterval)
	if !at.After(c.lastSample) {
		return nil
	}
	// The snapshot's nodes carry the utilization of their last write, not
	// of their last heartbeat (see nodeFeed): read them whole, once per
	// sample.
	fresh := *s
	if err := c.store.View(ctx, func(tx store.Tx) (err error) {
		fresh.nodes, err = tx.ListNodes(ctx, "", "")
		return err
	}); err != nil {
		return err
	}
	samples := computeSamples(&fresh, at)
	prune := now.Sub(c.lastPrune) >= time.Hour
	err := c.store.Update(ctx, func(tx store.Tx) error {
		for _, cp := range s.computes {
			if err := tx.AddComputeSample(ctx, cp.Workspace, cp.Name, samples[key(cp.Workspace, cp.Name)]); err != nil {
				return err
			}
		}
		if prune {
			return tx.PruneComputeSamples(ctx, now.Add(-keepSamples))
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.lastSample = at
	if prune {
		c.lastPrune = now
	}
	return nil
}
