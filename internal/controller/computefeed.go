package controller

import (
	"cmp"
	"context"
	"slices"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// computeFeed keeps every compute decoded between turns and brings them up
// to date from the store's compute feed (store.Tx.ChangedComputes), as
// nodeFeed does the nodes: a turn decodes the computes written since the
// last one, not all of them. (At 200 computes, listing and decoding every
// compute was half of a turn in which nothing changed, and a turn that
// wrote listed them twice.)
type computeFeed struct {
	cursor string        // "": read them all
	list   []api.Compute // by name, then workspace (bytewise)
	index  map[string]int
}

// read brings the computes up to date in tx and returns them. The slice is
// the feed's own, valid until the next read: callers do not change it.
func (f *computeFeed) read(ctx context.Context, tx store.Tx) ([]api.Compute, error) {
	if f.cursor != "" {
		changed, total, cursor, err := tx.ChangedComputes(ctx, f.cursor)
		if err != nil {
			return nil, err
		}
		var fresh []api.Compute
		for _, cp := range changed {
			if _, ok := f.index[key(cp.Workspace, cp.Name)]; !ok {
				fresh = append(fresh, cp)
			}
		}
		// Every stored compute is kept or just listed, so the kept ones
		// are as many as the stored ones unless one was deleted.
		if len(f.list)+len(fresh) == total {
			// A new slice when any changed: the last turn's snapshot
			// keeps what it read.
			if len(changed) > 0 {
				f.list = slices.Clone(f.list)
			}
			for _, cp := range changed {
				if i, ok := f.index[key(cp.Workspace, cp.Name)]; ok {
					f.list[i] = cp
				}
			}
			if len(fresh) > 0 {
				f.set(append(f.list, fresh...))
			}
			f.cursor = cursor
			return f.list, nil
		}
	}
	cursor, err := tx.ComputeCursor(ctx)
	if err != nil {
		return nil, err
	}
	list, err := tx.ListComputes(ctx, "")
	if err != nil {
		return nil, err
	}
	f.set(list)
	f.cursor = cursor
	return f.list, nil
}

// set makes list the kept computes, by name then workspace (ListComputes'
// order, bytewise: the same whatever the database's collation).
func (f *computeFeed) set(list []api.Compute) {
	slices.SortFunc(list, func(a, b api.Compute) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Workspace, b.Workspace))
	})
	f.list, f.index = list, make(map[string]int, len(list))
	for i, cp := range list {
		f.index[key(cp.Workspace, cp.Name)] = i
	}
}
