// Package autoscaler decides how many nodes each compute cluster needs and
// which nodes leave, the way Azure ML compute clusters scale between
// min_instances and max_instances.
//
// Plan is a pure function: it does no I/O, never reads the clock (now is an
// argument) and returns the same Result for the same input. The controller
// calls scheduler.Place first, marks the nodes Place assigned as busy, passes
// the jobs still waiting as Compute.Queued, calls Plan and applies its
// actions. Plan returns NextWake so the controller can arm a timer for the
// next idle-timer expiry instead of polling.
//
// The rules, per compute:
//
//   - Cap is the most nodes the compute may have: the lower of max_instances
//     and the quota cap (QuotaMaxNodes).
//   - A node counts as existing when it is preparing, idle or running (or in
//     a state Plan does not know); leaving nodes are already going and are
//     not counted; unusable and preempted nodes are deleted at once and not
//     counted, so they are replaced when the demand still needs them.
//   - A node is busy when it runs a job (Job set, or state running).
//   - Queued demand is the sum of the instance counts of the queued jobs
//     that fit the cap. A job whose instance_count exceeds the cap can never
//     run: it adds no demand and is reported in Result.Unschedulable with a
//     reason naming max_instances or the quota.
//   - target = min(cap, max(min_instances, busy + queued demand + warm)),
//     where warm comes from the compute's policy (0 for fixed).
//   - Scale up: create target - existing nodes. Preparing nodes exist, so
//     nodes that are still booting are never created twice.
//   - Scale down: only idle nodes without a job leave, longest idle first,
//     and only the surplus existing - target of them (so queued demand keeps
//     the nodes it can use), never taking the compute below min_instances,
//     and never the idle nodes queued demand holds (up to queued demand of
//     them stay, even when booting nodes make the surplus; over the cap
//     excepted).
//     An idle node leaves when now - IdleSince >= the policy's idle timeout
//     (the edge is inclusive, as Azure's "idle for 120s" means 120s), except
//     when the compute has more nodes than its cap (max_instances was
//     lowered or quota shrank): then idle nodes above the cap leave at once.
//     Preparing nodes are never deleted: they become idle and time out.
//
// Policies register by name in a Registry; "fixed" is Azure ML's behaviour.
// A policy may only choose the idle timeout and the warm count, so the
// invariants above (never above cap when creating, never below min when
// deleting, never a busy node) hold for every policy.
package autoscaler

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tideml/tide/api"
)

// Snapshot is the state Plan decides from.
type Snapshot struct {
	// Computes are the compute clusters to plan, in any order.
	Computes []Compute
}

// Compute is one compute cluster with its nodes and queued demand.
type Compute struct {
	// Key identifies the compute (for example workspace/name).
	Key string
	// Min is min_instances: nodes kept even when idle.
	Min int
	// Max is max_instances.
	Max int
	// QuotaMaxNodes is the most nodes the compute's reserved quota allows
	// (usually equal to Max). It must be set: zero means the quota allows no
	// node at all.
	QuotaMaxNodes int
	// IdleTimeout is idle_time_before_scale_down.
	IdleTimeout time.Duration
	// Policy names the autoscale policy; empty means DefaultPolicy.
	Policy string
	// MaxStarting caps the nodes preparing at once (like Slurm's
	// ResumeRate or Ray's upscaling_speed); 0 means no cap.
	MaxStarting int
	// Nodes are the compute's nodes in any state, with the assignments of
	// the preceding scheduler.Place already applied (Job set).
	Nodes []Node
	// Queued are the compute's jobs still queued after scheduler.Place.
	Queued []Demand
	// Counted are nodes that exist but are not listed in Nodes, only
	// counted. The controller and the simulator track thousands of nodes
	// and would spend their time building them for every call, so they
	// list only the nodes Plan may act on one by one (the controller every
	// idle node, the simulator only the idle nodes that can leave) and
	// count the busy and preparing ones. Plan's result is the same as when every node is
	// listed provided the idle nodes left out are idle more recently than
	// every listed idle node and the longest-idle listed node that may not
	// leave yet is listed.
	Counted NodeCounts
	// Gaps is the compute's recent history of idle gaps, for policies that
	// learn from it (adaptive); nil when the caller keeps none.
	Gaps *GapHistory
}

// NodeCounts counts nodes by what Plan needs to know of them.
type NodeCounts struct {
	// Busy nodes run a job.
	Busy int
	// Preparing nodes are booting.
	Preparing int
	// Idle nodes run no job and were idle more recently than every listed
	// idle node.
	Idle int
}

// Cap returns the most nodes the compute may have: the lower of Max and
// QuotaMaxNodes, never negative. The controller passes it to
// scheduler.Place as the compute's maxNodes.
func (c *Compute) Cap() int {
	return max(0, min(c.Max, c.QuotaMaxNodes))
}

// Node is a node of a compute as the autoscaler sees it.
type Node struct {
	// ID identifies the node.
	ID string
	// State is one of the api.Node* constants.
	State string
	// Job is the key of the job the node runs; empty when none.
	Job string
	// IdleSince is when the node last became idle; it must be set for idle
	// nodes (a zero time counts as idle since forever).
	IdleSince time.Time
}

// Demand is one queued job's need for nodes.
type Demand struct {
	// Job is the job's key.
	Job string
	// Instances is the job's instance_count; values below 1 count as 1.
	Instances int
	// Jobs is how many queued jobs of Instances nodes each this demand
	// stands for; 0 means one, the job named Job. Callers that keep their
	// queue counted by size (scheduler.Queue.Demand) pass one Demand per
	// size instead of one per job; Plan only adds them up. A counted
	// demand that exceeds the cap adds nothing and, naming no job, is not
	// reported in Result.Unschedulable: list such jobs one by one.
	Jobs int
}

// ActionKind is what an Action does.
type ActionKind string

// Action kinds.
const (
	// ActionCreate asks the provider for Count new nodes of Compute.
	ActionCreate ActionKind = "create"
	// ActionDelete removes node Node of Compute.
	ActionDelete ActionKind = "delete"
)

// Action is one change Plan asks the controller to make.
type Action struct {
	// Kind is create or delete.
	Kind ActionKind
	// Compute is the compute's key.
	Compute string
	// Node is the node to delete (delete only).
	Node string
	// Count is the number of nodes to create (create only).
	Count int
	// Reason explains the action in words a user reads in the compute's
	// events, for example "idle for 125s >= idle_time_before_scale_down 120s".
	Reason string
}

// Unschedulable is a queued job that can never run on its compute as it is
// configured.
type Unschedulable struct {
	// Compute is the compute's key.
	Compute string
	// Job is the job's key.
	Job string
	// Instances is the job's instance_count.
	Instances int
	// Cap is the most nodes the compute may have.
	Cap int
	// Reason says why and what to change.
	Reason string
}

// Warning is a problem Plan worked around, to be logged or shown.
type Warning struct {
	// Compute is the compute's key.
	Compute string
	// Message describes the problem.
	Message string
}

// Result is what Plan decided.
type Result struct {
	// Actions are the creates and deletes, grouped by compute in snapshot
	// order; per compute deletes of unusable and preempted nodes come first
	// (in node order), then the create, then idle deletes (longest idle
	// first).
	Actions []Action
	// Targets is the target node count per compute key
	// (target_node_count in the compute's status).
	Targets map[string]int
	// NextWake is the earliest time an idle node's timer expires while the
	// compute still has nodes to shed, or a policy asked to be asked again
	// (Decision.Wake: the adaptive policy before a predicted burst); Plan
	// should be called again then. Zero when no timer is pending.
	NextWake time.Time
	// Unschedulable are the queued jobs that need more nodes than their
	// compute may ever have.
	Unschedulable []Unschedulable
	// Warnings are problems Plan worked around (an unknown policy name).
	Warnings []Warning
}

// Plan decides the node actions for every compute of s at now, using the
// policies in policies (a compute whose policy is missing from it uses
// Fixed, with a warning unless it asked for DefaultPolicy). Plan reads but
// never modifies s.
func Plan(s Snapshot, now time.Time, policies Registry) Result {
	res := Result{Targets: make(map[string]int, len(s.Computes))}
	for i := range s.Computes {
		planCompute(&s.Computes[i], now, policies, &res)
	}
	return res
}

// planCompute appends the decisions for one compute to res.
func planCompute(c *Compute, now time.Time, policies Registry, res *Result) {
	name := cmp.Or(c.Policy, DefaultPolicy)
	pol, ok := policies[name]
	if !ok {
		if name != DefaultPolicy {
			res.Warnings = append(res.Warnings, Warning{Compute: c.Key,
				Message: fmt.Sprintf("policy %q: unknown autoscale policy; using %q", name, DefaultPolicy)})
		}
		pol = Fixed{}
	}
	d := pol.Decide(c, now)
	d.Warm = max(d.Warm, 0)
	d.IdleTimeout = max(d.IdleTimeout, 0)
	d.Setting = cmp.Or(d.Setting, "idle timeout")
	if d.Wake.After(now) && (res.NextWake.IsZero() || d.Wake.Before(res.NextWake)) {
		res.NextWake = d.Wake
	}
	limit := c.Cap()

	var existing, busy, preparing int
	var idle []int // indexes into c.Nodes of idle nodes without a job
	for i := range c.Nodes {
		n := &c.Nodes[i]
		switch {
		case n.State == api.NodeLeaving:
		case n.State == api.NodePreempted && n.Job != "":
			// Its job is stopping within the eviction's grace period (and
			// saving its checkpoint); the controller removes the node after.
			// It does not count: a replacement may start at once.
		case n.State == api.NodeUnusable || n.State == api.NodePreempted:
			res.Actions = append(res.Actions, Action{Kind: ActionDelete, Compute: c.Key, Node: n.ID,
				Reason: fmt.Sprintf("node is %s; removing it so it can be replaced", n.State)})
		case n.Job != "" || n.State == api.NodeRunning:
			existing++
			busy++
		case n.State == api.NodeIdle:
			existing++
			idle = append(idle, i)
		case n.State == api.NodePreparing:
			existing++
			preparing++
		default:
			// An unknown state: count it so nothing is created twice, and
			// never delete it.
			existing++
		}
	}

	existing += c.Counted.Busy + c.Counted.Preparing + c.Counted.Idle
	busy += c.Counted.Busy
	preparing += c.Counted.Preparing

	var queued, queuedJobs int
	for _, q := range c.Queued {
		need := max(q.Instances, 1)
		if need > limit {
			if q.Jobs <= 1 {
				res.Unschedulable = append(res.Unschedulable, unschedulable(c, q.Job, need, limit))
			}
			continue
		}
		jobs := max(q.Jobs, 1)
		queued += need * jobs
		queuedJobs += jobs
	}

	target := min(limit, max(c.Min, busy+queued+d.Warm))
	res.Targets[c.Key] = target

	if target > existing {
		count := target - existing
		if c.MaxStarting > 0 {
			// The rest start as these register; Plan runs again then.
			count = min(count, c.MaxStarting-preparing)
		}
		if count > 0 {
			res.Actions = append(res.Actions, Action{Kind: ActionCreate, Compute: c.Key, Count: count,
				Reason: createReason(target, busy, queuedJobs, queued, d.Warm, c.Min, limit, existing, preparing)})
		}
		return
	}

	// Deletions: only surplus idle nodes, never below min_instances. Idle
	// nodes while jobs are queued are held for them (a gang at the head
	// holds the free nodes until it has enough), so up to the queued
	// demand of them stay even when preparing nodes make a surplus: those
	// are not ready yet, and deleting the ready ones made a waiting gang
	// wait for boots again (Philly, adaptive: 7 gangs past the boot time,
	// up to 200 s). A surplus left over goes once those boot and idle.
	overCap := existing - limit
	idleNow := len(idle) + c.Counted.Idle
	shed := min(existing-target, existing-c.Min, max(overCap, idleNow-queued))
	if shed <= 0 || len(idle) == 0 {
		return
	}
	slices.SortFunc(idle, func(a, b int) int {
		x, y := &c.Nodes[a], &c.Nodes[b]
		return cmp.Or(x.IdleSince.Compare(y.IdleSince), cmp.Compare(x.ID, y.ID))
	})
	deleted := 0
	for _, i := range idle {
		n := &c.Nodes[i]
		if deleted == shed {
			return
		}
		elapsed := now.Sub(n.IdleSince)
		switch {
		case deleted < overCap:
			res.Actions = append(res.Actions, Action{Kind: ActionDelete, Compute: c.Key, Node: n.ID,
				Reason: fmt.Sprintf("compute has %d nodes, more than its cap of %d (max_instances %d, quota %d nodes)",
					existing, limit, c.Max, c.QuotaMaxNodes)})
		case elapsed >= d.IdleTimeout:
			res.Actions = append(res.Actions, Action{Kind: ActionDelete, Compute: c.Key, Node: n.ID,
				Reason: "idle for " + seconds(elapsed, d.IdleTimeout) + " >= " + d.Setting + " " + seconds(d.IdleTimeout, d.IdleTimeout)})
		default:
			// Longest idle first: this node's timer is the next to expire
			// for this compute.
			wake := n.IdleSince.Add(d.IdleTimeout)
			if res.NextWake.IsZero() || wake.Before(res.NextWake) {
				res.NextWake = wake
			}
			return
		}
		deleted++
	}
}

// unschedulable explains why a job of need nodes can never run on c.
func unschedulable(c *Compute, job string, need, limit int) Unschedulable {
	u := Unschedulable{Compute: c.Key, Job: job, Instances: need, Cap: limit}
	if need > c.Max {
		u.Reason = fmt.Sprintf("instance_count %d > max_instances %d of compute %s; raise max_instances or lower instance_count",
			need, c.Max, c.Key)
	} else {
		u.Reason = fmt.Sprintf("instance_count %d > %d nodes the quota of compute %s allows; request more quota or lower instance_count",
			need, limit, c.Key)
	}
	return u
}

// seconds formats d in whole seconds ("125s") when unit is a whole number
// of seconds, as Azure states idle_time_before_scale_down; otherwise as a
// Go duration.
func seconds(d, unit time.Duration) string {
	if unit%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// createReason explains a scale-up. It is built with strconv rather than
// fmt because the simulator plans hundreds of thousands of times per replay
// and formatting was half of Plan's time; the text is the same.
func createReason(target, busy, queuedJobs, queued, warm, minN, limit, existing, preparing int) string {
	labels := [...]string{"scaling to ", " nodes: ", " busy, ", " queued jobs need ", ", ", " warm, min_instances ", ", cap ", "; have ", " ("}
	values := [...]int{target, busy, queuedJobs, queued, warm, minN, limit, existing, preparing}
	b := make([]byte, 0, 128)
	for i, l := range labels {
		b = strconv.AppendInt(append(b, l...), int64(values[i]), 10)
	}
	return string(append(b, " preparing)"...))
}
