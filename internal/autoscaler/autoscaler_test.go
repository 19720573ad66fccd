package autoscaler

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tideml/tide/api"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// nodes returns n nodes named prefix-1 .. prefix-n in state, idle since
// t0 - idleFor when they are idle.
func nodes(prefix, state string, n int, idleFor time.Duration) []Node {
	var out []Node
	for i := 1; i <= n; i++ {
		nd := Node{ID: fmt.Sprintf("%s-%d", prefix, i), State: state}
		if state == api.NodeIdle {
			nd.IdleSince = t0.Add(-idleFor)
		}
		if state == api.NodeRunning {
			nd.Job = "job-" + nd.ID
			nd.IdleSince = t0.Add(-time.Hour) // stale: a busy node's idle time must not matter
		}
		out = append(out, nd)
	}
	return out
}

// demand returns queued jobs with the given instance counts.
func demand(sizes ...int) []Demand {
	var out []Demand
	for i, s := range sizes {
		out = append(out, Demand{Job: fmt.Sprintf("q%d", i), Instances: s})
	}
	return out
}

// cluster returns a compute "a" with min, max (quota equal to max) and a
// 120s idle timeout.
func cluster(minN, maxN int, ns []Node, q []Demand) Compute {
	return Compute{Key: "a", Min: minN, Max: maxN, QuotaMaxNodes: maxN, IdleTimeout: 120 * time.Second, Nodes: ns, Queued: q}
}

// concat joins node lists.
func concat(lists ...[]Node) []Node {
	var out []Node
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// warmPolicy is a stand-in for a future adaptive policy: it keeps Warm
// nodes and its own idle timeout.
type warmPolicy struct {
	warm    int
	timeout time.Duration
}

func (p warmPolicy) Decide(*Compute, time.Time) Decision {
	return Decision{IdleTimeout: p.timeout, Warm: p.warm, Setting: "adaptive idle time"}
}

// actions renders a compute's actions compactly: "create 3", "delete n-1 (reason)".
func actions(r Result) []string {
	var out []string
	for _, a := range r.Actions {
		switch a.Kind {
		case ActionCreate:
			out = append(out, fmt.Sprintf("create %d", a.Count))
		case ActionDelete:
			out = append(out, fmt.Sprintf("delete %s", a.Node))
		}
	}
	return out
}

func TestPlan(t *testing.T) {
	quota := func(c Compute, q int) Compute { c.QuotaMaxNodes = q; return c }
	starting := func(c Compute, n int) Compute { c.MaxStarting = n; return c }
	withPolicy := func(c Compute, p string) Compute { c.Policy = p; return c }
	tests := []struct {
		name     string
		c        Compute
		policies Registry
		target   int
		actions  []string
		reason   string // substring of the last action's reason
		wake     time.Time
		unsched  []string // "job: reason substring"
		warning  string
	}{
		{
			name:   "nothing to do at zero",
			c:      cluster(0, 4, nil, nil),
			target: 0,
		},
		{
			name:    "scale from zero",
			c:       cluster(0, 4, nil, demand(1)),
			target:  1,
			actions: []string{"create 1"},
			reason:  "scaling to 1 nodes: 0 busy, 1 queued jobs need 1",
		},
		{
			name:    "respect max",
			c:       cluster(0, 4, nil, demand(1, 1, 1, 1, 1, 1)),
			target:  4,
			actions: []string{"create 4"},
		},
		{
			name:    "max_starting_nodes caps a burst",
			c:       starting(cluster(0, 8, nil, demand(1, 1, 1, 1, 1, 1)), 2),
			target:  6,
			actions: []string{"create 2"},
		},
		{
			name:    "max_starting_nodes counts the nodes already starting",
			c:       starting(cluster(0, 8, nodes("p", api.NodePreparing, 1, 0), demand(1, 1, 1, 1)), 2),
			target:  4,
			actions: []string{"create 1"},
		},
		{
			name:   "max_starting_nodes reached: wait for registrations",
			c:      starting(cluster(0, 8, nodes("p", api.NodePreparing, 2, 0), demand(1, 1, 1)), 2),
			target: 3,
		},
		{
			name:    "respect quota cap below max",
			c:       quota(cluster(0, 8, nil, demand(1, 1, 1, 1)), 2),
			target:  2,
			actions: []string{"create 2"},
		},
		{
			name:    "min kept when nothing is queued",
			c:       cluster(2, 4, nil, nil),
			target:  2,
			actions: []string{"create 2"},
		},
		{
			name:    "min kept when idle nodes time out",
			c:       cluster(2, 4, concat(nodes("old", api.NodeIdle, 1, 10*time.Minute), nodes("n", api.NodeIdle, 2, 5*time.Minute)), nil),
			target:  2,
			actions: []string{"delete old-1"},
		},
		{
			name:   "idle 119s of 120s stays; wake when its timer expires",
			c:      cluster(0, 4, nodes("n", api.NodeIdle, 1, 119*time.Second), nil),
			target: 0,
			wake:   t0.Add(time.Second),
		},
		{
			name:    "idle exactly 120s leaves",
			c:       cluster(0, 4, nodes("n", api.NodeIdle, 1, 120*time.Second), nil),
			target:  0,
			actions: []string{"delete n-1"},
			reason:  "idle for 120s >= idle_time_before_scale_down 120s",
		},
		{
			name:    "idle 125s leaves with Azure's reason",
			c:       cluster(0, 4, nodes("n", api.NodeIdle, 1, 125*time.Second+400*time.Millisecond), nil),
			target:  0,
			actions: []string{"delete n-1"},
			reason:  "idle for 125s >= idle_time_before_scale_down 120s",
		},
		{
			name:    "zero idle timeout: idle nodes leave at once",
			c:       Compute{Key: "a", Max: 2, QuotaMaxNodes: 2, Nodes: nodes("n", api.NodeIdle, 2, 0)},
			target:  0,
			actions: []string{"delete n-1", "delete n-2"},
		},
		{
			name:    "longest idle leaves first; the next timer sets the wake",
			c:       cluster(1, 4, concat(nodes("b", api.NodeIdle, 1, 200*time.Second), nodes("a", api.NodeIdle, 1, 300*time.Second), nodes("c", api.NodeIdle, 1, 30*time.Second)), nil),
			target:  1,
			actions: []string{"delete a-1", "delete b-1"},
		},
		{
			name:   "no wake when the surplus is already shed",
			c:      cluster(1, 4, concat(nodes("a", api.NodeIdle, 1, 300*time.Second), nodes("c", api.NodeIdle, 1, 30*time.Second)), nil),
			target: 1,
			// a-1 leaves; c-1 is min_instances and keeps no timer.
			actions: []string{"delete a-1"},
		},
		{
			name:   "never delete a node that runs a job",
			c:      cluster(0, 4, nodes("r", api.NodeRunning, 3, 0), nil),
			target: 3,
		},
		{
			name: "an idle-state node with a job just assigned is busy",
			c: cluster(0, 4, []Node{{ID: "n-1", State: api.NodeIdle, Job: "j", IdleSince: t0.Add(-time.Hour)}},
				nil),
			target: 1,
		},
		{
			name:   "preparing nodes count: no double create while booting",
			c:      cluster(0, 4, nodes("p", api.NodePreparing, 2, 0), demand(1, 1)),
			target: 2,
		},
		{
			name:    "preparing nodes count: create only the rest",
			c:       cluster(0, 8, concat(nodes("p", api.NodePreparing, 2, 0), nodes("r", api.NodeRunning, 1, 0)), demand(4)),
			target:  5,
			actions: []string{"create 2"},
			reason:  "have 3 (2 preparing)",
		},
		{
			name:    "unusable node removed and replaced",
			c:       cluster(0, 4, concat(nodes("u", api.NodeUnusable, 1, 0), nodes("r", api.NodeRunning, 1, 0)), demand(1)),
			target:  2,
			actions: []string{"delete u-1", "create 1"},
		},
		{
			name:    "preempted node removed, not replaced without demand",
			c:       cluster(0, 4, nodes("x", api.NodePreempted, 1, 0), nil),
			target:  0,
			actions: []string{"delete x-1"},
			reason:  "node is preempted",
		},
		{
			name:    "leaving nodes do not count",
			c:       cluster(0, 4, nodes("l", api.NodeLeaving, 2, 0), demand(1)),
			target:  1,
			actions: []string{"create 1"},
		},
		{
			name:   "queued demand keeps an expired idle node",
			c:      cluster(0, 4, nodes("n", api.NodeIdle, 1, time.Hour), demand(2)),
			target: 2,
			// the gang head waits for a second node; its idle node stays.
			actions: []string{"create 1"},
		},
		{
			name:   "idle nodes a waiting gang holds stay while booting nodes make a surplus",
			c:      cluster(0, 40, concat(nodes("n", api.NodeIdle, 3, time.Hour), nodes("p", api.NodePreparing, 10, 0)), demand(8)),
			target: 8,
			// 13 nodes for a target of 8, but the 3 idle ones are ready for
			// the gang and the booting ones are not: deleting them made the
			// gang wait for boots again (issue 23, Philly: up to 200 s).
		},
		{
			name:    "idle nodes beyond the queue's demand still leave",
			c:       cluster(0, 40, concat(nodes("n", api.NodeIdle, 10, time.Hour), nodes("p", api.NodePreparing, 2, 0)), demand(8)),
			target:  8,
			actions: []string{"delete n-1", "delete n-10"}, // equal idle times: by ID
		},
		{
			name:    "job bigger than max is reported and creates nothing",
			c:       cluster(0, 4, nil, demand(8)),
			target:  0,
			unsched: []string{"q0: instance_count 8 > max_instances 4 of compute a; raise max_instances"},
		},
		{
			name:    "job bigger than the quota cap is reported",
			c:       quota(cluster(0, 8, nil, demand(4, 1)), 2),
			target:  1,
			actions: []string{"create 1"},
			unsched: []string{"q0: instance_count 4 > 2 nodes the quota of compute a allows"},
		},
		{
			name:   "more nodes than the cap: idle ones above it leave at once",
			c:      cluster(0, 2, concat(nodes("r", api.NodeRunning, 1, 0), nodes("n", api.NodeIdle, 3, time.Second)), nil),
			target: 1,
			// two leave for the cap; the third is surplus too, but waits for its timer.
			actions: []string{"delete n-1", "delete n-2"},
			wake:    t0.Add(119 * time.Second),
		},
		{
			name:    "more nodes than the cap, but only fresh idle ones beyond it leave at once",
			c:       cluster(0, 2, nodes("n", api.NodeIdle, 3, time.Second), demand(1, 1)),
			target:  2,
			actions: []string{"delete n-1"},
			reason:  "more than its cap of 2",
		},
		{
			name:    "unknown policy falls back to fixed with a warning",
			c:       withPolicy(cluster(0, 4, nodes("n", api.NodeIdle, 1, 120*time.Second), nil), "bogus"),
			target:  0,
			actions: []string{"delete n-1"},
			warning: `policy "bogus": unknown autoscale policy; using "fixed"`,
		},
		{
			name:     "a policy keeps warm nodes within max",
			c:        withPolicy(cluster(0, 4, nodes("r", api.NodeRunning, 3, 0), nil), "warm"),
			policies: Registry{"warm": warmPolicy{warm: 2, timeout: time.Hour}},
			target:   4,
			actions:  []string{"create 1"},
		},
		{
			name:     "a policy's idle timeout and name appear in the reason",
			c:        withPolicy(cluster(0, 4, nodes("n", api.NodeIdle, 1, 90*time.Second), nil), "warm"),
			policies: Registry{"warm": warmPolicy{timeout: time.Minute}},
			target:   0,
			actions:  []string{"delete n-1"},
			reason:   "idle for 90s >= adaptive idle time 60s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policies := tt.policies
			if policies == nil {
				policies = BuiltinPolicies()
			}
			res := Plan(Snapshot{Computes: []Compute{tt.c}}, t0, policies)
			if got := res.Targets["a"]; got != tt.target {
				t.Errorf("target = %d, want %d", got, tt.target)
			}
			if got := actions(res); !reflect.DeepEqual(got, tt.actions) {
				t.Errorf("actions = %q, want %q", got, tt.actions)
			}
			if tt.reason != "" && len(res.Actions) > 0 {
				if r := res.Actions[len(res.Actions)-1].Reason; !strings.Contains(r, tt.reason) {
					t.Errorf("reason = %q, want it to contain %q", r, tt.reason)
				}
			}
			if !res.NextWake.Equal(tt.wake) {
				t.Errorf("next wake = %v, want %v", res.NextWake, tt.wake)
			}
			var unsched []string
			for _, u := range res.Unschedulable {
				unsched = append(unsched, u.Job+": "+u.Reason)
			}
			if len(unsched) != len(tt.unsched) {
				t.Fatalf("unschedulable = %q, want %q", unsched, tt.unsched)
			}
			for i := range unsched {
				if !strings.HasPrefix(unsched[i], tt.unsched[i]) {
					t.Errorf("unschedulable[%d] = %q, want prefix %q", i, unsched[i], tt.unsched[i])
				}
			}
			var warning string
			if len(res.Warnings) > 0 {
				warning = res.Warnings[0].Message
			}
			if warning != tt.warning {
				t.Errorf("warning = %q, want %q", warning, tt.warning)
			}
		})
	}
}

func TestPlanNextWakeAcrossComputes(t *testing.T) {
	a := cluster(0, 4, nodes("a", api.NodeIdle, 1, 100*time.Second), nil)
	b := cluster(0, 4, nodes("b", api.NodeIdle, 1, 110*time.Second), nil)
	b.Key = "b"
	res := Plan(Snapshot{Computes: []Compute{a, b}}, t0, BuiltinPolicies())
	if want := t0.Add(10 * time.Second); !res.NextWake.Equal(want) {
		t.Fatalf("next wake = %v, want %v (b's timer)", res.NextWake, want)
	}
}

// randomCompute builds a random compute with nodes and queued demand around t0.
func randomCompute(r *rand.Rand, key string) Compute {
	maxN := 1 + r.IntN(10)
	c := Compute{
		Key:           key,
		Min:           r.IntN(maxN + 1),
		Max:           maxN,
		QuotaMaxNodes: maxN,
		IdleTimeout:   time.Duration(r.IntN(4)) * 30 * time.Second,
	}
	if r.IntN(4) == 0 {
		c.QuotaMaxNodes = r.IntN(maxN + 1)
	}
	states := []string{api.NodeIdle, api.NodeIdle, api.NodeRunning, api.NodePreparing, api.NodeLeaving,
		api.NodeUnusable, api.NodePreempted}
	for i := range r.IntN(14) { // sometimes more than max: max was lowered
		n := Node{ID: fmt.Sprintf("%s-%d", key, i), State: states[r.IntN(len(states))],
			IdleSince: t0.Add(-time.Duration(r.IntN(200)) * time.Second)}
		if n.State == api.NodeRunning || (n.State == api.NodeIdle && r.IntN(8) == 0) {
			n.Job = "j-" + n.ID
		}
		c.Nodes = append(c.Nodes, n)
	}
	for i := range r.IntN(8) {
		c.Queued = append(c.Queued, Demand{Job: fmt.Sprintf("%s-q%d", key, i), Instances: []int{0, 1, 1, 1, 2, 4, 8, 16}[r.IntN(8)]})
	}
	if r.IntN(3) == 0 {
		// The adaptive policy with a random recent history: its warm
		// nodes and timeouts must keep every invariant too.
		c.Policy, c.Gaps = AdaptivePolicy, NewGapHistory()
		at := t0.Add(-time.Hour)
		for range r.IntN(400) {
			at = at.Add(time.Duration(r.IntN(40)) * time.Second)
			if r.IntN(2) == 0 {
				c.Gaps.NodeIdle(at)
			} else {
				c.Gaps.Demand(at, 1+r.IntN(4))
			}
		}
	}
	return c
}

// TestPlanProperties checks Plan's invariants on thousands of random
// snapshots: targets within [min, cap], creates never beyond the cap,
// deletes never a busy or booting node nor below min, the surplus shed only
// when its timer expired or above the cap, and every impossible job reported.
func TestPlanProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 5000 {
		var s Snapshot
		for c := range 1 + r.IntN(3) {
			s.Computes = append(s.Computes, randomCompute(r, fmt.Sprintf("c%d", c)))
		}
		res := Plan(s, t0, BuiltinPolicies())
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d: %s\nsnapshot %+v\nresult %+v", iter, fmt.Sprintf(format, args...), s, res)
		}
		if !res.NextWake.IsZero() && !res.NextWake.After(t0) {
			fail("next wake %v not after now", res.NextWake)
		}
		for _, c := range s.Computes {
			limit := c.Cap()
			target := res.Targets[c.Key]
			if target > limit || target < min(c.Min, limit) {
				fail("%s: target %d outside [min %d, cap %d]", c.Key, target, c.Min, limit)
			}
			byID := map[string]Node{}
			var existing, busy, queued int
			for _, n := range c.Nodes {
				byID[n.ID] = n
				switch {
				case n.State == api.NodeLeaving || n.State == api.NodeUnusable || n.State == api.NodePreempted:
				default:
					existing++
					if n.Job != "" || n.State == api.NodeRunning {
						busy++
					}
				}
			}
			var impossible int
			for _, q := range c.Queued {
				if max(q.Instances, 1) > limit {
					impossible++
				} else {
					queued += max(q.Instances, 1)
				}
			}
			created, deletedIdle := 0, 0
			deleted := map[string]bool{}
			for _, a := range res.Actions {
				if a.Compute != c.Key {
					continue
				}
				switch a.Kind {
				case ActionCreate:
					if a.Count <= 0 {
						fail("%s: create %d", c.Key, a.Count)
					}
					created += a.Count
				case ActionDelete:
					n, ok := byID[a.Node]
					if !ok || deleted[a.Node] {
						fail("%s: delete of unknown or already deleted node %s", c.Key, a.Node)
					}
					deleted[a.Node] = true
					switch {
					case n.State == api.NodeUnusable || n.State == api.NodePreempted:
					case n.State != api.NodeIdle || n.Job != "":
						fail("%s: deleted node %+v, which is busy, booting or leaving", c.Key, n)
					default:
						deletedIdle++
						// The policy's timeout: the adaptive policy's learned
						// one may be shorter than the compute's.
						timeout := BuiltinPolicies()[cmp.Or(c.Policy, DefaultPolicy)].Decide(&c, t0).IdleTimeout
						if existing <= limit && t0.Sub(n.IdleSince) < timeout {
							fail("%s: deleted node %s idle only %v < %v", c.Key, n.ID, t0.Sub(n.IdleSince), timeout)
						}
					}
				}
			}
			after := existing + created - deletedIdle
			if created > 0 && after > limit {
				fail("%s: %d nodes after creating %d, above cap %d", c.Key, after, created, limit)
			}
			if after > max(limit, existing) {
				fail("%s: %d nodes after actions, above cap %d", c.Key, after, limit)
			}
			if deletedIdle > 0 && after < c.Min {
				fail("%s: %d nodes after deleting, below min %d", c.Key, after, c.Min)
			}
			if after < min(c.Min, limit) {
				fail("%s: %d nodes after actions, below min %d", c.Key, after, c.Min)
			}
			idleCount := 0
			for _, n := range c.Nodes {
				if n.State == api.NodeIdle && n.Job == "" {
					idleCount++
				}
			}
			if existing <= limit && deletedIdle > 0 && idleCount-deletedIdle < min(idleCount, queued) {
				fail("%s: deleted %d of %d idle nodes while %d queued nodes could use them", c.Key, deletedIdle, idleCount, queued)
			}
			if after < min(limit, busy+queued) {
				fail("%s: %d nodes after actions, fewer than the %d busy + %d queued need", c.Key, after, busy, queued)
			}
			var reported int
			for _, u := range res.Unschedulable {
				if u.Compute == c.Key {
					reported++
				}
			}
			if reported != impossible {
				fail("%s: %d unschedulable reported, %d jobs exceed cap %d", c.Key, reported, impossible, limit)
			}
		}
	}
}
