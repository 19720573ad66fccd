// Package agent is tide's node agent: it registers with the server, holds a
// server-sent event stream on which assignments are pushed, runs each
// assignment through a runtime, streams its log lines in numbered batches,
// uploads its outputs/ and logs/ folders and reports how it ended.
//
// The agent is built to survive server restarts: it reconnects with jittered
// backoff, re-registers reporting what it runs (so the server kills no job),
// keeps unsent log lines and resends them (the server dedups by NodeSeq), and
// retries a finished job's artifacts and status until the server takes them.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/runtime"
	"github.com/tideml/tide/internal/nodecache"
)

// Config configures an agent. Zero durations take the defaults named on
// each field.
type Config struct {
	// ServerURLs are the base URLs of the tide server replicas
	// ("http://host:port"). The agent uses one and moves to the next when a
	// request fails. Required.
	ServerURLs []string
	// NodeID is the node's id, as the provider created it. Required.
	NodeID string
	// Token is the node's bearer token, issued by the server. Required.
	Token string
	// Dir is the node's folder: jobs/, checkpoints/ and state/ live there. Required.
	Dir string
	// Capacity is what the node offers (on the local provider a logical
	// capacity; its Note says so).
	Capacity api.Capacity
	// Address is how other nodes of a gang reach this one (reported at
	// registration). Optional.
	Address string
	// Version is reported at registration. Optional.
	Version string
	// HeartbeatInterval is used until the server's AgentWelcome names one.
	// Default 1s: short, so the first heartbeat after registration is never
	// later than the server's own interval.
	HeartbeatInterval time.Duration
	// StreamIdleTimeout: a stream silent for this long (no event, no
	// keep-alive comment) is considered dead and reconnected, which catches
	// a server that vanished without closing the connection. Default 60s.
	StreamIdleTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential backoff
	// between reconnects and retries. Defaults 200ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// RunningWait is how long a started command runs before the agent
	// reports it Running. A shorter one (a no-op job runs for a few
	// milliseconds) is reported once, when it ends, its final status
	// saying it started: one request and one transaction instead of two
	// (the two were 17 % of the server's CPU when it dispatched no-op
	// jobs). A user sees a longer job Running this much later. Default 50ms.
	RunningWait time.Duration
	// ShutdownTimeout bounds the last attempts to report jobs when the
	// agent stops. Default 5s.
	ShutdownTimeout time.Duration
	// Logger receives the agent's logs. Default: discard.
	Logger *slog.Logger
	// Runtime runs the jobs' processes. Default runtime.Process{}.
	Runtime runtime.Runtime
	// RuntimeName is Runtime's name, reported at registration. Default "process".
	RuntimeName string
	// CacheBytes bounds the node's cache of downloaded inputs
	// (NODE_DIR/cache/inputs). Default nodecache.DefaultLimit (10 GiB).
	CacheBytes int64
	// HTTPClient is used for every request. It must not set a Timeout (the
	// stream is long-lived); the agent bounds each request itself. Default:
	// a client with http.DefaultTransport.
	HTTPClient *http.Client
}

func (c *Config) setDefaults() error {
	switch {
	case len(c.ServerURLs) == 0:
		return errors.New("server: at least one server URL is required")
	case c.NodeID == "":
		return errors.New("node-id: required")
	case c.Token == "":
		return fmt.Errorf("token: required; set %s", TokenEnv)
	case c.Dir == "":
		return errors.New("dir: required")
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.StreamIdleTimeout <= 0 {
		c.StreamIdleTimeout = 60 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 200 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = c.MinBackoff
	}
	if c.RunningWait <= 0 {
		c.RunningWait = 50 * time.Millisecond
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Runtime == nil {
		c.Runtime = runtime.Process{}
	}
	if c.RuntimeName == "" {
		c.RuntimeName = runtime.ProcessName
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	return nil
}

// agent is one running agent.
type agent struct {
	cfg    Config
	log    *slog.Logger
	client *client
	// heartbeat is the current heartbeat interval in nanoseconds.
	heartbeat atomic.Int64
	// fence and contact: see fenceLoop (nanoseconds; Unix nanoseconds).
	fence, contact atomic.Int64
	// maxData bounds a data input or snapshot in bytes (the server's
	// max_data_size; 0: no limit).
	maxData atomic.Int64
	// jobCtx is canceled after ctx, once the jobs were asked to stop; it
	// bounds the jobs' last reports.
	jobCtx context.Context

	mu   sync.Mutex
	jobs map[string]*job
	// nodeUse measures the node between heartbeats (heartbeat loop only).
	nodeUse nodeSampler
	// ended remembers recently finished assignments, so that one pushed
	// again (a server that missed the final status) is not run twice.
	ended      map[string]bool
	endedOrder []string
	// refused are the assignments refused since the last heartbeat, which
	// reports them; a node runs one assignment at a time.
	refused []string
	wg      sync.WaitGroup
	// inst is set on a compute instance's node (the server's welcome says
	// so); instanceOnce starts its work once per agent process.
	inst         atomic.Pointer[instanceAgent]
	instanceOnce sync.Once
	// ssh counts SSH connections (an instance is not idle while one is
	// open).
	ssh sshCount
	// cache holds downloaded inputs for the node's jobs.
	cache *nodecache.Cache
	// listings are the blob folders' latest listings (listings.go).
	listings listings
	// states are the jobs' state files (state.go).
	states stateFiles
	// mlflow is the jobs' MLflow endpoint (mlflow.go).
	mlflow mlflowEndpoint
	// spares are finished jobs' empty folders, for later jobs (folders.go).
	spares spareFolders
	// beats is the stream that carries the heartbeats, streams the
	// client that opens it (stream.go).
	beats   streamBeats
	streams *http.Client
	// getUntil: until then (Unix ns) streams are opened with GET, since
	// one opened with POST went unanswered (stream.go).
	getUntil atomic.Int64
}

// maxEnded bounds the memory of finished assignments.
const maxEnded = 1000

// markEnded records a finished assignment; a.mu is held.
func (a *agent) markEnded(id string) {
	a.ended[id] = true
	a.endedOrder = append(a.endedOrder, id)
	if len(a.endedOrder) > maxEnded {
		delete(a.ended, a.endedOrder[0])
		a.endedOrder = a.endedOrder[1:]
	}
}

// Run runs the agent until ctx is canceled. It then stops the running jobs
// (SIGTERM, SIGKILL after their grace period), makes a last attempt to
// report them within ShutdownTimeout, and returns nil. It returns an error
// only for an invalid configuration or an unusable Dir.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("creating node folder: %w", err)
	}
	a := &agent{
		cfg:     cfg,
		log:     cfg.Logger.With(slog.String("node", cfg.NodeID)),
		client:  &client{urls: cfg.ServerURLs, token: cfg.Token, hc: cfg.HTTPClient},
		streams: streamClient(cfg.HTTPClient),
		jobs:    make(map[string]*job),
		ended:   make(map[string]bool),
	}
	a.heartbeat.Store(int64(cfg.HeartbeatInterval))
	a.spares.open(filepath.Join(cfg.Dir, "spare"))
	// The unbounded blob cache of earlier versions; the node cache replaces it.
	_ = os.RemoveAll(filepath.Join(cfg.Dir, "cache", "blobs"))
	cache, err := nodecache.Open(filepath.Join(cfg.Dir, "cache", "inputs"), cfg.CacheBytes)
	if err != nil {
		return err
	}
	a.cache = cache

	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	a.jobCtx = jobCtx
	a.recover(ctx)

	var loops sync.WaitGroup
	loops.Go(func() { a.heartbeatLoop(ctx) })
	loops.Go(func() { a.fenceLoop(ctx) })
	a.connectLoop(ctx)
	loops.Wait()

	// Stop the jobs; each one reports how it ended within ShutdownTimeout.
	a.mu.Lock()
	for _, j := range a.jobs {
		j.stop(stopShutdown, "the node's agent is stopping", 0)
	}
	a.mu.Unlock()
	timer := time.AfterFunc(a.maxGrace()+cfg.ShutdownTimeout, cancelJobs)
	defer timer.Stop()
	a.wg.Wait()
	return nil
}

// maxGrace is the longest grace period of the running jobs.
func (a *agent) maxGrace() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var g time.Duration
	for _, j := range a.jobs {
		g = max(g, j.grace())
	}
	return g
}

// connectLoop registers, holds the stream, and starts over after any error.
func (a *agent) connectLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := a.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errStreamHealthy) {
			// The stream worked for a while: reconnect quickly.
			failures = 0
		}
		d := a.backoff(failures)
		failures++
		a.log.WarnContext(ctx, "connection to server lost; reconnecting", slog.Any("error", err), slog.Duration("after", d))
		if !sleepCtx(ctx, d) {
			return
		}
	}
}

// errStreamHealthy marks a stream that ended after delivering data.
var errStreamHealthy = errors.New("stream ended")

// session registers and then reads the event stream until it fails.
func (a *agent) session(ctx context.Context) error {
	if err := a.register(ctx); err != nil {
		return err
	}
	return a.stream(ctx)
}

func (a *agent) register(ctx context.Context) error {
	hello := api.AgentHello{
		NodeID:   a.cfg.NodeID,
		Version:  a.cfg.Version,
		Capacity: a.cfg.Capacity,
		Address:  a.cfg.Address,
		Running:  a.runningStatuses(),
		Runtime:  a.cfg.RuntimeName,
	}
	if k, err := a.hostKey(); err == nil {
		hello.SSHHostKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.PublicKey())))
	} else {
		a.log.WarnContext(ctx, "no SSH host key; SSH into this node will fail", slog.Any("error", err))
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var welcome api.AgentWelcome
	if err := a.client.postJSON(rctx, "/v1/agent/register", hello, &welcome); err != nil {
		return fmt.Errorf("registering: %w", err)
	}
	if welcome.HeartbeatSeconds > 0 {
		a.heartbeat.Store(int64(time.Duration(welcome.HeartbeatSeconds) * time.Second))
	}
	a.maxData.Store(welcome.MaxDataBytes)
	a.fence.Store(int64(time.Duration(welcome.UnusableAfterMS) * time.Millisecond / 2))
	a.contact.Store(time.Now().UnixNano())
	a.log.InfoContext(ctx, "registered", slog.String("server", a.client.base()), slog.Int("running", len(hello.Running)))
	for _, id := range welcome.Cancel {
		a.cancel(api.Cancel{ID: id, Reason: "the server no longer wants this assignment"})
	}
	if welcome.Instance != nil {
		a.startInstance(ctx, welcome.Instance)
	}
	return nil
}

func (a *agent) handleEvent(ctx context.Context, ev sseEvent) {
	switch ev.Name {
	case "assign":
		var as api.Assignment
		if err := json.Unmarshal([]byte(ev.Data), &as); err != nil {
			a.log.ErrorContext(ctx, "bad assign event", slog.Any("error", err))
			return
		}
		a.assign(as)
	case "cancel":
		var c api.Cancel
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			a.log.ErrorContext(ctx, "bad cancel event", slog.Any("error", err))
			return
		}
		a.cancel(c)
	case "ssh":
		var o api.SSHOpen
		if err := json.Unmarshal([]byte(ev.Data), &o); err != nil {
			a.log.ErrorContext(ctx, "bad ssh event", slog.Any("error", err))
			return
		}
		go a.sshOpen(ctx, o)
	default:
		a.log.DebugContext(ctx, "ignoring event", slog.String("event", ev.Name))
	}
}

// assign starts an assignment unless it is already known (the server may
// push it again after a reconnect).
func (a *agent) assign(as api.Assignment) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.jobs[as.ID]; ok || a.ended[as.ID] {
		a.log.Debug("assignment already known", slog.String("assignment", as.ID))
		return
	}
	// A second assignment while one runs means the server's view and
	// this node's differ (a cancel that never arrived): the heartbeat
	// reports the refusal, and the server stops what it no longer places
	// here and sends the assignment again once the node runs nothing.
	for id, other := range a.jobs {
		if other.ended() {
			// Its command is over and its final status on its way:
			// the server frees the node on that report and may push
			// the next job before the report's answer is back.
			continue
		}
		a.log.Warn("refusing an assignment: the node runs another", slog.String("assignment", as.ID), slog.String("running", id))
		if !slices.Contains(a.refused, as.ID) {
			a.refused = append(a.refused, as.ID)
		}
		return
	}
	j := newJob(a, as)
	a.jobs[as.ID] = j
	a.wg.Go(func() {
		j.run()
		a.mu.Lock()
		delete(a.jobs, as.ID)
		a.markEnded(as.ID)
		a.mu.Unlock()
	})
}

func (a *agent) cancel(c api.Cancel) {
	a.mu.Lock()
	j, ok := a.jobs[c.ID]
	a.mu.Unlock()
	if !ok {
		a.log.Info("cancel for an unknown assignment", slog.String("assignment", c.ID))
		return
	}
	reason := c.Reason
	if reason == "" {
		reason = "canceled by the server"
	}
	kind := stopCancel
	if c.Preempt {
		kind = stopPreempt
	}
	j.stop(kind, reason, time.Duration(c.GraceSeconds)*time.Second)
}

// runningStatuses lists the assignments this agent holds, for registration.
func (a *agent) runningStatuses() []api.AssignmentStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]api.AssignmentStatus, 0, len(a.jobs))
	for _, j := range a.jobs {
		out = append(out, j.status())
	}
	return out
}

// heartbeatLoop sends a heartbeat every interval, counted from the last
// one's sending, not from its answer: a server slow to answer (its writer
// busy under load) must not space the heartbeats it hears by the interval
// plus its own delay, which made live nodes look silent and fenced their
// jobs. One heartbeat is in flight at a time.
func (a *agent) heartbeatLoop(ctx context.Context) {
	var sent time.Time
	for {
		if !sleepCtx(ctx, time.Duration(a.heartbeat.Load())-time.Since(sent)) {
			return
		}
		sent = time.Now()
		a.mu.Lock()
		hb := api.AgentHeartbeat{NodeID: a.cfg.NodeID, Refused: a.refused}
		a.refused = nil
		jobs := make([]*job, 0, len(a.jobs))
		for id, j := range a.jobs {
			// A job whose command ended is listed until its final
			// status is delivered: left out, the server would take a
			// rank that had not reported running (a short command
			// reports once, at its end) for one the agent never
			// started, and end it so, or send it again. Once the
			// server ended the rank, it answers with a cancel that
			// stops nothing.
			hb.Running = append(hb.Running, id)
			if !j.ended() {
				jobs = append(jobs, j)
			}
		}
		a.mu.Unlock()
		hb.Usage, hb.Utilization = a.measure(ctx, jobs)
		cs := a.cache.Stats()
		hb.Cache = &cs
		if ia := a.inst.Load(); ia != nil {
			hb.Activity = ia.activity(ctx, hb.Utilization)
		}
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		reply, err := a.sendBeat(hctx, hb)
		if err != nil && ctx.Err() == nil {
			a.log.WarnContext(ctx, "heartbeat failed", slog.Any("error", err))
		}
		if err != nil && len(hb.Refused) > 0 {
			a.mu.Lock()
			a.refused = append(hb.Refused, a.refused...) // the next heartbeat reports them
			a.mu.Unlock()
		}
		for _, id := range reply.Cancel {
			a.cancel(api.Cancel{ID: id, Reason: "the server does not place this assignment on this node (it ended or moved)"})
		}
		if reply.Assign != nil {
			a.assign(*reply.Assign)
		}
		if answered(err) {
			a.contact.Store(time.Now().UnixNano())
		}
		cancel()
	}
}

// measure samples what each running job and the whole node use, from one
// read of the process trees of the agent and of the jobs' processes (a
// container runtime's are not the agent's children) and one of
// nvidia-smi.
func (a *agent) measure(ctx context.Context, jobs []*job) (map[string]api.JobUsage, *api.NodeUtilization) {
	roots := []int{os.Getpid()}
	pids := make([][]int, len(jobs))
	for i, j := range jobs {
		j.mu.Lock()
		pids[i] = handlePids(j.handle)
		j.mu.Unlock()
		roots = append(roots, pids[i]...)
	}
	procs := readProcs(roots...)
	gpu := readGPUs(ctx)
	var out map[string]api.JobUsage
	for i, j := range jobs {
		if len(pids[i]) == 0 {
			continue // still preparing
		}
		if out == nil {
			out = map[string]api.JobUsage{}
		}
		out[j.as.ID] = j.use.add(procs, pids[i], gpu, j.dir)
	}
	return out, a.nodeUse.sample(procs, gpu, time.Now())
}

// backoff returns a jittered exponential delay for the n-th consecutive failure.
func (a *agent) backoff(n int) time.Duration {
	d := a.cfg.MinBackoff << min(n, 20)
	if d > a.cfg.MaxBackoff || d <= 0 {
		d = a.cfg.MaxBackoff
	}
	// Full jitter on the upper half, so that agents of a restarted server
	// do not all come back in the same millisecond.
	return d/2 + rand.N(d/2+1)
}

// sleepCtx waits d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retry calls fn until it succeeds, fails permanently or ctx is done.
func (a *agent) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	for n := 0; ; n++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := fn(rctx)
		cancel()
		if err == nil {
			return nil
		}
		if permanent(err) {
			return err
		}
		d := a.backoff(n)
		a.log.WarnContext(ctx, what+" failed; retrying", slog.Any("error", err), slog.Duration("after", d))
		if !sleepCtx(ctx, d) {
			return fmt.Errorf("%s: giving up: %w", what, errors.Join(err, ctx.Err()))
		}
	}
}
