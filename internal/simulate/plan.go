package simulate

import (
	"slices"
	"strconv"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
)

// The autoscaler's side of a replay: the compute as Plan sees it, and
// Plan's decisions applied to the simulated nodes.

// plan runs autoscaler.Plan and applies its actions.
func (s *sim) plan() {
	s.snapshot()
	res := autoscaler.Plan(autoscaler.Snapshot{Computes: s.snap}, s.base.Add(s.now), s.policies)
	for _, a := range res.Actions {
		switch a.Kind {
		case autoscaler.ActionCreate:
			s.createNodes(a.Count)
		case autoscaler.ActionDelete:
			i := nodeIndex(a.Node)
			s.setState(i, stGone)
			s.res.ScaleDowns++
		}
	}
	s.broken = s.broken[:0]
	if !res.NextWake.IsZero() {
		at := res.NextWake.Sub(s.base)
		if s.wake < 0 || at < s.wake {
			s.wake = at
			s.ev.push(event{at: at, kind: evWake})
		}
	}
	if n := s.counts[stPreparing] + s.counts[stIdle] + s.counts[stBusy]; n > s.peak {
		s.peak = n
	}
}

// snapshot builds, in s.snap[0], the compute as Plan sees it: the idle nodes that may
// leave are listed, longest idle first, the others only counted.
func (s *sim) snapshot() {
	cp := &s.cfg.Compute
	c := &s.snap[0]
	*c = autoscaler.Compute{
		Key: computeKey, Nodes: s.cnodes[:0], Queued: s.cqueue[:0], Min: cp.MinInstances, Max: cp.MaxInstances, QuotaMaxNodes: cp.MaxInstances,
		IdleTimeout: time.Duration(cp.IdleTimeBeforeScaleDown) * time.Second,
		Policy:      s.cfg.Policy, Gaps: s.gaps, MaxStarting: cp.MaxStartingNodes(),
	}
	for _, i := range s.broken {
		st := api.NodeUnusable
		if s.nodes[i].state == stPreempted {
			st = api.NodePreempted
		}
		c.Nodes = append(c.Nodes, autoscaler.Node{ID: s.nodes[i].id, State: st})
	}
	fit, over := s.queue.Demand(computeKey, c.Cap())
	for _, sc := range fit {
		c.Queued = append(c.Queued, autoscaler.Demand{Instances: sc.Instances, Jobs: sc.Jobs})
	}
	for _, j := range over {
		c.Queued = append(c.Queued, autoscaler.Demand{Job: j.Key, Instances: j.Instances})
	}
	// The policy is pure, so asking it here gives what Plan will use. Plan
	// deletes at most shed idle nodes, longest idle first, and stops at
	// the first that may not leave yet (which sets the next wake), so
	// listing those nodes and their ties gives the same result as listing
	// every node; the nodes idle more recently are only counted.
	c.Counted = autoscaler.NodeCounts{Busy: s.counts[stBusy], Preparing: s.counts[stPreparing], Idle: s.counts[stIdle]}
	d := s.policy.Decide(c, s.base.Add(s.now))
	s.memo.d = d
	for s.idleHead < len(s.byIdle) && !s.live(s.byIdle[s.idleHead]) {
		s.idleHead++
	}
	if s.idleHead > 4096 && s.idleHead*2 > len(s.byIdle) {
		s.byIdle = slices.Delete(s.byIdle, 0, s.idleHead)
		s.idleHead = 0
	}
	queued := 0 // the demand Plan counts: the jobs that fit the cap
	for _, sc := range fit {
		queued += sc.Instances * sc.Jobs
	}
	existing := s.counts[stBusy] + s.counts[stPreparing] + s.counts[stIdle]
	target := min(c.Cap(), max(c.Min, s.counts[stBusy]+queued+max(d.Warm, 0)))
	shed := min(existing-target, existing-c.Min, max(existing-c.Cap(), s.counts[stIdle]-queued))
	listed := 0
	var last time.Duration = -1
	done := shed <= 0
	for k := s.idleHead; k < len(s.byIdle); k++ {
		r := s.byIdle[k]
		if !s.live(r) {
			continue
		}
		n := &s.nodes[r.idx]
		if done && n.since != last {
			break
		}
		c.Nodes = append(c.Nodes, autoscaler.Node{ID: n.id, State: api.NodeIdle, IdleSince: s.base.Add(n.since)})
		listed++
		last = n.since
		if listed >= shed || s.now-n.since < max(d.IdleTimeout, 0) {
			done = true
		}
	}
	s.cnodes, s.cqueue = c.Nodes, c.Queued
	c.Counted = autoscaler.NodeCounts{Busy: s.counts[stBusy], Preparing: s.counts[stPreparing], Idle: s.counts[stIdle] - listed}
	if s.cfg.full {
		c.Nodes, c.Counted = c.Nodes[:len(s.broken)], autoscaler.NodeCounts{}
		for i := range s.nodes {
			n := &s.nodes[i]
			an := autoscaler.Node{ID: n.id, IdleSince: s.base.Add(n.since)}
			switch n.state {
			case stPreparing:
				an.State = api.NodePreparing
			case stIdle:
				an.State = api.NodeIdle
			case stBusy:
				an.State, an.Job = api.NodeRunning, s.jobs[n.job].key
			default:
				continue
			}
			c.Nodes = append(c.Nodes, an)
		}
	}
}

// createNodes creates count nodes as the controller's createNodes does:
// nothing while the compute backs off; during a capacity outage each
// creation fails and the back-off starts (the failures of one scale-up
// count once), and a wake at its end asks Plan again.
func (s *sim) createNodes(count int) {
	at := s.base.Add(s.now)
	if s.backoff.Blocks(at) {
		return
	}
	for range count {
		if !s.cfg.CapacityOutage.at(s.now) {
			s.create()
			continue
		}
		s.res.CapacityFailures++
		s.backoff.Fail(at, "insufficient capacity")
	}
	if s.backoff.Blocks(at) {
		s.ev.push(event{at: s.backoff.Until.Sub(s.base), kind: evWake})
	}
}

// create adds a preparing node and schedules its boot.
func (s *sim) create() {
	i := int32(len(s.nodes))
	s.nodes = append(s.nodes, node{id: nodeID(i), state: stPreparing, since: s.now, created: s.now})
	s.counts[stPreparing]++
	s.res.ScaleUps++
	s.ev.push(event{at: s.now + s.cfg.BootTime, kind: evBoot, idx: i})
}

// memoPolicy returns the decision the simulator computed for this call.
type memoPolicy struct{ d autoscaler.Decision }

// Decide returns the stored decision.
func (m *memoPolicy) Decide(*autoscaler.Compute, time.Time) autoscaler.Decision { return m.d }

// nodeID names node i so that string order is creation order, which is
// the order Place hands free nodes out in.
func nodeID(i int32) string {
	b := []byte("node-000000000")
	for k, v := len(b)-1, i; v > 0; k, v = k-1, v/10 {
		b[k] = byte('0' + v%10)
	}
	return string(b)
}

func nodeIndex(id string) int32 {
	n, _ := strconv.Atoi(id[len("node-"):])
	return int32(n)
}
