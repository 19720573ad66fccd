package controller

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// callCounter is a store whose write transactions count the Tx calls made
// in them, by method; before runs in the transaction before its first
// ListJobs, on the store's own Tx (its calls are not counted): what other
// writers did between a turn's read and its write.
type callCounter struct {
	store.Store
	mu     sync.Mutex
	calls  map[string]int
	before func(tx store.Tx) error
}

func (s *callCounter) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(&countedTx{Tx: tx, s: s}) })
}

func (s *callCounter) count(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[name]++
}

type countedTx struct {
	store.Tx
	s *callCounter
}

func (x *countedTx) GetJob(ctx context.Context, ws, name string) (*api.Job, error) {
	x.s.count("GetJob")
	return x.Tx.GetJob(ctx, ws, name)
}

func (x *countedTx) ListJobs(ctx context.Context, f store.JobFilter) ([]api.Job, error) {
	x.s.count("ListJobs")
	if b := x.s.before; b != nil {
		x.s.before = nil
		if err := b(x.Tx); err != nil {
			return nil, err
		}
	}
	return x.Tx.ListJobs(ctx, f)
}

func (x *countedTx) PutJob(ctx context.Context, j *api.Job, ifMatch string, events ...*api.Event) error {
	x.s.count("PutJob")
	return x.Tx.PutJob(ctx, j, ifMatch, events...)
}

func (x *countedTx) PutJobs(ctx context.Context, puts []store.JobPut) error {
	x.s.count("PutJobs")
	return x.Tx.PutJobs(ctx, puts)
}

func (x *countedTx) GetNode(ctx context.Context, id string) (*api.Node, error) {
	x.s.count("GetNode")
	return x.Tx.GetNode(ctx, id)
}

func (x *countedTx) GetNodes(ctx context.Context, ids []string) ([]api.Node, error) {
	x.s.count("GetNodes")
	return x.Tx.GetNodes(ctx, ids)
}

func (x *countedTx) PutNode(ctx context.Context, n *api.Node) error {
	x.s.count("PutNode")
	return x.Tx.PutNode(ctx, n)
}

func (x *countedTx) PutNodes(ctx context.Context, ns []*api.Node) error {
	x.s.count("PutNodes")
	return x.Tx.PutNodes(ctx, ns)
}

func (x *countedTx) AddEvent(ctx context.Context, ws, resource string, e *api.Event) error {
	x.s.count("AddEvent")
	return x.Tx.AddEvent(ctx, ws, resource, e)
}

func (x *countedTx) GetCompute(ctx context.Context, ws, name string) (*api.Compute, error) {
	x.s.count("GetCompute")
	return x.Tx.GetCompute(ctx, ws, name)
}

// TestPlacementsAreBatched checks that a turn's placements are read and
// written in one statement per table whatever their number (not one per
// job and node), with every precondition still checked in the write
// transaction: a job canceled and a node taken since the turn's read are
// skipped, a job whose secret is gone fails, and the others start with
// their attempt, nodes and event, and are pushed to their nodes.
func TestPlacementsAreBatched(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	st := &callCounter{Store: openSQLite(t)}
	const n = 20
	cp := &api.Compute{Workspace: "ws", Name: "cpu", Size: "Standard_DS3_v2", Location: "local", MaxInstances: n, ProvisioningState: api.ProvisioningSucceeded}
	mustUpdate(t, st.Store, func(tx store.Tx) error {
		if err := tx.PutWorkspace(ctx, &api.Workspace{Name: "ws"}); err != nil {
			return err
		}
		if err := tx.PutCompute(ctx, cp, ""); err != nil {
			return err
		}
		for i := range n {
			j := &api.Job{Workspace: "ws", Name: fmt.Sprintf("j%02d", i), Type: api.JobTypeCommand, Command: "true", Compute: "cpu",
				Status: api.JobQueued, CreatedOn: now, PendingReason: "waiting"}
			if i == 2 {
				j.EnvironmentVariables = map[string]string{"TOKEN": "${{ secrets.gone }}"}
			}
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
			if err := tx.PutNode(ctx, &api.Node{ID: fmt.Sprintf("n%02d", i), Workspace: "ws", Compute: "cpu", Location: "local",
				State: api.NodeIdle, LastHeartbeat: now}); err != nil {
				return err
			}
		}
		return nil
	})
	var minted []string
	hub := NewHub()
	c := New(Options{Store: st, Log: slog.New(slog.DiscardHandler), Hub: hub, Changes: NewBroadcast(), Now: func() time.Time { return now },
		IdentityToken: func(j *api.Job, cp *api.Compute) string {
			minted = append(minted, j.Name+"@"+cp.Name)
			return "token-" + j.Name
		}})
	var as []scheduler.Assignment
	for i := range n {
		as = append(as, scheduler.Assignment{Job: fmt.Sprintf("ws/j%02d", i), Nodes: []string{fmt.Sprintf("n%02d", i)}})
	}
	subs := map[string]<-chan Message{}
	for i := range n {
		id := fmt.Sprintf("n%02d", i)
		subs[id] = hub.Subscribe(id)
	}
	// Since the turn's read: j00 was canceled, n01 was given another job.
	st.before = func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, "ws", "j00")
		if err != nil {
			return err
		}
		j.Status = api.JobCanceled
		if err := tx.PutJob(ctx, j, ""); err != nil {
			return err
		}
		nd, err := tx.GetNode(ctx, "n01")
		if err != nil {
			return err
		}
		nd.State, nd.Job = api.NodeRunning, "ws/other/1"
		return tx.PutNode(ctx, nd)
	}
	st.calls = map[string]int{}
	busy := c.assign(ctx, as, map[string]*api.Compute{"ws/cpu": cp}, now)

	if want := map[string]int{"ListJobs": 1, "GetNodes": 1, "PutNodes": 1, "PutJobs": 1}; !maps.Equal(st.calls, want) {
		t.Errorf("placing %d jobs made the store calls %v, want %v (one per table, none per job)", n, st.calls, want)
	}
	if len(busy) != n-3 || busy["n00"] != "" || busy["n01"] != "" || busy["n02"] != "" {
		t.Errorf("busy = %v, want the %d nodes but n00 (its job canceled), n01 (taken) and n02 (its job failed)", busy, n-3)
	}
	if len(minted) != n-3 || minted[0] != "j03@cpu" {
		t.Errorf("identity tokens minted for %v, want the %d started jobs' with their compute", minted, n-3)
	}
	if err := st.View(ctx, func(tx store.Tx) error {
		for i := range n {
			name, nid := fmt.Sprintf("j%02d", i), fmt.Sprintf("n%02d", i)
			j, err := tx.GetJob(ctx, "ws", name)
			if err != nil {
				return err
			}
			nd, err := tx.GetNode(ctx, nid)
			if err != nil {
				return err
			}
			evs, err := tx.ListEvents(ctx, "ws", "job/"+name, 0, 0)
			if err != nil {
				return err
			}
			var kinds []string
			for _, e := range evs {
				kinds = append(kinds, fmt.Sprintf("%d %s", e.Seq, e.Kind))
			}
			switch i {
			case 0:
				if j.Status != api.JobCanceled || nd.State != api.NodeIdle || len(evs) != 0 {
					t.Errorf("canceled job: %s, its node %s, events %v; want it left alone", j.Status, nd.State, kinds)
				}
			case 1:
				if j.Status != api.JobQueued || j.PendingReason != "waiting" || nd.Job != "ws/other/1" || len(evs) != 0 {
					t.Errorf("job of the taken node: %s %q, node's job %q, events %v; want it queued as it was", j.Status, j.PendingReason, nd.Job, kinds)
				}
			case 2:
				if j.Status != api.JobFailed || nd.State != api.NodeIdle || !reflect.DeepEqual(kinds, []string{"1 Failed"}) {
					t.Errorf("job whose secret is gone: %s, node %s, events %v; want Failed, idle, [1 Failed]", j.Status, nd.State, kinds)
				}
			default:
				id := service.AssignmentID("ws", name, 1)
				if j.Status != api.JobPreparing || j.Attempt != 1 || j.PendingReason != "" || !reflect.DeepEqual(j.Ranks, []api.JobRank{{Node: nid}}) {
					t.Errorf("job %s: %s attempt %d reason %q ranks %v; want Preparing, attempt 1 on %s", name, j.Status, j.Attempt, j.PendingReason, j.Ranks, nid)
				}
				if nd.State != api.NodeRunning || nd.Job != id || !nd.StateSince.Equal(now) || !nd.LastHeartbeat.Equal(now) {
					t.Errorf("node %s: %s job %q since %s heartbeat %s; want running %s since now, its heartbeat kept", nid, nd.State, nd.Job, nd.StateSince, nd.LastHeartbeat, id)
				}
				if !reflect.DeepEqual(kinds, []string{"1 Assigned"}) {
					t.Errorf("events of job %s: %v, want [1 Assigned]", name, kinds)
				}
				select {
				case m := <-subs[nid]:
					if a, ok := m.Data.(api.Assignment); m.Kind != "assign" || !ok || a.ID != id || a.IdentityToken != "token-"+name {
						t.Errorf("pushed to %s: %s %+v, want the assignment %s with its token", nid, m.Kind, m.Data, id)
					}
				default:
					t.Errorf("nothing pushed to %s", nid)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
