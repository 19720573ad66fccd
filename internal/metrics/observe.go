package metrics

import (
	"context"
	"maps"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/store"
)

// Observe returns st with its write transactions watched: the events they
// add (and the job and node documents they write) are counted in m once the
// transaction commits. Reads pass through untouched.
func Observe(st store.Store, m *Metrics) store.Store {
	if m == nil {
		return st
	}
	return &observed{Store: st, m: m}
}

type observed struct {
	store.Store
	m *Metrics
}

func (o *observed) Update(ctx context.Context, fn func(store.Tx) error) error {
	return o.Store.Update(ctx, func(tx store.Tx) error {
		w := &watchedTx{Tx: tx}
		if err := fn(w); err != nil {
			return err
		}
		tx.OnCommit(func() { w.report(o.m) })
		return nil
	})
}

// watchedTx remembers what a transaction wrote that metrics count.
type watchedTx struct {
	store.Tx
	events []watchedEvent
	jobs   map[store.JobKey]*api.Job
	nodes  []*api.Node
}

type watchedEvent struct {
	ws, resource string
	e            api.Event
}

func (w *watchedTx) AddEvent(ctx context.Context, ws, resource string, e *api.Event) error {
	if err := w.Tx.AddEvent(ctx, ws, resource, e); err != nil {
		return err
	}
	w.events = append(w.events, watchedEvent{ws, resource, *e})
	return nil
}

func (w *watchedTx) PutJob(ctx context.Context, j *api.Job, ifMatch string, events ...*api.Event) error {
	if err := w.Tx.PutJob(ctx, j, ifMatch, events...); err != nil {
		return err
	}
	for _, e := range events {
		w.events = append(w.events, watchedEvent{j.Workspace, "job/" + j.Name, *e})
	}
	if w.jobs == nil {
		w.jobs = map[store.JobKey]*api.Job{}
	}
	c := *j
	w.jobs[store.JobKey{Workspace: j.Workspace, Name: j.Name}] = &c
	return nil
}

func (w *watchedTx) PutJobs(ctx context.Context, puts []store.JobPut) error {
	if err := w.Tx.PutJobs(ctx, puts); err != nil {
		return err
	}
	if w.jobs == nil {
		w.jobs = map[store.JobKey]*api.Job{}
	}
	for _, p := range puts {
		j := p.Job
		for _, e := range p.Events {
			w.events = append(w.events, watchedEvent{j.Workspace, "job/" + j.Name, *e})
		}
		c := *j
		w.jobs[store.JobKey{Workspace: j.Workspace, Name: j.Name}] = &c
	}
	return nil
}

// PutNodes counts the nodes first written, as PutNode does.
func (w *watchedTx) PutNodes(ctx context.Context, ns []*api.Node) error {
	var preparing []string
	for _, n := range ns {
		if n.State == api.NodePreparing {
			preparing = append(preparing, n.ID)
		}
	}
	stored := map[string]bool{}
	if len(preparing) > 0 {
		got, err := w.Tx.GetNodes(ctx, preparing)
		if err != nil {
			return err
		}
		for _, n := range got {
			stored[n.ID] = true
		}
	}
	if err := w.Tx.PutNodes(ctx, ns); err != nil {
		return err
	}
	for _, n := range ns {
		if n.State == api.NodePreparing && !stored[n.ID] {
			stored[n.ID] = true
			c := *n
			w.nodes = append(w.nodes, &c)
		}
	}
	return nil
}

func (w *watchedTx) PutNode(ctx context.Context, n *api.Node) error {
	// A node first written is one the controller creates (as preparing);
	// only then is the extra read made.
	created := false
	if n.State == api.NodePreparing {
		_, err := w.Tx.GetNode(ctx, n.ID)
		created = store.IsNotFound(err)
	}
	if err := w.Tx.PutNode(ctx, n); err != nil {
		return err
	}
	if created {
		c := *n
		w.nodes = append(w.nodes, &c)
	}
	return nil
}

// Savepoint forgets, with what the store undoes, what fn wrote when it
// fails.
func (w *watchedTx) Savepoint(ctx context.Context, fn func() error) error {
	events, nodes, jobs := len(w.events), len(w.nodes), maps.Clone(w.jobs)
	err := w.Tx.Savepoint(ctx, fn)
	if err != nil {
		w.events, w.nodes, w.jobs = w.events[:events], w.nodes[:nodes], jobs
	}
	return err
}

// report counts what the committed transaction did.
func (w *watchedTx) report(m *Metrics) {
	for _, we := range w.events {
		var job *api.Job
		if kind, name := resourceKind(we.resource); kind == "job" {
			job = w.jobs[store.JobKey{Workspace: we.ws, Name: name}]
		}
		m.event(we.ws, we.resource, &we.e, job)
	}
	for _, n := range w.nodes {
		m.nodeCreated(n)
	}
}
