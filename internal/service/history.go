package service

import (
	"context"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// ComputeHistory returns a compute's samples since a time, in at most
// points buckets (0: every sample): a bucket keeps the most nodes and jobs
// it saw, so short peaks show, and the mean utilisation.
func (s *Service) ComputeHistory(ctx context.Context, ws, name string, since time.Time, points int) ([]api.ComputeSample, error) {
	var raw []api.ComputeSample
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if _, err := s.compute(ctx, tx, ws, name); err != nil {
			return err
		}
		raw, err = tx.ListComputeSamples(ctx, ws, name, since)
		return err
	})
	if err != nil {
		return nil, err
	}
	return Downsample(raw, points), nil
}

// Downsample merges samples (oldest first) into at most points buckets of
// equal time span.
func Downsample(in []api.ComputeSample, points int) []api.ComputeSample {
	if points <= 0 || len(in) <= points {
		if in == nil {
			return []api.ComputeSample{}
		}
		return in
	}
	first, last := in[0].Time, in[len(in)-1].Time
	step := last.Sub(first)/time.Duration(points) + 1
	var out []api.ComputeSample
	var cpu, gpu float64
	var n, gn int
	flush := func() {
		b := &out[len(out)-1]
		b.CPUPercent = cpu / float64(n)
		if gn > 0 {
			g := gpu / float64(gn)
			b.GPUPercent = &g
		}
	}
	for _, smp := range in {
		bucket := first.Add(smp.Time.Sub(first) / step * step)
		if len(out) == 0 || !out[len(out)-1].Time.Equal(bucket) {
			if len(out) > 0 {
				flush()
			}
			out = append(out, api.ComputeSample{Time: bucket})
			cpu, gpu, n, gn = 0, 0, 0, 0
		}
		b := &out[len(out)-1]
		b.Nodes = maxCounts(b.Nodes, smp.Nodes)
		b.Queued, b.Running = max(b.Queued, smp.Queued), max(b.Running, smp.Running)
		b.MemoryBytes = max(b.MemoryBytes, smp.MemoryBytes)
		cpu += smp.CPUPercent
		n++
		if smp.GPUPercent != nil {
			gpu += *smp.GPUPercent
			gn++
		}
	}
	flush()
	return out
}

func maxCounts(a, b api.NodeStateCounts) api.NodeStateCounts {
	return api.NodeStateCounts{Idle: max(a.Idle, b.Idle), Running: max(a.Running, b.Running), Preparing: max(a.Preparing, b.Preparing),
		Unusable: max(a.Unusable, b.Unusable), Leaving: max(a.Leaving, b.Leaving), Preempted: max(a.Preempted, b.Preempted)}
}
