package controller

import (
	"context"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// nodeFeed keeps every node decoded between turns and brings them up to
// date from the store's node feed (store.Tx.ChangedNodes), so that a turn
// reads the nodes written since the last one, not all of them: at 10,000
// nodes listing and decoding every node, twice a turn, was most of the
// turn. Heartbeats are no writes here (store.Tx.PutNodeBeat), so the kept
// nodes' heartbeat fields (LastHeartbeat, Utilization, JobUsage, Cache) are
// those of their last write: liveness reads the heartbeat times from the
// store (NodesSeenBefore) and samples read the nodes whole.
type nodeFeed struct {
	cursor string         // "": read them all
	list   []api.Node     // by id
	index  map[string]int // id -> place in list
}

// read returns every node, by id, in tx.
func (f *nodeFeed) read(ctx context.Context, tx store.Tx) ([]api.Node, error) {
	if f.cursor != "" {
		changed, total, cursor, err := tx.ChangedNodes(ctx, f.cursor)
		if err != nil {
			return nil, err
		}
		var added []api.Node
		for _, n := range changed {
			if i, ok := f.index[n.ID]; ok {
				f.list[i] = n
			} else {
				added = append(added, n)
			}
		}
		// Every stored node is kept or just listed, so the kept ones are
		// as many as the stored ones unless one was deleted.
		if len(f.list)+len(added) == total {
			if len(added) > 0 {
				f.set(append(f.list, added...))
			}
			f.cursor = cursor
			return slices.Clone(f.list), nil
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
	return slices.Clone(f.list), nil
}

func (f *nodeFeed) set(nodes []api.Node) {
	slices.SortFunc(nodes, func(a, b api.Node) int { return strings.Compare(a.ID, b.ID) })
	f.list, f.index = nodes, make(map[string]int, len(nodes))
	for i, n := range nodes {
		f.index[n.ID] = i
	}
}
