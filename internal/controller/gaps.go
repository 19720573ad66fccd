package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/store"
)

// gapTracker feeds each adaptive compute's autoscaler.GapHistory from the
// snapshots the loop loads: nodes that turned idle and jobs that were
// submitted since the last turn, in time order. The boot time it prices a
// scale-down with is the compute's own, measured (the median time its
// nodes took to register), once known. The controller saves each history
// in the store (saveGaps) and a tracker starts from what was saved, so a
// server restart does not make the policy relearn.
type gapTracker struct {
	boot    time.Duration
	byKey   map[string]*autoscaler.GapHistory
	watermk map[string]time.Time // latest observation fed per compute
	// load returns a compute's saved history and watermark (nil: none).
	load func(key string) (*autoscaler.GapHistory, time.Time)
	// saved is, per compute, how many gaps the saved history had closed.
	saved   map[string]int
	savedAt map[string]time.Time
}

func newGapTracker(boot time.Duration) *gapTracker {
	return &gapTracker{boot: boot, byKey: map[string]*autoscaler.GapHistory{}, watermk: map[string]time.Time{},
		saved: map[string]int{}, savedAt: map[string]time.Time{}}
}

// gapChanges are the nodes and jobs written since the last observe, as
// they are now: the nodes (in id order) and the unfinished command jobs
// (queued or not). A node that turned idle and a job that was submitted
// are writes, so an adaptive compute observed before learns only from
// these.
type gapChanges struct {
	nodes []*api.Node
	jobs  []gapJob
}

// gapJob is what the histories learn of a job: its compute's key, when it
// was submitted and how many nodes it needs.
type gapJob struct {
	key, compute string
	at           time.Time
	nodes        int
}

// gapObs is one observation of a compute's history: a node that turned
// idle (nodes 0) or a job submitted (needing nodes), named by id (the node
// or job) to order the ones at the same instant.
type gapObs struct {
	at    time.Time
	nodes int
	id    string
}

// observe feeds what changed since the last call for the computes that use
// the adaptive policy and returns their histories by compute key. boot
// holds the computes' measured start times. ch holds what was written
// since the last call (nil: walk every node and job of s); a compute
// without a history yet is walked whole either way.
func (g *gapTracker) observe(s *snapshot, computes map[string]*api.Compute, boot map[string]time.Duration, ch *gapChanges) map[string]*autoscaler.GapHistory {
	per := map[string][]gapObs{}
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
	whole := map[string]bool{} // the computes walked whole
	for k := range per {
		if ch == nil || g.byKey[k] == nil {
			whole[k] = true
		}
	}
	// A node that turned idle when it registered goes to the job it was
	// created for, which the history counts as a boot: only a node that
	// finished a job starts an idle gap.
	node := func(n *api.Node, walk bool) {
		k := key(n.Workspace, n.Compute)
		if _, ok := per[k]; ok && whole[k] == walk && n.State == api.NodeIdle && n.StateSince.After(g.watermk[k]) && !n.StateSince.Equal(n.RegisteredOn) {
			per[k] = append(per[k], gapObs{at: n.StateSince, id: n.ID})
		}
	}
	job := func(j gapJob, walk bool) {
		if _, ok := per[j.compute]; ok && whole[j.compute] == walk && j.at.After(g.watermk[j.compute]) {
			per[j.compute] = append(per[j.compute], gapObs{at: j.at, nodes: j.nodes, id: j.key})
		}
	}
	if len(whole) > 0 {
		for i := range s.nodes {
			node(&s.nodes[i], true)
		}
		for _, j := range s.jobs {
			job(gapJob{key: key(j.Workspace, j.Name), compute: key(j.Workspace, j.Compute), at: j.CreatedOn, nodes: j.InstanceCount()}, true)
		}
		if s.queue != nil {
			for k := range whole {
				for j := range s.queue.q.Jobs(k) {
					job(gapJob{key: j.Key, compute: k, at: time.Unix(0, j.Seq).UTC(), nodes: j.Instances}, true)
				}
			}
		}
	}
	if ch != nil {
		for _, n := range ch.nodes {
			node(n, false)
		}
		for _, j := range ch.jobs {
			job(j, false)
		}
	}
	for k, list := range per {
		h := g.byKey[k]
		if h == nil && g.load != nil {
			if saved, mark := g.load(k); saved != nil {
				h, g.watermk[k] = saved, mark
				g.saved[k] = saved.Closed()
			}
		}
		if h == nil {
			h = autoscaler.NewGapHistory()
			if g.boot > 0 {
				h.BootTime = g.boot
			}
		}
		g.byKey[k] = h
		h.Reference = time.Duration(computes[k].IdleTimeBeforeScaleDown) * time.Second
		if d := boot[k]; d > 0 && g.boot == 0 {
			h.BootTime = d
		}
		// In time order; at one instant idle nodes first, then by id: the
		// same whether the compute was walked whole or learned from what
		// changed.
		slices.SortFunc(list, func(a, b gapObs) int {
			return cmp.Or(cmp.Compare(a.at.UnixNano(), b.at.UnixNano()), cmp.Compare(a.nodes, b.nodes), cmp.Compare(a.id, b.id))
		})
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

// gapChanges takes what was written since the adaptive histories last
// learned, as it is in s (nil: everything may have been).
func (c *Controller) gapChanges(s *snapshot) *gapChanges {
	nodes, allNodes := c.nodes.takeWritten()
	jobs, allJobs := c.gapJobs, c.gapAllJobs
	c.gapJobs, c.gapAllJobs = nil, false
	if allNodes || allJobs {
		return nil
	}
	ch := &gapChanges{}
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		if n := c.nodes.node(id); n != nil {
			ch.nodes = append(ch.nodes, n)
		}
	}
	for k := range jobs {
		if j, ok := s.queue.job(k); ok {
			ch.jobs = append(ch.jobs, gapJob{key: k, compute: j.Compute, at: time.Unix(0, j.Seq).UTC(), nodes: j.Instances})
		} else if j := c.jobs[k]; j != nil && j.Type != api.JobTypePipeline && j.Type != api.JobTypeSweep {
			ch.jobs = append(ch.jobs, gapJob{key: k, compute: key(j.Workspace, j.Compute), at: j.CreatedOn, nodes: j.InstanceCount()})
		}
	}
	return ch
}

// gapsSaveEvery bounds how often a compute's history is written.
const gapsSaveEvery = time.Minute

// savedGaps is what the store keeps of a compute's history.
type savedGaps struct {
	History   *autoscaler.GapHistory `json:"history"`
	Watermark time.Time              `json:"watermark"`
}

// gapsSetting is the store setting that holds a compute's history.
func gapsSetting(key string) string { return "adaptive_gaps/" + key }

// dirty returns the computes whose history learned something since it was
// last saved, at most once per gapsSaveEvery.
func (g *gapTracker) dirty(now time.Time) map[string]savedGaps {
	out := map[string]savedGaps{}
	for k, h := range g.byKey {
		if h.Closed() != g.saved[k] && now.Sub(g.savedAt[k]) >= gapsSaveEvery {
			out[k] = savedGaps{History: h, Watermark: g.watermk[k]}
		}
	}
	return out
}

// markSaved records that the computes' histories were saved at now.
func (g *gapTracker) markSaved(saved map[string]savedGaps, now time.Time) {
	for k, s := range saved {
		g.saved[k], g.savedAt[k] = s.History.Closed(), now
	}
}

// loadGaps reads a compute's saved history; nil when there is none or it
// cannot be read (the policy then learns again).
func (c *Controller) loadGaps(key string) (*autoscaler.GapHistory, time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var raw string
	err := c.store.View(ctx, func(tx store.Tx) (err error) {
		raw, err = tx.GetSetting(ctx, gapsSetting(key))
		return err
	})
	if err != nil {
		return nil, time.Time{}
	}
	var sg savedGaps
	if err := json.Unmarshal([]byte(raw), &sg); err != nil || sg.History == nil {
		c.log.Warn("adaptive policy: the saved history cannot be read; learning again", "compute", key, "err", err)
		return nil, time.Time{}
	}
	return sg.History, sg.Watermark
}

// saveGaps writes the adaptive histories that learned something, so a
// restart resumes from them.
func (c *Controller) saveGaps(ctx context.Context, now time.Time) {
	dirty := c.gaps.dirty(now)
	if len(dirty) == 0 {
		return
	}
	err := c.store.Update(ctx, func(tx store.Tx) error {
		for k, sg := range dirty {
			b, err := json.Marshal(sg)
			if err != nil {
				return err
			}
			if err := tx.PutSetting(ctx, gapsSetting(k), string(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		c.log.Warn("saving adaptive histories", "err", err)
		return
	}
	c.gaps.markSaved(dirty, now)
}
