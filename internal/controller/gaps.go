package controller

import (
	"cmp"
	"slices"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
)

// gapTracker feeds each adaptive compute's autoscaler.GapHistory from the
// snapshots the loop loads: nodes that turned idle and jobs that were
// submitted since the last turn, in time order. The history lives in
// memory: after a restart the policy relearns, using the compute's
// idle_time_before_scale_down until it has seen enough.
type gapTracker struct {
	boot    time.Duration
	byKey   map[string]*autoscaler.GapHistory
	watermk map[string]time.Time // latest observation fed per compute
}

func newGapTracker(boot time.Duration) *gapTracker {
	return &gapTracker{boot: boot, byKey: map[string]*autoscaler.GapHistory{}, watermk: map[string]time.Time{}}
}

// observe feeds what changed since the last call for the computes that use
// the adaptive policy and returns their histories by compute key.
func (g *gapTracker) observe(s *snapshot, computes map[string]*api.Compute) map[string]*autoscaler.GapHistory {
	type obs struct {
		at    time.Time
		nodes int // 0: a node turned idle; else a job's instance count
	}
	per := map[string][]obs{}
	for k, cp := range computes {
		if cp.ScaleDownPolicy() == api.ScaleDownAdaptive {
			per[k] = nil
		}
	}
	for k := range g.byKey {
		if _, ok := per[k]; !ok {
			delete(g.byKey, k) // the compute left adaptive or was deleted
			delete(g.watermk, k)
		}
	}
	if len(per) == 0 {
		return nil
	}
	for _, n := range s.nodes {
		k := key(n.Workspace, n.Compute)
		if _, ok := per[k]; ok && n.State == api.NodeIdle && n.StateSince.After(g.watermk[k]) {
			per[k] = append(per[k], obs{at: n.StateSince})
		}
	}
	for _, j := range s.jobs {
		k := key(j.Workspace, j.Compute)
		if _, ok := per[k]; ok && j.CreatedOn.After(g.watermk[k]) {
			per[k] = append(per[k], obs{at: j.CreatedOn, nodes: j.InstanceCount()})
		}
	}
	for k, list := range per {
		h := g.byKey[k]
		if h == nil {
			h = autoscaler.NewGapHistory()
			if g.boot > 0 {
				h.BootTime = g.boot
			}
			g.byKey[k] = h
		}
		slices.SortStableFunc(list, func(a, b obs) int { return cmp.Compare(a.at.UnixNano(), b.at.UnixNano()) })
		for _, o := range list {
			if o.nodes == 0 {
				h.NodeIdle(o.at)
			} else {
				h.Demand(o.at, o.nodes)
			}
			g.watermk[k] = o.at
		}
	}
	return g.byKey
}
