package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// listCounter counts a transaction's ListComputes calls: the full reads.
type listCounter struct {
	store.Tx
	n *int
}

func (l listCounter) ListComputes(ctx context.Context, ws string) ([]api.Compute, error) {
	*l.n++
	return l.Tx.ListComputes(ctx, ws)
}

// TestComputeFeedFollowsChanges checks that the computes the controller
// keeps between turns (computeFeed) equal a fresh read after random writes:
// new computes, changed ones, deleted ones and ones deleted and made again,
// over two workspaces; that a read after writes without a deletion lists
// only the changes (no full read); and that a turn's computes do not change
// under it when the next turn reads.
func TestComputeFeedFollowsChanges(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	r := rand.New(rand.NewPCG(3, 4))
	mustUpdate(t, st, func(tx store.Tx) error {
		for _, ws := range []string{"ws", "w2"} {
			if err := tx.PutWorkspace(ctx, &api.Workspace{Name: ws}); err != nil {
				return err
			}
		}
		return nil
	})
	var kept computeFeed
	fullReads := 0
	read := func(f *computeFeed, n *int) []api.Compute {
		t.Helper()
		var cs []api.Compute
		if err := st.View(ctx, func(tx store.Tx) (err error) {
			cs, err = f.read(ctx, listCounter{Tx: tx, n: n})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return cs
	}
	type stored struct{ ws, name string }
	var all []stored
	var last []api.Compute // the last read, as a turn holds it
	var lastCopy []api.Compute
	for step := range 300 {
		deleted := false
		mustUpdate(t, st, func(tx store.Tx) error {
			for range 1 + r.IntN(3) {
				switch op := r.IntN(10); {
				case op < 3 || len(all) == 0: // a new compute (or one made again)
					c := stored{[]string{"ws", "w2"}[r.IntN(2)], fmt.Sprintf("%s%02d", []string{"c", "B", "a-"}[r.IntN(3)], r.IntN(30))}
					if !slices.Contains(all, c) {
						all = append(all, c)
					}
					if err := tx.PutCompute(ctx, &api.Compute{Workspace: c.ws, Name: c.name, MaxInstances: r.IntN(10)}, ""); err != nil {
						return err
					}
				case op < 8: // a change
					c := all[r.IntN(len(all))]
					cp, err := tx.GetCompute(ctx, c.ws, c.name)
					if err != nil {
						return err
					}
					cp.MaxInstances, cp.CurrentNodeCount = r.IntN(10), r.IntN(10)
					if err := tx.PutCompute(ctx, cp, cp.Etag); err != nil {
						return err
					}
				default:
					i := r.IntN(len(all))
					if err := tx.DeleteCompute(ctx, all[i].ws, all[i].name); err != nil {
						return err
					}
					all, deleted = slices.Delete(all, i, i+1), true
				}
			}
			return nil
		})
		before := fullReads
		got := read(&kept, &fullReads)
		if step > 0 && !deleted && fullReads != before {
			t.Fatalf("step %d: the feed read every compute again after writes without a deletion", step)
		}
		var fresh computeFeed
		want := read(&fresh, new(int))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: kept computes differ from the stored ones:\nkept  %v\nfresh %v", step, names(got), names(want))
		}
		if !reflect.DeepEqual(last, lastCopy) {
			t.Fatalf("step %d: the last turn's computes changed under it", step)
		}
		last, lastCopy = got, slices.Clone(got)
	}
	if fullReads < 2 {
		t.Errorf("%d full reads in 300 steps: deletions were not seen", fullReads)
	}
}

func names(cs []api.Compute) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s/%s:%d:%s", c.Workspace, c.Name, c.MaxInstances, c.Etag))
	}
	return out
}
