package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// nodeFeed keeps every node decoded between turns and brings them up to
// date from the store's node feed (store.Tx.ChangedNodes), so that a turn
// reads the nodes written since the last one, not all of them: at 10,000
// nodes listing and decoding every node, twice a turn, was most of the
// turn. Heartbeats are no writes here (store.Tx.PutNodeBeats), so the kept
// nodes' heartbeat fields (LastHeartbeat, Utilization, JobUsage, Cache) are
// those of their last write: liveness reads the heartbeat times from the
// store (NodesSeenBefore) and samples have the store sum the nodes'
// utilization (ComputeUtilizations).
//
// It also keeps, per compute, what a turn needs of the compute's nodes
// (computeNodes: counts by state, the starting nodes, how long nodes took
// to start), brought up to date by the same changes, so that a turn does
// not walk every node to count them.
type nodeFeed struct {
	cursor   string                   // "": read them all
	list     []api.Node               // by id
	index    map[string]int           // id -> place in list
	computes map[string]*computeNodes // by compute key
	stale    []*computeNodes          // to refresh at the end of read
	// moved are the jobs (workspace, name) whose nodes changed since the
	// last takeMoved (a node that ran them); allMoved says that every job
	// may have (the nodes were read whole).
	moved    map[[2]string]bool
	allMoved bool
	// written are the ids of the nodes written since the last takeWritten;
	// allWritten says that every node may have been (the nodes were read
	// whole).
	written    map[string]bool
	allWritten bool
}

// takeWritten returns the ids of the nodes written since the last call
// (every node: all) and starts again.
func (f *nodeFeed) takeWritten() (written map[string]bool, all bool) {
	written, all = f.written, f.allWritten
	f.written, f.allWritten = nil, false
	return written, all
}

// takeMoved returns the jobs whose nodes changed since the last call
// (every job: all) and starts again.
func (f *nodeFeed) takeMoved() (moved map[[2]string]bool, all bool) {
	moved, all = f.moved, f.allMoved
	f.moved, f.allMoved = nil, false
	return moved, all
}

// jobMoved notes that a node of the job of assignment id changed.
func (f *nodeFeed) jobMoved(id string) {
	ws, rest, ok := strings.Cut(id, "/")
	if !ok {
		return
	}
	name, _, _ := strings.Cut(rest, "/")
	if f.moved == nil {
		f.moved = map[[2]string]bool{}
	}
	f.moved[[2]string{ws, name}] = true
}

// computeNodes is what a turn needs of one compute's nodes.
type computeNodes struct {
	at      []int // their places in list, in id order
	counts  api.NodeStateCounts
	current int // nodes in any state
	// existing are the nodes that count against max_instances:
	// preparing, idle and running.
	existing int
	// The starting (preparing) nodes: how many, the oldest's and the
	// newest's creation, and the first by id that has an error (what the
	// provider says it waits for; "" when none has).
	starting                    int
	startingSince, startingLast time.Time
	startingWhy, startingError  string
	// startTime is the median time the registered nodes took from
	// creation to registration (0: none registered).
	startTime time.Duration
	stale     bool // startingX and startTime need working out again
}

// count adds (d = 1) or takes away (d = -1) node n's share of the counts:
// current_node_count and node_state_counts as Azure ML reports them (every
// node that still exists counts, leaving ones included, by its State).
func (cn *computeNodes) count(n *api.Node, d int) {
	cn.current += d
	switch n.State {
	case api.NodeIdle:
		cn.counts.Idle += d
		cn.existing += d
	case api.NodeRunning:
		cn.counts.Running += d
		cn.existing += d
	case api.NodePreparing:
		cn.counts.Preparing += d
		cn.existing += d
		cn.starting += d
	case api.NodeUnusable:
		cn.counts.Unusable += d
	case api.NodeLeaving:
		cn.counts.Leaving += d
	case api.NodePreempted:
		cn.counts.Preempted += d
	}
}

// refresh works out the starting nodes' figures and the start time from
// the compute's nodes in list.
func (cn *computeNodes) refresh(list []api.Node) {
	cn.startingSince, cn.startingLast, cn.startingWhy, cn.startingError = time.Time{}, time.Time{}, "", ""
	var took []time.Duration
	for _, i := range cn.at {
		n := &list[i]
		if n.State == api.NodePreparing {
			if n.Error != "" && cn.startingWhy == "" { // at is in id order
				cn.startingWhy, cn.startingError = n.ID, n.Error
			}
			if cn.startingSince.IsZero() || n.CreatedOn.Before(cn.startingSince) {
				cn.startingSince = n.CreatedOn
			}
			if n.CreatedOn.After(cn.startingLast) {
				cn.startingLast = n.CreatedOn
			}
		}
		if !n.RegisteredOn.IsZero() && !n.CreatedOn.IsZero() && n.RegisteredOn.After(n.CreatedOn) {
			took = append(took, n.RegisteredOn.Sub(n.CreatedOn))
		}
	}
	cn.startTime = 0
	if len(took) > 0 {
		slices.Sort(took)
		cn.startTime = took[len(took)/2]
	}
	cn.stale = false
}

// read brings the nodes up to date in tx and returns them, by id. The
// slice is the feed's own, valid until the next read: callers do not
// change it.
func (f *nodeFeed) read(ctx context.Context, tx store.Tx) ([]api.Node, error) {
	if f.cursor != "" {
		changed, total, cursor, err := tx.ChangedNodes(ctx, f.cursor)
		if err != nil {
			return nil, err
		}
		added, moved := 0, false
		for _, n := range changed {
			i, ok := f.index[n.ID]
			switch {
			case !ok:
				added++
			case n.Workspace != f.list[i].Workspace || n.Compute != f.list[i].Compute:
				moved = true
			}
		}
		// Every stored node is kept or just listed, so the kept ones are
		// as many as the stored ones unless one was deleted.
		if len(f.list)+added == total && !moved {
			var fresh []api.Node
			for _, n := range changed {
				if f.written == nil {
					f.written = map[string]bool{}
				}
				f.written[n.ID] = true
				if i, ok := f.index[n.ID]; ok {
					f.update(i, n)
				} else {
					fresh = append(fresh, n)
				}
			}
			if len(fresh) > 0 {
				f.set(append(f.list, fresh...))
			}
			for _, cn := range f.stale {
				if cn.stale {
					cn.refresh(f.list)
				}
			}
			f.stale = f.stale[:0]
			f.cursor = cursor
			return f.list, nil
		}
	}
	cursor, err := tx.NodeCursor(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := tx.ListNodes(ctx, "", "")
	if err != nil {
		return nil, err
	}
	f.set(nodes)
	f.cursor = cursor
	return f.list, nil
}

// update replaces the node at list[i] with n, of the same compute.
func (f *nodeFeed) update(i int, n api.Node) {
	old := &f.list[i]
	cn := f.computes[key(n.Workspace, n.Compute)]
	cn.count(old, -1)
	if !cn.stale && (old.State == api.NodePreparing || n.State == api.NodePreparing ||
		!old.RegisteredOn.Equal(n.RegisteredOn) || !old.CreatedOn.Equal(n.CreatedOn)) {
		cn.stale = true
		f.stale = append(f.stale, cn)
	}
	if old.Job != "" {
		// Only a node that ran a job can end it by changing: its job
		// goes, or it becomes unusable.
		f.jobMoved(old.Job)
	}
	f.list[i] = n
	cn.count(&f.list[i], 1)
}

// set makes nodes the kept ones and works out every compute's figures.
func (f *nodeFeed) set(nodes []api.Node) {
	slices.SortFunc(nodes, func(a, b api.Node) int { return strings.Compare(a.ID, b.ID) })
	f.list, f.index, f.computes, f.stale = nodes, make(map[string]int, len(nodes)), map[string]*computeNodes{}, nil
	f.moved, f.allMoved = nil, true
	f.written, f.allWritten = nil, true
	for i := range nodes {
		n := &nodes[i]
		f.index[n.ID] = i
		k := key(n.Workspace, n.Compute)
		cn := f.computes[k]
		if cn == nil {
			cn = &computeNodes{}
			f.computes[k] = cn
		}
		cn.at = append(cn.at, i)
		cn.count(n, 1)
	}
	for _, cn := range f.computes {
		cn.refresh(nodes)
	}
}

// node returns the kept node with id (nil: none).
func (f *nodeFeed) node(id string) *api.Node {
	if i, ok := f.index[id]; ok {
		return &f.list[i]
	}
	return nil
}

// of returns compute k's figures (zero when it has no node).
func (f *nodeFeed) of(k string) *computeNodes {
	if cn := f.computes[k]; cn != nil {
		return cn
	}
	return &computeNodes{}
}
