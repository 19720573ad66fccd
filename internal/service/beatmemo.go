package service

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/store"
)

// A replica keeps what each node's heartbeats last said in memory and
// writes a heartbeat to the store only when it says something new, or when
// the replica's last write of that node is BeatWritePeriod old. At 10,000
// nodes, writing every heartbeat was most of what heartbeats cost the
// server; most say nothing new.
//
// A heartbeat is answered without the store when nothing changed since
// the last one this replica wrote: the agent runs what it ran then, and
// that write's reconciliation found the agent and the store agreed (no
// assignment to stop, none missing). Every cancel or assignment a
// heartbeat's answer carries still comes from the store in the
// transaction that wrote it. A message the controller sends a node (Hub
// deliveries, relayed ones from other replicas included: Recheck) makes
// its next heartbeat reconcile with the store again.
//
// Liveness (Silent): the store's last_seen of a node that heartbeats is at
// most BeatWritePeriod plus an interval old, so a replica that does not
// receive a node's heartbeats (another replica, a leader after a
// failover) judges it silent only once last_seen is UnusableAfter plus
// BeatWritePeriod old. The replica that does receive them knows the last
// one and judges it after UnusableAfter, as before.

// BeatWritePeriod is how long a replica may leave a node's last_seen in
// the store unwritten while the node keeps heartbeating to it:
// UnusableAfter less two heartbeat intervals and beatLinger. A replica that holds a node's latest
// heartbeat can then judge the node silent after UnusableAfter even if
// the node moved on to another replica: that one writes within the period
// and an interval, before UnusableAfter has passed (Silent). Zero (every
// heartbeat written at once) when that is shorter than an interval, as
// with the tests' 3 s unusable_after, or the configuration is unset.
func BeatWritePeriod(c config.Server) time.Duration {
	// Agents heartbeat every whole second, at least one (Register).
	interval := max(c.HeartbeatInterval, time.Second)
	if p := c.UnusableAfter - 2*interval - beatLinger; p >= interval {
		return p
	}
	return 0
}

// beatMemo is what one node's heartbeats last told this replica.
type beatMemo struct {
	// last is the last heartbeat heard, written yet or not: the agent was
	// alive then, even if the writer keeps its heartbeat waiting.
	last    time.Time
	written time.Time            // the last heartbeat written to the store
	running []string             // what the agent ran then, sorted
	util    *api.NodeUtilization // as last written
	cache   api.NodeCache
	// quiet: that write's reconciliation found nothing to do.
	quiet bool
	// gen counts Rechecks: a write whose heartbeat arrived before one is
	// not quiet.
	gen uint64
}

// utilMoved reports whether utilization b differs enough from a, the
// last written, to be written now (what charts and `node list` show): by
// a fifth and at least 10 % of a core or 256 MiB, or 10 points of GPU.
// Against the last written value, not fixed buckets, so that a reading
// that hovers at a bucket's edge is not written at every heartbeat.
func utilMoved(a, b *api.NodeUtilization) bool {
	if a == nil || b == nil {
		return (a == nil) != (b == nil)
	}
	moved := func(x, y, least float64) bool {
		d := math.Abs(x - y)
		return d >= least && d >= max(x, y)/5
	}
	if (a.GPUPercent == nil) != (b.GPUPercent == nil) || a.GPUPercent != nil && math.Abs(*a.GPUPercent-*b.GPUPercent) >= 10 {
		return true
	}
	return moved(a.CPUPercent, b.CPUPercent, 10) || moved(float64(a.MemoryBytes), float64(b.MemoryBytes), 1<<28) ||
		moved(float64(a.GPUMemoryBytes), float64(b.GPUMemoryBytes), 1<<28)
}

// beatMemos are this replica's memos, by node.
type beatMemos struct {
	mu     sync.Mutex
	m      map[string]*beatMemo
	pruned time.Time
}

// What arrive says of a heartbeat.
const (
	beatAnswered = iota // from memory: nothing new, written within the period
	beatDue             // nothing new, but its period ran out: written with others (beatLinger)
	beatNow             // something new: written at once
)

// arrive notes heartbeat hb of node id at now as the node's last heard. It
// says whether the heartbeat may be answered without the store or must be
// written, and the memo's generation for written.
// Once a minute it drops the memos of nodes not heard of for keep (gone,
// or heartbeating to another replica).
func (ms *beatMemos) arrive(id string, hb api.AgentHeartbeat, now time.Time, period, keep time.Duration) (gen uint64, write int) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.m == nil {
		ms.m = map[string]*beatMemo{}
	}
	if now.Sub(ms.pruned) >= time.Minute {
		ms.pruned = now
		for id, e := range ms.m {
			if now.Sub(e.last) > keep && now.Sub(e.written) > keep {
				delete(ms.m, id)
			}
		}
	}
	e := ms.m[id]
	if e == nil {
		e = &beatMemo{}
		ms.m[id] = e
	}
	if now.After(e.last) {
		e.last = now
	}
	switch {
	case period <= 0 || !e.quiet || hb.Activity != nil || len(hb.Refused) > 0 || !sameSet(e.running, hb.Running) ||
		utilMoved(e.util, hb.Utilization) || (hb.Cache != nil && *hb.Cache != e.cache):
		return e.gen, beatNow
	case now.Sub(e.written) >= period:
		return e.gen, beatDue
	}
	return e.gen, beatAnswered
}

// written records that node id's heartbeat hb, which arrived at
// generation gen, was written at `at`, and what its reconciliation found.
func (ms *beatMemos) written(id string, hb api.AgentHeartbeat, gen uint64, at time.Time, beat Beat) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	e := ms.m[id]
	if e == nil { // pruned meanwhile: a Recheck may have been lost with it
		e = &beatMemo{gen: gen + 1}
		ms.m[id] = e
	}
	if at.Before(e.written) {
		return // a later heartbeat was written first
	}
	e.written = at
	if at.After(e.last) {
		e.last = at
	}
	e.running = slices.Sorted(slices.Values(hb.Running))
	e.util = hb.Utilization
	if hb.Cache != nil {
		e.cache = *hb.Cache
	}
	e.quiet = e.gen == gen && hb.Activity == nil && len(beat.Cancel) == 0 && !beat.Missing
}

// forget drops node id's memo (its record is gone).
func (ms *beatMemos) forget(id string) {
	ms.mu.Lock()
	delete(ms.m, id)
	ms.mu.Unlock()
}

// recheck makes the next heartbeat of node id ("" for every node)
// reconcile with the store.
func (ms *beatMemos) recheck(id string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if id == "" {
		for _, e := range ms.m {
			e.gen++
			e.quiet = false
		}
		return
	}
	if e := ms.m[id]; e != nil {
		e.gen++
		e.quiet = false
	}
}

// lastBeat is the last heartbeat of node id this replica heard.
func (ms *beatMemos) lastBeat(id string) (time.Time, bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	e := ms.m[id]
	if e == nil || e.last.IsZero() {
		return time.Time{}, false
	}
	return e.last, true
}

// overlay sets the last heartbeat of each of nodes that this replica
// heard of since the store's to that later one.
func (ms *beatMemos) overlay(nodes []api.Node) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for i := range nodes {
		if e := ms.m[nodes[i].ID]; e != nil && e.last.After(nodes[i].LastHeartbeat) {
			nodes[i].LastHeartbeat = e.last
		}
	}
}

func sameSet(sorted, ids []string) bool {
	if len(sorted) != len(ids) {
		return false
	}
	for _, id := range ids {
		if _, ok := slices.BinarySearch(sorted, id); !ok {
			return false
		}
	}
	return true
}

// Recheck makes the next heartbeat of node id ("" for every node)
// reconcile what its agent runs with the store, instead of being answered
// from memory: the controller sent the node something (an assignment, a
// cancel) that its agent may have missed.
func (s *Service) Recheck(id string) { s.beats.memo.recheck(id) }

// Silent judges a node the store lists as silent for UnusableAfter (its
// last_seen, x.LastSeen, is older): whether it stopped heartbeating, and
// when it was last heard of. A node whose latest heartbeat this replica
// heard is judged by that heartbeat, written yet or not (a writer slow
// under load must not make a live node look dead); another by its
// last_seen, which the replica it heartbeats to may leave BeatWritePeriod
// old.
func (s *Service) Silent(x store.NodeSeen, now time.Time) (time.Time, bool) {
	if last, ok := s.beats.memo.lastBeat(x.ID); ok && !last.Before(x.LastSeen) {
		return last, now.Sub(last) > s.Config.UnusableAfter
	}
	return x.LastSeen, now.Sub(x.LastSeen) > s.Config.UnusableAfter+BeatWritePeriod(s.Config)
}
