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
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/autoscaler"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/config"
	"github.com/tideml/tide/internal/metrics"
	"github.com/tideml/tide/internal/provider"
	"github.com/tideml/tide/internal/service"
	"github.com/tideml/tide/internal/store"
)

// Controller runs the decision loop. Create it with New.
type Controller struct {
	store     store.Store
	catalog   *catalog.Catalog
	cfg       config.Server
	providers map[string]provider.Provider // by location name
	// attachedProvider builds an attached compute's provider, kept in
	// attached by location (guarded by mu).
	attachedProvider func(ctx context.Context, cp *api.Compute) (provider.Provider, error)
	runtimes         map[string]string // by location name
	hub              *Hub
	stats            *metrics.Metrics
	changes          *Broadcast
	log              *slog.Logger
	now              func() time.Time
	policies         autoscaler.Registry
	gaps             *gapTracker // idle-gap histories of adaptive computes
	// NodeToken makes the bearer token of a node's agent.
	nodeToken     func(nodeID string) string
	identityToken func(j *api.Job, c *api.Compute) string
	secretBox     *service.SecretBox
	parents       Parents
	silent        func(x store.NodeSeen, now time.Time) (time.Time, bool)

	kick    chan struct{}
	started time.Time
	// placing is set while Run leads and its first turn has run;
	// freeNodes are the free nodes the last turn left, by compute key
	// (publishFree). PlaceSubmitted reads both, from any goroutine.
	placing   atomic.Bool
	freeNodes atomic.Pointer[map[string][]string]
	// jobs are the unfinished jobs but the queued command jobs as the last
	// load decoded them, by workspace/name, order their keys in creation
	// order (with keys of jobs since finished or queued), queue the queued
	// command jobs, and cursor the store's change-feed position they are up
	// to date with ("": read them all); only Step (one goroutine) uses
	// them.
	jobs    map[string]*api.Job
	order   []string
	ordered map[string]bool // the keys in order
	queue   *jobQueue
	cursor  string
	// nodes are every node and computes every compute, kept as jobs are
	// (only Step uses them).
	nodes    nodeFeed
	computes computeFeed
	// gapJobs are the keys of the jobs written since the adaptive
	// histories last learned (gapAllJobs: every job may have been, after
	// a full load); only Step uses them (gapChanges).
	gapJobs    map[string]bool
	gapAllJobs bool
	// stopLook are the keys of the jobs stopping looks at next turn (jobs
	// written since, jobs it did not find alive and running), stopAll
	// says it looks at every job (after a full load or a failure); only
	// Step uses them.
	stopLook map[string]bool
	stopAll  bool
	// startTimes is, per compute key, how long its nodes take to start
	// (learnStartTimes); only Step uses it.
	startTimes map[string]time.Duration
	// rand draws simulated evictions; lastEvictionCheck is when it last did.
	rand              func() float64
	lastEvictionCheck time.Time

	mu       sync.Mutex
	attached map[string]provider.Provider
	inflight map[string]bool               // node ids with a provider call under way
	canceled map[string]time.Time          // assignment ids a cancel was pushed for, and when
	backoff  map[string]autoscaler.Backoff // compute key -> provisioning back-off
	// checks are the provider checks reported since the last turn,
	// checking the locations whose check round runs, effects the
	// background calls effect started (effects.go).
	checks   []nodeCheck
	checking map[string]bool
	effects  map[string]*effectRun
	// deleteFailures counts the failed deletes of each node, for the
	// wait before the next (removeNode).
	deleteFailures map[string]int
	// lastSample and lastPrune are when compute samples were last
	// recorded and pruned; sampling says a goroutine records them now
	// (sample).
	lastSample, lastPrune time.Time
	sampling              bool
}

// Options are what a Controller needs.
type Options struct {
	Store     store.Store
	Catalog   *catalog.Catalog
	Config    config.Server
	Providers map[string]provider.Provider
	// AttachedProvider builds the provider of an attached compute (type
	// virtualmachine) from its record; nil leaves attached computes
	// without nodes.
	AttachedProvider func(ctx context.Context, cp *api.Compute) (provider.Provider, error)
	Hub              *Hub
	Changes          *Broadcast
	Log              *slog.Logger
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
	// Parents moves pipeline and sweep jobs on; nil leaves them alone.
	Parents Parents
	// Silent judges a node whose last_seen is UnusableAfter old
	// (service.Service.Silent); nil judges by last_seen alone, with the
	// service's write period (service.BeatWritePeriod).
	Silent func(x store.NodeSeen, now time.Time) (last time.Time, silent bool)
}

// Parents moves a job that runs child jobs (a pipeline, a sweep) on:
// starts the children that are due (steps whose inputs are ready, new
// trials), cancels what a failure, a policy or a cancel stops, and ends
// the parent. It reports whether it changed anything.
type Parents interface {
	AdvanceParent(ctx context.Context, ws, name string) (bool, error)
}

// New returns a controller.
func New(o Options) *Controller {
	c := &Controller{
		store: &writeCounter{Store: o.Store}, catalog: o.Catalog, cfg: o.Config, providers: o.Providers, attachedProvider: o.AttachedProvider,
		hub: o.Hub, changes: o.Changes, log: o.Log, now: o.Now, nodeToken: o.NodeToken, identityToken: o.IdentityToken, secretBox: o.SecretBox, stats: o.Metrics, parents: o.Parents, silent: o.Silent,
		policies:       autoscaler.BuiltinPolicies(),
		gaps:           newGapTracker(0),
		kick:           make(chan struct{}, 1),
		inflight:       map[string]bool{},
		deleteFailures: map[string]int{},
		attached:       map[string]provider.Provider{},
		canceled:       map[string]time.Time{},
		backoff:        map[string]autoscaler.Backoff{},
		checking:       map[string]bool{},
		effects:        map[string]*effectRun{},
		runtimes:       map[string]string{},
		jobs:           map[string]*api.Job{},
		stopLook:       map[string]bool{},
		startTimes:     map[string]time.Duration{},
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.hub == nil {
		c.hub = NewHub() // no agent connects: pushes are dropped, as to an agent not connected
	}
	if c.silent == nil {
		c.silent = func(x store.NodeSeen, now time.Time) (time.Time, bool) {
			return x.LastSeen, now.Sub(x.LastSeen) > c.cfg.UnusableAfter+service.BeatWritePeriod(c.cfg)
		}
	}
	c.rand = o.Rand
	if c.rand == nil {
		c.rand = mrand.Float64
	}
	for _, l := range o.Config.Locations {
		c.runtimes[l.Name] = l.Runtime
	}
	c.freeNodes.Store(&map[string][]string{})
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
	c.newTerm()
	defer c.placing.Store(false)
	reconciled, err := c.reconcile(ctx)
	if err != nil {
		c.log.Error("reconciling providers", "err", err)
	}
	// The first turn waits a little for the reconciliation, so that a
	// restarted server does not place jobs on nodes whose agents are
	// gone; a location that does not answer by then does not hold it up.
	select {
	case <-reconciled:
	case <-time.After(reconcileWait):
	case <-ctx.Done():
		return nil
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
		c.placing.Store(true)
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
			c.startChecks(ctx)
		}
	}
}

// newTerm forgets what an earlier leadership term kept: a replica that
// leads again reads every node and job (its queue is built again from the
// store), and background calls of the earlier term, which ended with its
// context, say nothing of the backend (context canceled).
func (c *Controller) newTerm() {
	c.nodes, c.computes, c.cursor, c.stopAll = nodeFeed{}, computeFeed{}, "", true
	c.freeNodes.Store(&map[string][]string{})
	c.mu.Lock()
	c.effects = map[string]*effectRun{}
	c.mu.Unlock()
}

// snapshot is the state one turn decides from.
type snapshot struct {
	computes []api.Compute
	nodes    []api.Node
	// jobs are the unfinished command jobs but the queued ones, shared
	// with the controller's (c.jobs): a turn does not change them.
	jobs  []*api.Job
	queue *jobQueue // the queued command jobs
	// parents are the unfinished pipeline and sweep jobs, which run no
	// command themselves: their steps and trials are command jobs.
	parents []*api.Job
}

func key(ws, name string) string { return ws + "/" + name }

// unfinished are the job statuses the controller acts on.
var unfinished = []string{api.JobNotStarted, api.JobQueued, api.JobPreparing, api.JobRunning, api.JobFinalizing, api.JobCancelRequested}

// Step runs one turn of the loop and returns when the next timer is due
// (zero: none).
func (c *Controller) Step(ctx context.Context) (time.Time, error) {
	tr := c.newTrace(ctx)
	defer c.traceDone(ctx, tr)
	s, err := c.load(ctx)
	if err != nil {
		return time.Time{}, err
	}
	tr.phase("load")
	now := c.now().UTC()
	writes := c.store.(*writeCounter).n.Load()
	var errs []error
	errs = append(errs, c.provisioning(ctx, s, now))
	tr.phase("provisioning")
	errs = append(errs, c.applyChecks(ctx, s, now))
	tr.phase("checks")
	waits, err := c.serverless(ctx, s, now)
	errs = append(errs, err)
	tr.phase("serverless")
	errs = append(errs, c.liveness(ctx, s, now))
	tr.phase("liveness")
	errs = append(errs, c.preempting(ctx, s, now))
	tr.phase("preempting")
	errs = append(errs, c.stopping(ctx, s, now))
	tr.phase("stopping")
	instWake, err := c.instances(ctx, s, now)
	errs = append(errs, err)
	advanced, err := c.advanceParents(ctx, s)
	errs = append(errs, err)
	tr.phase("instances")
	// Read the state again only when something was written meanwhile (by
	// these phases, or by a provider call finishing in the background).
	if advanced || c.store.(*writeCounter).n.Load() != writes {
		if s, err = c.load(ctx); err != nil {
			return time.Time{}, err
		}
		tr.phase("reload")
	}
	c.recovered(s)
	c.learnStartTimes()
	wake, err := c.decide(ctx, s, waits, now, tr)
	errs = append(errs, err)
	c.sample(ctx, s, now)
	tr.phase("sample")
	if !instWake.IsZero() && (wake.IsZero() || instWake.Before(wake)) {
		wake = instWake
	}
	return wake, errors.Join(errs...)
}

// advanceParents moves each unfinished pipeline and sweep on (through the
// service, which submits their steps and trials as command jobs) and
// reports whether any changed.
func (c *Controller) advanceParents(ctx context.Context, s *snapshot) (bool, error) {
	if c.parents == nil {
		return false, nil
	}
	any := false
	var errs []error
	for _, p := range s.parents {
		changed, err := c.parents.AdvanceParent(ctx, p.Workspace, p.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s/%s: %w", p.Type, p.Workspace, p.Name, err))
		}
		any = any || changed
	}
	return any, errors.Join(errs...)
}

// status returns the write of each compute's node counts and allocation
// state, from the nodes' figures kept per compute (computeNodes), read
// again for what the turn wrote, for the computes whose figures changed.
func (c *Controller) status(ctx context.Context, s *snapshot, plan autoscaler.Result) (write, error) {
	if err := c.store.View(ctx, func(tx store.Tx) error {
		_, err := c.nodes.read(ctx, tx)
		return err
	}); err != nil {
		return write{}, err
	}
	return c.statusWrite(s, plan, nil), nil
}

// statusWrite returns the write of status, from the kept figures, with
// the idle nodes of placed (by node id), which the turn's placements take
// in the same transaction, counted running.
func (c *Controller) statusWrite(s *snapshot, plan autoscaler.Result, placed map[string]string) write {
	taken := map[string]int{} // by compute key
	for id := range placed {
		if n := c.nodes.node(id); n != nil && free(n) {
			taken[key(n.Workspace, n.Compute)]++
		}
	}
	var changed []api.Compute // with the figures to write
	for _, cp := range s.computes {
		k := key(cp.Workspace, cp.Name)
		cn := c.nodes.of(k)
		current, counts := cn.current, cn.counts
		counts.Idle, counts.Running = counts.Idle-taken[k], counts.Running+taken[k]
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
		cp.CurrentNodeCount, cp.TargetNodeCount, cp.NodeStateCounts, cp.AllocationState = current, target, counts, alloc
		changed = append(changed, cp)
	}
	if len(changed) == 0 {
		return write{}
	}
	return write{do: func(ctx context.Context, tx store.Tx) error {
		for _, w := range changed {
			// Written over the turn's copy, if the stored compute is
			// still that one (its etag): a read of each compute cost a
			// statement and a decoding. One written since (a user's
			// update) is read again and the figures written over it.
			put, err := w, store.ErrPrecondition
			if w.Etag != "" {
				err = tx.PutCompute(ctx, &put, w.Etag)
			}
			if errors.Is(err, store.ErrPrecondition) {
				var cp *api.Compute
				if cp, err = tx.GetCompute(ctx, w.Workspace, w.Name); err == nil {
					cp.CurrentNodeCount, cp.TargetNodeCount, cp.NodeStateCounts, cp.AllocationState = w.CurrentNodeCount, w.TargetNodeCount, w.NodeStateCounts, w.AllocationState
					err = tx.PutCompute(ctx, cp, "")
				}
			}
			if store.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
		}
		return nil
	}}
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
