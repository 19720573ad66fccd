package controller

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/scheduler"
)

// TestDecideListsOnlyWhatItActsOn checks that a turn's inputs to the pure
// decisions, which list only some nodes, decide as every node listed
// would, over random computes: Place given only the free nodes places as
// given all of them, and Plan given autoscalerNodes' listed and counted
// nodes plans as given every node (the nodes just assigned as running).
func TestDecideListsOnlyWhatItActsOn(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	states := []string{api.NodeIdle, api.NodeIdle, api.NodeIdle, api.NodeRunning, api.NodePreparing, api.NodeUnusable,
		api.NodeLeaving, api.NodePreempted, "mystery"}
	policies := autoscaler.BuiltinPolicies()
	for round := range 300 {
		var list []api.Node
		var all []scheduler.Node
		q := scheduler.NewQueue()
		caps := map[string]int{}
		var keys []string
		for c := range 1 + r.IntN(3) {
			k := fmt.Sprintf("ws/c%d", c)
			keys, caps[k] = append(keys, k), 1+r.IntN(12)
			for i := range r.IntN(12) {
				n := api.Node{ID: fmt.Sprintf("c%d-n%02d", c, i), Workspace: "ws", Compute: fmt.Sprintf("c%d", c),
					State: states[r.IntN(len(states))], StateSince: now.Add(-time.Duration(r.IntN(1200)) * time.Second)}
				if r.IntN(3) == 0 {
					n.Job = fmt.Sprintf("ws/j%d/1", r.IntN(100))
				}
				list = append(list, n)
				all = append(all, scheduler.Node{ID: n.ID, Compute: k, State: n.State, Job: n.Job})
			}
			for j := range r.IntN(8) {
				q.Add(scheduler.Job{Key: fmt.Sprintf("ws/%s-q%d", k[3:], j), Compute: k, Instances: 1 + r.IntN(3), Seq: int64(j)})
			}
		}
		var freeNodes []scheduler.Node
		for i, n := range all {
			if free(&list[i]) {
				freeNodes = append(freeNodes, n)
			}
		}
		placed, rests := q.Place(all, caps)
		placedFree, restsFree := q.Place(freeNodes, caps)
		if !reflect.DeepEqual(placed.Assignments, placedFree.Assignments) || !reflect.DeepEqual(placed.Waiting, placedFree.Waiting) ||
			!reflect.DeepEqual(rests, restsFree) {
			t.Fatalf("round %d: Place given the free nodes differs from Place given every node", round)
		}
		busy := map[string]string{}
		for _, a := range placed.Assignments {
			for _, n := range a.Nodes {
				busy[n] = a.Job
			}
		}
		every, some := autoscaler.Snapshot{}, autoscaler.Snapshot{}
		for ci, k := range keys {
			base := autoscaler.Compute{Key: k, Min: r.IntN(3), Max: caps[k], QuotaMaxNodes: caps[k], IdleTimeout: 600 * time.Second,
				Policy: []string{"", "fixed", "adaptive"}[r.IntN(3)], MaxStarting: r.IntN(4)}
			if r.IntN(2) == 0 {
				base.Queued = []autoscaler.Demand{{Instances: 1 + r.IntN(3), Jobs: 1 + r.IntN(5)}}
			}
			var at []int
			full := base
			for i := range list {
				if list[i].Compute != fmt.Sprintf("c%d", ci) {
					continue
				}
				at = append(at, i)
				n := list[i]
				an := autoscaler.Node{ID: n.ID, State: n.State, Job: n.Job, IdleSince: n.StateSince}
				if job, ok := busy[n.ID]; ok {
					an.Job, an.State = job, api.NodeRunning
				}
				full.Nodes = append(full.Nodes, an)
			}
			listed := base
			listed.Nodes, listed.Counted = autoscalerNodes(list, at, busy)
			every.Computes, some.Computes = append(every.Computes, full), append(some.Computes, listed)
		}
		want, got := autoscaler.Plan(every, now, policies), autoscaler.Plan(some, now, policies)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: Plan given autoscalerNodes' nodes\n%+v\nwant (every node listed)\n%+v", round, got, want)
		}
	}
}
