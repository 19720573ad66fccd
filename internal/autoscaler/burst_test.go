package autoscaler

import (
	"slices"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

// burstHistory: every 3 hours for three days a batch of 20 one-node jobs,
// one every 2 s, each job's node idle 20 minutes after its submit; the
// compute's idle time is 120 s. No node idle 120 s sees a job, so fixed
// 120 s costs 120 s a node for nothing and every job waits a whole boot.
func burstHistory() (*GapHistory, time.Time) {
	h := NewGapHistory()
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	var at time.Time
	for b := range 24 {
		at = t0.Add(time.Duration(b) * 3 * time.Hour)
		for k := range 20 {
			h.Demand(at.Add(time.Duration(k)*2*time.Second), 1)
		}
		for k := range 20 {
			h.NodeIdle(at.Add(20*time.Minute + time.Duration(k)*2*time.Second))
		}
	}
	return h, at
}

func TestFollowOns(t *testing.T) {
	boot := 180 * time.Second
	s := int64(time.Second)
	log := []logEvent{
		{At: 0, Nodes: 1},
		{At: 1000 * s, Nodes: 2}, {At: 1010 * s, Nodes: 1}, {At: 1100 * s}, {At: 1179 * s, Nodes: 4}, {At: 1180 * s, Nodes: 8},
		{At: 2000 * s, Nodes: 1},
		{At: 2100 * s, Nodes: 1},
		{At: 5000 * s, Nodes: 1}, {At: 5001 * s, Nodes: 1},
	}
	// The first submit has no quiet before it that the log shows; the
	// submit at 2100 s comes within a boot time of 2000 s's burst; the
	// last burst is still open at the log's end, and is not counted.
	if got, want := followOns(log, boot), []int{5, 1}; !slices.Equal(got, want) {
		t.Errorf("followOns = %v, want %v", got, want)
	}
}

// TestBootsAheadInABurst: the replay finds that booting the follow-on of
// the bursts ahead at each burst's first submit, with a short idle time,
// costs less node time than fixed 120 s and makes the jobs wait less; at
// the next burst's first submit Plan boots that many nodes more than the
// job needs, asks to be woken when the burst closes (a boot time after its
// first submit), and boots none for the jobs of the burst that follow.
func TestBootsAheadInABurst(t *testing.T) {
	h, last := burstHistory()
	h.setting, h.learned = h.bestSetting(), true
	if h.setting.burst != 19 {
		t.Fatalf("setting %+v: want 19 nodes booted ahead in a burst", h.setting)
	}
	c := cluster(0, 100, nil, nil)
	c.Policy, c.Gaps = AdaptivePolicy, h
	first := last.Add(3 * time.Hour)
	h.Demand(first, 1)
	c.Queued = []Demand{{Job: "j0", Instances: 1, Jobs: 1}}
	res := Plan(Snapshot{Computes: []Compute{c}}, first, BuiltinPolicies())
	if res.Targets["a"] != 20 || !res.NextWake.Equal(first.Add(h.BootTime)) {
		t.Errorf("at a burst's first submit: target %d, next wake %v; want 20 and %v", res.Targets["a"], res.NextWake, first.Add(h.BootTime))
	}
	// The second job of the burst: 20 nodes are booting, none is created.
	h.Demand(first.Add(2*time.Second), 1)
	c.Nodes = nodes("b", api.NodePreparing, 20, 0)
	c.Queued = []Demand{{Job: "j0", Instances: 1, Jobs: 2}}
	res = Plan(Snapshot{Computes: []Compute{c}}, first.Add(2*time.Second), BuiltinPolicies())
	if res.Targets["a"] != 20 || len(res.Actions) != 0 {
		t.Errorf("the burst's second job: target %d, actions %v; want 20 and none", res.Targets["a"], actions(res))
	}
	// Once the burst has closed, the nodes no job took are not kept.
	c.Nodes = append(nodes("b", api.NodeRunning, 2, 0), nodes("c", api.NodeIdle, 18, 0)...)
	for i := range c.Nodes[2:] {
		c.Nodes[2+i].IdleSince = first.Add(h.BootTime)
	}
	c.Queued = nil
	res = Plan(Snapshot{Computes: []Compute{c}}, first.Add(h.BootTime), BuiltinPolicies())
	if res.Targets["a"] != 2 {
		t.Errorf("a boot time after the burst's first submit: target %d; want 2 (the busy nodes)", res.Targets["a"])
	}
	// A lone job a boot time after the last opens a burst of its own.
	if n, _ := h.burstLeft(first.Add(h.BootTime+time.Second), 19); n != 0 {
		t.Errorf("after the burst closed, %d nodes left to boot ahead; want 0", n)
	}
}
