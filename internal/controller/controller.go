// Package controller is tide's one place for effects. Each turn of its loop
// reads the store into a snapshot, asks the pure decision functions
// (scheduler.Place, autoscaler.Plan) what to do, and applies the answer:
// store writes, provider calls and pushes to agents. Turns are driven by
// events (a job submitted, a node registered, a job finished, an idle timer
// firing); a periodic resync is only a safety net.
package controller

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/metrics"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/scheduler"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// Controller runs the decision loop. Create it with New.
type Controller struct {
	store     store.Store
	catalog   *catalog.Catalog
	cfg       config.Server
	providers map[string]provider.Provider // by location name
	runtimes  map[string]string            // by location name
	hub       *Hub
	stats     *metrics.Metrics
	changes   *Broadcast
	log       *slog.Logger
	now       func() time.Time
	policies  autoscaler.Registry
	gaps      *gapTracker // idle-gap histories of adaptive computes
	// NodeToken makes the bearer token of a node's agent.
	nodeToken     func(nodeID string) string
	identityToken func(j *api.Job, c *api.Compute) string
	secretBox     *service.SecretBox
	pipelines     Pipelines

	kick    chan struct{}
	started time.Time
	// jobs are the unfinished jobs as the last load decoded them, by
	// workspace/name; only Step (one goroutine) uses them.
	jobs map[string]api.Job
	// startTimes is, per compute key, how long its nodes take to start
	// (learnStartTimes); only Step uses it.
	startTimes map[string]time.Duration
	// rand draws simulated evictions; lastEvictionCheck is when it last did.
	rand              func() float64
	lastEvictionCheck time.Time
	// lastSample and lastPrune are when compute samples were last
	// recorded and pruned (only Step uses them).
	lastSample, lastPrune time.Time

	mu       sync.Mutex
	inflight map[string]bool      // node ids with a provider call under way
	canceled map[string]time.Time // assignment ids a cancel was pushed for, and when
	backoff  map[string]backoff   // compute key -> provisioning back-off
}

type backoff struct {
	failures int
	until    time.Time
	last     string    // the last failure, for pending reasons
	at       time.Time // when it happened
}

// Options are what a Controller needs.
type Options struct {
	Store     store.Store
	Catalog   *catalog.Catalog
	Config    config.Server
	Providers map[string]provider.Provider
	Hub       *Hub
	Changes   *Broadcast
	Log       *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Rand draws numbers in [0, 1) for simulated evictions; nil means
	// math/rand/v2.
	Rand      func() float64
	NodeToken func(nodeID string) string
	// IdentityToken mints the token a job attempt acts with; nil gives
	// jobs none.
	IdentityToken func(j *api.Job, c *api.Compute) string
	// SecretBox opens the workspace secrets a job's environment names.
	SecretBox *service.SecretBox
	// Metrics counts controller turns; nil counts nothing.
	Metrics *metrics.Metrics
	// Pipelines moves pipeline jobs on; nil leaves them alone.
	Pipelines Pipelines
}

// Pipelines moves a pipeline job on: starts steps whose inputs are ready,
// cancels or skips what a failure or a cancel stops, ends the pipeline.
// It reports whether it changed anything.
type Pipelines interface {
	AdvancePipeline(ctx context.Context, ws, name string) (bool, error)
}

// New returns a controller.
func New(o Options) *Controller {
	c := &Controller{
		store: &writeCounter{Store: o.Store}, catalog: o.Catalog, cfg: o.Config, providers: o.Providers,
		hub: o.Hub, changes: o.Changes, log: o.Log, now: o.Now, nodeToken: o.NodeToken, identityToken: o.IdentityToken, secretBox: o.SecretBox, stats: o.Metrics, pipelines: o.Pipelines,
		policies:   autoscaler.BuiltinPolicies(),
		gaps:       newGapTracker(0),
		kick:       make(chan struct{}, 1),
		inflight:   map[string]bool{},
		canceled:   map[string]time.Time{},
		backoff:    map[string]backoff{},
		runtimes:   map[string]string{},
		jobs:       map[string]api.Job{},
		startTimes: map[string]time.Duration{},
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.rand = o.Rand
	if c.rand == nil {
		c.rand = mrand.Float64
	}
	for _, l := range o.Config.Locations {
		c.runtimes[l.Name] = l.Runtime
	}
	c.gaps.load = c.loadGaps
	return c
}

// Notify asks for a turn of the loop soon. It never blocks.
func (c *Controller) Notify() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Runtime returns the runtime of the location a node belongs to.
func (c *Controller) Runtime(location string) string {
	return cmp.Or(c.runtimes[location], "process")
}

// Run loops until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.started = c.now()
	if err := c.reconcile(ctx); err != nil {
		c.log.Error("reconciling providers", "err", err)
	}
	go c.budgetLoop(ctx)
	resync := time.NewTicker(c.cfg.Resync)
	defer resync.Stop()
	liveness := time.NewTicker(c.cfg.HeartbeatInterval)
	defer liveness.Stop()
	var timer *time.Timer
	var timerC <-chan time.Time
	for {
		began := time.Now()
		wake, err := c.Step(ctx)
		c.stats.Turn(time.Since(began))
		if err != nil && ctx.Err() == nil {
			c.log.Error("controller step", "err", err)
		}
		if timer != nil {
			timer.Stop()
			timerC = nil
		}
		if !wake.IsZero() {
			timer = time.NewTimer(max(wake.Sub(c.now()), time.Millisecond))
			timerC = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-timerC:
		case <-liveness.C:
		case <-resync.C:
			if err := c.checkProviders(ctx); err != nil {
				c.log.Warn("checking providers", "err", err)
			}
		}
	}
}

// snapshot is the state one turn decides from.
type snapshot struct {
	computes []api.Compute
	nodes    []api.Node
	jobs     []api.Job // unfinished command jobs
	// pipelines are the unfinished pipeline jobs, which run no command
	// themselves: their steps are command jobs.
	pipelines []api.Job
}

func key(ws, name string) string { return ws + "/" + name }

// unfinished are the job statuses the controller acts on.
var unfinished = []string{api.JobNotStarted, api.JobQueued, api.JobPreparing, api.JobRunning, api.JobFinalizing, api.JobCancelRequested}

// load reads the state one turn decides from. Jobs are decoded only when
// their etag changed since the last load: with thousands queued, decoding
// every job each turn was the loop's main cost.
func (c *Controller) load(ctx context.Context) (*snapshot, error) {
	var s snapshot
	err := c.store.View(ctx, func(tx store.Tx) (err error) {
		if s.computes, err = tx.ListComputes(ctx, ""); err != nil {
			return err
		}
		if s.nodes, err = tx.ListNodes(ctx, "", ""); err != nil {
			return err
		}
		versions, err := tx.JobVersions(ctx, store.JobFilter{Statuses: unfinished})
		if err != nil {
			return err
		}
		var stale []store.JobKey
		for _, v := range versions {
			if j, ok := c.jobs[key(v.Workspace, v.Name)]; !ok || j.Etag != v.Etag {
				stale = append(stale, v.JobKey)
			}
		}
		f := store.JobFilter{Statuses: unfinished, Keys: stale}
		if len(stale) > len(versions)/2 {
			f.Keys = nil // most changed (the first load): read them all
		}
		var fresh []api.Job
		if len(stale) > 0 {
			if fresh, err = tx.ListJobs(ctx, f); err != nil {
				return err
			}
		}
		jobs := make(map[string]api.Job, len(versions))
		for _, j := range fresh {
			jobs[key(j.Workspace, j.Name)] = j
		}
		s.jobs = make([]api.Job, 0, len(versions))
		for _, v := range versions {
			k := key(v.Workspace, v.Name)
			j, ok := jobs[k]
			if !ok {
				j = c.jobs[k]
			}
			jobs[k] = j
			if j.Type == api.JobTypePipeline {
				s.pipelines = append(s.pipelines, j)
				continue
			}
			s.jobs = append(s.jobs, j)
		}
		c.jobs = jobs
		return nil
	})
	return &s, err
}

// Step runs one turn of the loop and returns when the next timer is due
// (zero: none).
func (c *Controller) Step(ctx context.Context) (time.Time, error) {
	s, err := c.load(ctx)
	if err != nil {
		return time.Time{}, err
	}
	now := c.now().UTC()
	writes := c.store.(*writeCounter).n.Load()
	var errs []error
	errs = append(errs, c.provisioning(ctx, s, now))
	waits, err := c.serverless(ctx, s, now)
	errs = append(errs, err)
	errs = append(errs, c.liveness(ctx, s, now))
	errs = append(errs, c.preempting(ctx, s, now))
	errs = append(errs, c.stopping(ctx, s, now))
	instWake, err := c.instances(ctx, s, now)
	errs = append(errs, err)
	advanced, err := c.advancePipelines(ctx, s)
	errs = append(errs, err)
	// Read the state again only when something was written meanwhile (by
	// these phases, or by a provider call finishing in the background).
	if advanced || c.store.(*writeCounter).n.Load() != writes {
		if s, err = c.load(ctx); err != nil {
			return time.Time{}, err
		}
	}
	c.recovered(s)
	c.learnStartTimes(s.nodes)
	wake, err := c.decide(ctx, s, waits, now)
	errs = append(errs, err, c.sample(ctx, s, now))
	if !instWake.IsZero() && (wake.IsZero() || instWake.Before(wake)) {
		wake = instWake
	}
	return wake, errors.Join(errs...)
}

// advancePipelines moves each unfinished pipeline on (through the
// service, which submits their steps as command jobs) and reports whether
// any changed.
func (c *Controller) advancePipelines(ctx context.Context, s *snapshot) (bool, error) {
	if c.pipelines == nil {
		return false, nil
	}
	any := false
	var errs []error
	for _, p := range s.pipelines {
		changed, err := c.pipelines.AdvancePipeline(ctx, p.Workspace, p.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("pipeline %s/%s: %w", p.Workspace, p.Name, err))
		}
		any = any || changed
	}
	return any, errors.Join(errs...)
}

// provisioning moves computes through their provisioning states.
func (c *Controller) provisioning(ctx context.Context, s *snapshot, now time.Time) error {
	for _, comp := range s.computes {
		switch comp.ProvisioningState {
		case api.ProvisioningCreating, api.ProvisioningUpdating:
			state, msg := api.ProvisioningSucceeded, ""
			if _, ok := c.providers[comp.Location]; !ok {
				state = api.ProvisioningFailed
				msg = fmt.Sprintf("location %q has no working provider; see the server log and its configuration", comp.Location)
			}
			if err := c.updateCompute(ctx, comp.Workspace, comp.Name, func(cp *api.Compute) bool {
				if cp.ProvisioningState != comp.ProvisioningState {
					return false
				}
				cp.ProvisioningState = state
				if msg != "" {
					cp.Errors = append(cp.Errors, api.ErrorDetail{Code: "ProvisioningFailed", Message: msg, Time: now})
				}
				return true
			}); err != nil {
				return err
			}
		case api.ProvisioningDeleting:
			if err := c.deleting(ctx, s, comp, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleting cancels a deleted compute's jobs, removes its nodes, and
// finally the compute.
func (c *Controller) deleting(ctx context.Context, s *snapshot, comp api.Compute, now time.Time) error {
	for _, j := range s.jobs {
		if j.Workspace != comp.Workspace || j.Compute != comp.Name {
			continue
		}
		if _, err := service.ForceEnd(ctx, c.store, j.Workspace, j.Name, api.JobCanceled, "compute "+comp.Name+" was deleted", now); err != nil {
			return err
		}
	}
	remaining := 0
	for _, n := range s.nodes {
		if n.Workspace == comp.Workspace && n.Compute == comp.Name {
			remaining++
			c.removeNode(ctx, n, "compute deleted")
		}
	}
	if remaining > 0 {
		return nil
	}
	if comp.IsInstance() {
		// A stopped instance's kept disk goes with it.
		if p, ok := c.providers[comp.Location]; ok {
			if err := p.Delete(ctx, comp.Instance.Node); err != nil && !provider.IsNotFound(err) {
				return fmt.Errorf("deleting the disk of instance %s: %w", comp.Name, err)
			}
		}
	}
	return c.store.Update(ctx, func(tx store.Tx) error {
		err := tx.DeleteCompute(ctx, comp.Workspace, comp.Name)
		if store.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// liveness marks nodes whose agents stopped heartbeating unusable, fails
// their jobs, and gives up on nodes that never registered.
func (c *Controller) liveness(ctx context.Context, s *snapshot, now time.Time) error {
	for _, n := range s.nodes {
		switch n.State {
		case api.NodeIdle, api.NodeRunning:
			last := n.LastHeartbeat
			if last.Before(c.started) {
				last = c.started // a restarted server gives agents time to reconnect
			}
			if now.Sub(last) < c.cfg.UnusableAfter {
				continue
			}
			reason := fmt.Sprintf("agent stopped heartbeating (last seen %s ago)", now.Sub(n.LastHeartbeat).Round(time.Second))
			if err := c.markUnusable(ctx, n, reason, now); err != nil {
				return err
			}
		case api.NodePreparing:
			if now.Sub(n.CreatedOn) < c.cfg.ProvisionTimeout || c.isInflight(n.ID) {
				continue
			}
			reason := fmt.Sprintf("node did not register within %s", c.cfg.ProvisionTimeout)
			if err := c.markUnusable(ctx, n, reason, now); err != nil {
				return err
			}
			c.recordFailure(ctx, n.Workspace, n.Compute, "ProvisioningTimeout", reason, now)
		}
	}
	return nil
}

// markUnusable makes a node unusable and fails the job it ran. tide fails
// rather than requeues here: a job may have side effects that must not run
// twice, and Azure ML also fails a job whose node is lost; retries are an
// explicit job setting.
func (c *Controller) markUnusable(ctx context.Context, n api.Node, reason string, now time.Time) error {
	err := c.store.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.GetNode(ctx, n.ID)
		if err != nil {
			return err
		}
		cur.State, cur.StateSince, cur.Error = api.NodeUnusable, now, reason
		if err := tx.PutNode(ctx, cur); err != nil {
			return err
		}
		return tx.AddEvent(ctx, n.Workspace, "compute/"+n.Compute, &api.Event{Time: now, Kind: "NodeUnusable", Message: fmt.Sprintf("node %s unusable: %s", n.ID, reason)})
	})
	if err != nil && !store.IsNotFound(err) {
		return err
	}
	if n.Job != "" {
		ws, name, attempt, perr := service.ParseAssignmentID(n.Job)
		if perr == nil {
			if _, err := service.NodeLost(ctx, c.store, ws, name, attempt, fmt.Sprintf("node %s became unusable: %s", n.ID, reason), now); err != nil {
				return err
			}
		}
	}
	c.log.Warn("node unusable", "node", n.ID, "reason", reason)
	return nil
}

// stopping pushes cancels to the nodes of jobs being canceled or failing,
// and ends jobs whose nodes are gone.
func (c *Controller) stopping(ctx context.Context, s *snapshot, now time.Time) error {
	nodes := map[string]api.Node{}
	for _, n := range s.nodes {
		nodes[n.ID] = n
	}
	for _, j := range s.jobs {
		if j.Status != api.JobCancelRequested && j.Status != api.JobFinalizing && j.Status != api.JobPreparing && j.Status != api.JobRunning {
			continue
		}
		id := service.AssignmentID(j.Workspace, j.Name, j.Attempt)
		alive := 0
		for _, r := range j.Ranks {
			if api.JobTerminal(r.Status) {
				continue
			}
			n, ok := nodes[r.Node]
			if !ok || n.State == api.NodeUnusable || n.Job != id {
				continue
			}
			alive++
			if j.Status == api.JobCancelRequested || j.Status == api.JobFinalizing {
				c.pushCancel(r.Node, id, service.StopReason(&j), now)
			}
		}
		if alive == 0 {
			var err error
			if j.Status == api.JobCancelRequested {
				_, err = service.ForceEndAttempt(ctx, c.store, j.Workspace, j.Name, j.Attempt, api.JobCanceled, "canceled by the user", now)
			} else {
				_, err = service.NodeLost(ctx, c.store, j.Workspace, j.Name, j.Attempt, "the job's nodes are gone", now)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Controller) pushCancel(node, id, reason string, now time.Time) {
	c.mu.Lock()
	last, sent := c.canceled[id+"@"+node]
	if sent && now.Sub(last) < 10*time.Second {
		c.mu.Unlock()
		return
	}
	c.canceled[id+"@"+node] = now
	c.mu.Unlock()
	c.hub.Push(node, Message{Kind: "cancel", Data: api.Cancel{ID: id, Reason: reason, GraceSeconds: int(c.cfg.CancelGrace.Seconds())}})
}

// decide places queued jobs, plans nodes and applies both.
func (c *Controller) decide(ctx context.Context, s *snapshot, serverlessWaits map[string]string, now time.Time) (time.Time, error) {
	computes := map[string]*api.Compute{}
	caps := map[string]int{}
	for i := range s.computes {
		cp := &s.computes[i]
		if cp.ProvisioningState != api.ProvisioningSucceeded {
			continue
		}
		k := key(cp.Workspace, cp.Name)
		computes[k] = cp
		caps[k] = min(cp.MaxInstances, c.quotaCap(cp))
	}
	// An instance takes jobs only while it is up (not setting up,
	// stopping or stopped); its node is its own, not the autoscaler's.
	usable := func(cp *api.Compute) bool {
		return !cp.IsInstance() || cp.Instance.State == api.InstanceRunning || cp.Instance.State == api.InstanceJobRunning
	}
	var queue []scheduler.Job
	queued := map[string]*api.Job{}
	for i := range s.jobs {
		j := &s.jobs[i]
		k := key(j.Workspace, j.Compute)
		if j.Status != api.JobQueued || computes[k] == nil {
			continue
		}
		jk := key(j.Workspace, j.Name)
		queued[jk] = j
		queue = append(queue, scheduler.Job{Key: jk, Compute: k, Instances: j.InstanceCount(), Priority: j.Priority(), Seq: j.CreatedOn.UnixNano()})
	}
	var snodes []scheduler.Node
	for _, n := range s.nodes {
		k := key(n.Workspace, n.Compute)
		if computes[k] == nil || !usable(computes[k]) {
			continue
		}
		snodes = append(snodes, scheduler.Node{ID: n.ID, Compute: k, State: n.State, Job: n.Job})
	}
	placed := scheduler.Place(queue, snodes, caps)
	busy := map[string]string{}
	for _, a := range placed.Assignments {
		if err := c.assign(ctx, queued[a.Job], a.Nodes, now); err != nil {
			c.log.Error("assigning job", "job", a.Job, "err", err)
			continue
		}
		for _, n := range a.Nodes {
			busy[n] = a.Job
		}
	}

	snap := autoscaler.Snapshot{}
	index := map[string]int{}
	gaps := c.gaps.observe(s, computes, c.startTimes)
	c.saveGaps(ctx, now)
	for k, cp := range computes {
		if cp.IsInstance() {
			continue
		}
		index[k] = len(snap.Computes)
		snap.Computes = append(snap.Computes, autoscaler.Compute{
			Key: k, Min: cp.MinInstances, Max: cp.MaxInstances, QuotaMaxNodes: c.quotaCap(cp),
			IdleTimeout: time.Duration(cp.IdleTimeBeforeScaleDown) * time.Second,
			Policy:      cp.ScaleDownPolicy(), Gaps: gaps[k], MaxStarting: cp.MaxStartingNodes(),
		})
	}
	slices.SortFunc(snap.Computes, func(a, b autoscaler.Compute) int { return strings.Compare(a.Key, b.Key) })
	for i, sc := range snap.Computes {
		index[sc.Key] = i
	}
	for _, n := range s.nodes {
		i, ok := index[key(n.Workspace, n.Compute)]
		if !ok {
			continue
		}
		an := autoscaler.Node{ID: n.ID, State: n.State, Job: n.Job, IdleSince: n.StateSince}
		if j, ok := busy[n.ID]; ok {
			an.Job, an.State = j, api.NodeRunning
		}
		snap.Computes[i].Nodes = append(snap.Computes[i].Nodes, an)
	}
	waitingByCompute := map[string][]scheduler.Waiting{}
	for _, w := range placed.Waiting {
		i, ok := index[w.Compute]
		if !ok {
			continue // an instance's job waits for the instance
		}
		snap.Computes[i].Queued = append(snap.Computes[i].Queued, autoscaler.Demand{Job: w.Job, Instances: w.Need})
		waitingByCompute[w.Compute] = append(waitingByCompute[w.Compute], w)
	}
	plan := autoscaler.Plan(snap, now, c.policies)
	for _, w := range plan.Warnings {
		c.log.Warn("autoscaler", "compute", w.Compute, "warning", w.Message)
	}
	for _, a := range plan.Actions {
		cp := computes[a.Compute]
		switch a.Kind {
		case autoscaler.ActionCreate:
			c.createNodes(ctx, cp, a.Count, a.Reason, waitingByCompute[a.Compute], now)
		case autoscaler.ActionDelete:
			for _, n := range s.nodes {
				if n.ID == a.Node {
					c.scaleDown(ctx, n, a.Reason, now)
				}
			}
		}
	}
	if err := c.explain(ctx, placed.Waiting, plan, s, serverlessWaits, now); err != nil {
		return time.Time{}, err
	}
	if err := c.status(ctx, s, plan, now); err != nil {
		return time.Time{}, err
	}
	return plan.NextWake, nil
}

// quotaCap is the most nodes a compute's quota reservation allows: the
// reservation is max_instances × vCPUs, so it is max_instances unless the
// size is unknown.
func (c *Controller) quotaCap(cp *api.Compute) int {
	if _, ok := c.catalog.Lookup(cp.Size); !ok {
		return 0
	}
	return cp.MaxInstances
}

// assign gives a queued job its nodes and pushes the assignment to them.
func (c *Controller) assign(ctx context.Context, j *api.Job, nodeIDs []string, now time.Time) error {
	var job *api.Job
	var addrs []string
	var location string
	var secrets service.JobSecrets
	err := c.store.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.GetJob(ctx, j.Workspace, j.Name)
		if err != nil {
			return err
		}
		if cur.Status != api.JobQueued {
			return fmt.Errorf("job %s is %s, not Queued", j.Name, cur.Status)
		}
		cur.Attempt++
		cur.Status, cur.PendingReason = api.JobPreparing, ""
		cur.Ranks = nil
		if secrets, err = service.LoadJobSecrets(ctx, tx, c.secretBox, cur, c.identityToken); err != nil {
			// A secret deleted since submission: the job cannot run.
			job = nil
			cur.Status, cur.Error, cur.EndTime, cur.PendingReason = api.JobFailed, err.Error(), now, ""
			if err := tx.PutJob(ctx, cur, ""); err != nil {
				return err
			}
			return tx.AddEvent(ctx, cur.Workspace, "job/"+cur.Name, &api.Event{Time: now, Kind: "Failed", Message: err.Error()})
		}
		id := service.AssignmentID(cur.Workspace, cur.Name, cur.Attempt)
		addrs = addrs[:0]
		for _, nid := range nodeIDs {
			n, err := tx.GetNode(ctx, nid)
			if err != nil {
				return err
			}
			if n.State != api.NodeIdle || n.Job != "" {
				return fmt.Errorf("node %s is %s, not idle", nid, n.State)
			}
			n.Job, n.State, n.StateSince = id, api.NodeRunning, now
			if err := tx.PutNode(ctx, n); err != nil {
				return err
			}
			cur.Ranks = append(cur.Ranks, api.JobRank{Node: nid})
			addrs = append(addrs, n.Address)
			location = n.Location
		}
		if err := tx.PutJob(ctx, cur, ""); err != nil {
			return err
		}
		job = cur
		return tx.AddEvent(ctx, cur.Workspace, "job/"+cur.Name, &api.Event{Time: now, Kind: "Assigned",
			Message: fmt.Sprintf("attempt %d placed on %s", cur.Attempt, strings.Join(nodeIDs, ", "))})
	})
	if err != nil {
		return err
	}
	if job == nil {
		c.changes.Notify()
		return nil
	}
	for rank, nid := range nodeIDs {
		a := service.AssignmentFor(job, rank, addrs, c.Runtime(location), int(c.cfg.CancelGrace.Seconds()))
		secrets.Apply(&a)
		c.hub.Push(nid, Message{Kind: "assign", Data: a})
	}
	c.changes.Notify()
	return nil
}

func (c *Controller) isInflight(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight[id]
}

// createNodes records new nodes as preparing and asks the provider for them.
func (c *Controller) createNodes(ctx context.Context, cp *api.Compute, count int, reason string, waiting []scheduler.Waiting, now time.Time) {
	k := key(cp.Workspace, cp.Name)
	c.mu.Lock()
	b := c.backoff[k]
	c.mu.Unlock()
	if now.Before(b.until) {
		return
	}
	p := c.providers[cp.Location]
	size, _ := c.catalog.Lookup(cp.Size)
	var jobs []string
	for _, w := range waiting {
		jobs = append(jobs, strings.SplitN(w.Job, "/", 2)[1])
	}
	msg := fmt.Sprintf("scaling up by %d node(s): %s", count, reason)
	if len(jobs) > 0 {
		msg += fmt.Sprintf(" (queued: %s)", strings.Join(firstN(jobs, 5), ", "))
	}
	for i := 0; i < count; i++ {
		n := api.Node{
			ID: cp.Name + "-" + randomID(), Compute: cp.Name, Workspace: cp.Workspace, Location: cp.Location,
			Provider: p.Name(), State: api.NodePreparing, CreatedOn: now, StateSince: now,
			VCPUs: size.VCPUs, MemoryGB: size.MemoryGB, GPUs: size.GPUs, PricePerHour: service.PricePerHour(size, cp.Tier),
		}
		err := c.store.Update(ctx, func(tx store.Tx) error {
			if err := tx.PutNode(ctx, &n); err != nil {
				return err
			}
			if i > 0 {
				return nil
			}
			return tx.AddEvent(ctx, cp.Workspace, "compute/"+cp.Name, &api.Event{Time: now, Kind: "ScaleUp", Message: msg})
		})
		if err != nil {
			c.log.Error("recording node", "node", n.ID, "err", err)
			return
		}
		c.claim(n.ID)
		req := provider.NodeRequest{ID: n.ID, Workspace: cp.Workspace, Compute: cp.Name, Location: cp.Location,
			Size: size, Tier: cp.Tier, ServerURL: c.cfg.AgentServerURLs(), CAFingerprint: c.cfg.CAFingerprint, RunAs: c.cfg.RunAs(cp.Location), Token: c.nodeToken(n.ID), Runtime: c.Runtime(cp.Location)}
		if ns := cp.NetworkSettings; ns != nil {
			req.Network = ns.VnetName
		}
		c.launch(ctx, p, req, "ProvisioningFailed", "creating node")
	}
}

// launch asks the provider for a claimed node in the background and
// records its provider id; a failure is recorded on the compute (code)
// and the node's record goes.
func (c *Controller) launch(ctx context.Context, p provider.Provider, req provider.NodeRequest, code, what string) {
	go func() {
		defer c.release(req.ID)
		pn, err := p.Create(ctx, req)
		if err != nil {
			c.log.Warn(what+" failed", "node", req.ID, "err", err)
			c.recordFailure(ctx, req.Workspace, req.Compute, code, fmt.Sprintf("%s %s: %v", what, req.ID, err), c.now().UTC())
			c.forget(ctx, req.ID)
			return
		}
		_ = c.store.Update(ctx, func(tx store.Tx) error {
			cur, err := tx.GetNode(ctx, req.ID)
			if err != nil {
				return err
			}
			cur.ProviderID = pn.ProviderID
			return tx.PutNode(ctx, cur)
		})
	}()
}

// claim marks a node as having a provider call under way; it reports
// false when one already is.
func (c *Controller) claim(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[id] {
		return false
	}
	c.inflight[id] = true
	return true
}

// release ends a node's provider call and asks for a turn.
func (c *Controller) release(id string) {
	c.mu.Lock()
	delete(c.inflight, id)
	c.mu.Unlock()
	c.Notify()
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// recordFailure notes a provisioning failure on the compute and backs off
// exponentially, so a failing backend is not hammered in a create/delete loop.
func (c *Controller) recordFailure(ctx context.Context, ws, compute, code, msg string, now time.Time) {
	k := key(ws, compute)
	c.mu.Lock()
	b := c.backoff[k]
	b.failures++
	delay := min(time.Duration(1<<min(b.failures-1, 8))*time.Second, 5*time.Minute)
	b.until, b.last, b.at = now.Add(delay), msg, now
	c.backoff[k] = b
	c.mu.Unlock()
	_ = c.updateCompute(ctx, ws, compute, func(cp *api.Compute) bool {
		cp.Errors = append(cp.Errors, api.ErrorDetail{Code: code, Message: msg, Time: now})
		if len(cp.Errors) > 10 {
			cp.Errors = cp.Errors[len(cp.Errors)-10:]
		}
		return true
	})
	_ = c.store.Update(ctx, func(tx store.Tx) error {
		return tx.AddEvent(ctx, ws, "compute/"+compute, &api.Event{Time: now, Kind: code, Message: fmt.Sprintf("%s (retrying in %s)", msg, delay)})
	})
}

// scaleDown removes an idle, unusable or preempted node.
func (c *Controller) scaleDown(ctx context.Context, n api.Node, reason string, now time.Time) {
	_ = c.store.Update(ctx, func(tx store.Tx) error {
		return tx.AddEvent(ctx, n.Workspace, "compute/"+n.Compute, &api.Event{Time: now, Kind: "ScaleDown", Message: fmt.Sprintf("removing node %s: %s", n.ID, reason)})
	})
	c.removeNode(ctx, n, reason)
}

// removeNode marks a node leaving and deletes it through its provider in
// the background; the record goes when the provider is done.
func (c *Controller) removeNode(ctx context.Context, n api.Node, reason string) {
	if !c.claim(n.ID) {
		return
	}
	if n.State != api.NodeLeaving && n.State != api.NodeUnusable && n.State != api.NodePreempted {
		_ = c.store.Update(ctx, func(tx store.Tx) error {
			cur, err := tx.GetNode(ctx, n.ID)
			if err != nil {
				return err
			}
			cur.State, cur.StateSince = api.NodeLeaving, c.now().UTC()
			return tx.PutNode(ctx, cur)
		})
	}
	go func() {
		defer c.release(n.ID)
		if p, ok := c.providers[n.Location]; ok {
			if err := p.Delete(ctx, n.ID); err != nil && !provider.IsNotFound(err) {
				c.log.Warn("deleting node", "node", n.ID, "err", err)
				return
			}
		}
		c.forget(ctx, n.ID)
		c.log.Info("node removed", "node", n.ID, "reason", reason)
	}()
}

// forget removes a node's record, keeping its life and price for cost.
func (c *Controller) forget(ctx context.Context, id string) {
	_ = c.store.Update(ctx, func(tx store.Tx) error {
		n, err := tx.GetNode(ctx, id)
		if store.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		u := store.NodeUsage{Workspace: n.Workspace, Compute: n.Compute, Node: n.ID, Started: n.CreatedOn, Ended: c.now().UTC(), PricePerHour: n.PricePerHour}
		if err := tx.AddNodeUsage(ctx, u); err != nil {
			return err
		}
		return tx.DeleteNode(ctx, id)
	})
}

// explain stores why each queued job waits, when that changed: what it
// waits for, with the numbers a user needs to judge how long.
func (c *Controller) explain(ctx context.Context, waiting []scheduler.Waiting, plan autoscaler.Result, s *snapshot, serverlessWaits map[string]string, now time.Time) error {
	unsched := map[string]string{}
	for _, u := range plan.Unschedulable {
		unsched[u.Job] = u.Reason
	}
	// Reasons name what changes slowly (node counts, not which node is
	// free this instant), so that a step rewrites only the reasons that
	// really changed.
	starting := map[string]int{}
	startingSince := map[string]time.Time{}
	startingLast := map[string]time.Time{} // the newest starting node
	existing := map[string]int{}           // nodes that count against max_instances
	for _, n := range s.nodes {
		k := key(n.Workspace, n.Compute)
		switch n.State {
		case api.NodePreparing:
			starting[k]++
			if since := startingSince[k]; since.IsZero() || n.CreatedOn.Before(since) {
				startingSince[k] = n.CreatedOn
			}
			if n.CreatedOn.After(startingLast[k]) {
				startingLast[k] = n.CreatedOn
			}
			existing[k]++
		case api.NodeIdle, api.NodeRunning:
			existing[k]++
		}
	}
	maxNodes := map[string]int{}
	byKey := map[string]*api.Compute{}
	for i, cp := range s.computes {
		maxNodes[key(cp.Workspace, cp.Name)] = cp.MaxInstances
		byKey[key(cp.Workspace, cp.Name)] = &s.computes[i]
	}
	nodeJobs := map[string]string{}
	for _, n := range s.nodes {
		nodeJobs[n.ID] = n.Job
	}
	c.mu.Lock()
	failing := map[string]backoff{}
	for k, b := range c.backoff {
		failing[k] = b
	}
	c.mu.Unlock()
	stored := map[string]string{} // the reasons the snapshot holds
	for _, j := range s.jobs {
		if j.Status == api.JobQueued {
			stored[key(j.Workspace, j.Name)] = j.PendingReason
		}
	}
	changed := map[string]string{}
	for _, w := range waiting {
		k := w.Compute
		var reason string
		switch b := failing[k]; {
		case byKey[k] != nil && byKey[k].IsInstance():
			reason = instanceWaitReason(byKey[k], nodeJobs[byKey[k].Instance.Node], w.Reason == scheduler.ReasonReserved, w.Head)
		case serverlessWaits[k] != "":
			reason = serverlessWaits[k]
		case maxNodes[k] == 0:
			reason = pausedReason(byKey[k])
		case unsched[w.Job] != "":
			reason = unsched[w.Job]
		case b.failures > 0 && now.Before(b.until):
			reason = fmt.Sprintf("waiting for %d node(s): provisioning is failing (%d failure(s), last: %s); retrying at %s",
				w.Need, b.failures, b.last, b.until.UTC().Format(time.TimeOnly))
		case w.Reason == scheduler.ReasonReserved:
			reason = fmt.Sprintf("waiting behind %s (higher in the queue), which holds the free nodes of its compute", strings.SplitN(w.Head, "/", 2)[1])
		case starting[k] > 0:
			reason = fmt.Sprintf("waiting for %d node(s): %d starting since %s",
				w.Need, starting[k], startingSince[k].UTC().Format(time.TimeOnly))
			if typical := c.startTimes[k]; typical > 0 {
				// An estimate, where tide has one: the nodes of this
				// compute that registered took typical to start.
				reason += fmt.Sprintf("; expected by about %s (its nodes take %s to start)",
					startingLast[k].Add(typical).UTC().Format(time.TimeOnly), typical.Round(time.Second))
			}
		case existing[k] >= maxNodes[k]:
			// Place gave the free nodes to the jobs ahead: all are busy.
			reason = fmt.Sprintf("compute at max_instances (%d node(s), all busy)", maxNodes[k])
		default:
			reason = fmt.Sprintf("waiting for %d node(s)", w.Need)
		}
		if stored[w.Job] != reason {
			changed[w.Job] = reason
		}
	}
	if len(changed) == 0 {
		return nil
	}
	// One transaction for every change: a step costs what changed, not the
	// length of the queue.
	err := c.store.Update(ctx, func(tx store.Tx) error {
		for jk, reason := range changed {
			ws, name, _ := strings.Cut(jk, "/")
			j, err := tx.GetJob(ctx, ws, name)
			if store.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			if j.Status != api.JobQueued || j.PendingReason == reason {
				continue
			}
			j.PendingReason = reason
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

// learnStartTimes records, per compute, the median time its current nodes
// took from creation to their agent's first registration. A compute keeps
// the last figure when its nodes are gone (scaled to zero), so the next
// scale-up from zero has an estimate too.
func (c *Controller) learnStartTimes(nodes []api.Node) {
	took := map[string][]time.Duration{}
	for _, n := range nodes {
		if !n.RegisteredOn.IsZero() && !n.CreatedOn.IsZero() && n.RegisteredOn.After(n.CreatedOn) {
			k := key(n.Workspace, n.Compute)
			took[k] = append(took[k], n.RegisteredOn.Sub(n.CreatedOn))
		}
	}
	for k, ds := range took {
		slices.Sort(ds)
		c.startTimes[k] = ds[len(ds)/2]
	}
}

// recovered forgets a compute's provisioning failures once a node created
// after the last one registered: the backend works again.
func (c *Controller) recovered(s *snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range s.nodes {
		k := key(n.Workspace, n.Compute)
		if b, ok := c.backoff[k]; ok && (n.State == api.NodeIdle || n.State == api.NodeRunning) && n.CreatedOn.After(b.at) {
			delete(c.backoff, k)
		}
	}
}

// status writes each compute's node counts and allocation state.
func (c *Controller) status(ctx context.Context, s *snapshot, plan autoscaler.Result, now time.Time) error {
	var nodes []api.Node
	if err := c.store.View(ctx, func(tx store.Tx) (err error) {
		nodes, err = tx.ListNodes(ctx, "", "")
		return err
	}); err != nil {
		return err
	}
	byCompute := map[string][]api.Node{}
	for _, n := range nodes {
		k := key(n.Workspace, n.Compute)
		byCompute[k] = append(byCompute[k], n)
	}
	for _, cp := range s.computes {
		k := key(cp.Workspace, cp.Name)
		current, counts := autoscaler.Counts(byCompute[k])
		target, ok := plan.Targets[k]
		if cp.IsInstance() {
			// An instance's one node is wanted while it is to run.
			target, ok = 0, true
			if cp.Instance.Desired != api.InstanceStopped && cp.ProvisioningState != api.ProvisioningDeleting {
				target = 1
			}
		}
		if !ok {
			target = cp.TargetNodeCount
			if cp.ProvisioningState == api.ProvisioningDeleting {
				target = 0
			}
		}
		// Idle nodes waiting out their idle time are not being removed
		// yet: as in Azure, the compute stays Steady at its current size
		// until a node actually leaves.
		if target < current && counts.Leaving == 0 {
			target = current
		}
		alloc := api.AllocationSteady
		if target != current || counts.Leaving > 0 || counts.Preparing > 0 {
			alloc = api.AllocationResizing
		}
		if cp.CurrentNodeCount == current && cp.TargetNodeCount == target && cp.NodeStateCounts == counts && cp.AllocationState == alloc {
			continue
		}
		if err := c.updateCompute(ctx, cp.Workspace, cp.Name, func(x *api.Compute) bool {
			x.CurrentNodeCount, x.TargetNodeCount, x.NodeStateCounts, x.AllocationState = current, target, counts, alloc
			return true
		}); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) updateCompute(ctx context.Context, ws, name string, fn func(*api.Compute) bool) error {
	err := c.store.Update(ctx, func(tx store.Tx) error {
		cp, err := tx.GetCompute(ctx, ws, name)
		if err != nil {
			return err
		}
		if !fn(cp) {
			return nil
		}
		return tx.PutCompute(ctx, cp, "")
	})
	if store.IsNotFound(err) {
		return nil
	}
	return err
}

// reconcile matches what the providers hold with the store after a start:
// agents the store does not know are stopped (no orphans); nodes the
// providers no longer hold become unusable and are replaced (no forgotten
// nodes).
func (c *Controller) reconcile(ctx context.Context) error {
	s, err := c.load(ctx)
	if err != nil {
		return err
	}
	known := map[string]api.Node{}
	for _, n := range s.nodes {
		known[n.ID] = n
	}
	now := c.now().UTC()
	var errs []error
	for loc, p := range c.providers {
		pnodes, err := p.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing nodes of location %s: %w", loc, err))
			continue
		}
		held := map[string]bool{}
		for _, pn := range pnodes {
			held[pn.ID] = true
			if _, ok := known[pn.ID]; !ok {
				c.log.Info("stopping orphan agent", "node", pn.ID, "location", loc)
				if err := p.Delete(ctx, pn.ID); err != nil && !provider.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
		}
		for _, n := range s.nodes {
			if n.Location == loc && !held[n.ID] && n.State != api.NodeUnusable {
				if err := c.markUnusable(ctx, n, "the provider no longer holds the node", now); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkProviders marks nodes whose agent process is gone unusable, without
// waiting for the heartbeat timeout, and shows why a preparing node waits
// (a Slurm job's pending reason) as the node's error until it registers.
func (c *Controller) checkProviders(ctx context.Context) error {
	s, err := c.load(ctx)
	if err != nil {
		return err
	}
	now := c.now().UTC()
	// A stopping instance's node is the instances phase's to finish: its
	// provider no longer lists it, and deleting it would lose its disk.
	instanceNodes := map[string]bool{}
	for _, cp := range s.computes {
		if cp.IsInstance() {
			instanceNodes[cp.Instance.Node] = true
		}
	}
	for _, n := range s.nodes {
		if n.State == api.NodeLeaving && instanceNodes[n.ID] {
			continue
		}
		// Leaving nodes that tide is not deleting are those whose agent
		// said it is stopping: the provider says why.
		if n.State != api.NodeIdle && n.State != api.NodeRunning && n.State != api.NodePreparing && n.State != api.NodeLeaving || c.isInflight(n.ID) {
			continue
		}
		p, ok := c.providers[n.Location]
		if !ok {
			continue
		}
		pn, err := p.Get(ctx, n.ID)
		left := n.State == api.NodeLeaving
		switch {
		case left && (provider.IsNotFound(err) || err == nil && pn.State == provider.StateExited ||
			now.Sub(n.StateSince) > c.cfg.UnusableAfter+c.cfg.PreemptGrace):
			// Its agent is gone (or took longer to stop than any grace).
			c.removeNode(ctx, n, n.Error)
			err = nil
		case left && err == nil && pn.State != provider.StatePreempted:
			continue // still stopping
		case provider.IsNotFound(err):
			err = c.markUnusable(ctx, n, "the provider no longer holds the node", now)
		case err != nil:
			// The backend cannot tell now (an ssh host cut off, a Slurm
			// controller restarting): the heartbeats decide; check the
			// other nodes.
			c.log.Warn("checking node", "node", n.ID, "err", err)
			continue
		case pn.State == provider.StateExited:
			err = c.markUnusable(ctx, n, "agent exited: "+pn.Reason, now)
		case pn.State == provider.StatePreempted:
			err = service.MarkPreempted(ctx, c.store, n.ID, cmp.Or(pn.Reason, "the provider took the node away"), now)
		case n.State == api.NodePreparing && pn.Reason != n.Error:
			err = c.store.Update(ctx, func(tx store.Tx) error {
				cur, err := tx.GetNode(ctx, n.ID)
				if err != nil || cur.State != api.NodePreparing {
					return err
				}
				cur.Error = pn.Reason
				return tx.PutNode(ctx, cur)
			})
			if store.IsNotFound(err) {
				err = nil
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeCounter counts the write transactions the controller runs, so that
// a step reads the state again only when it may have changed.
type writeCounter struct {
	store.Store
	n atomic.Int64
}

// Update counts every call, even a failed one: part of what fn meant may
// be visible.
func (w *writeCounter) Update(ctx context.Context, fn func(store.Tx) error) error {
	err := w.Store.Update(ctx, fn)
	w.n.Add(1)
	return err
}
