package agent

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/agent/runtime"
	"github.com/tideml/tide/internal/nodecache"
)

// defaultGrace is the time between SIGTERM and SIGKILL when neither the
// assignment nor the cancel names one.
const defaultGrace = 10 * time.Second

// stopKind says why a job was asked to stop; the first reason wins.
type stopKind int

const (
	stopNone stopKind = iota
	stopCancel
	stopPreempt
	stopTimeout
	stopShutdown
)

// job is one assignment on this node.
type job struct {
	a   *agent
	as  api.Assignment
	log *slog.Logger

	dir, outputsDir, logsDir, checkpointDir string
	// inputBinds are the inputs the runtime shows read-only (ro_mount);
	// inputMounts the input folders it binds writable (download, and
	// ro_mount copies where it cannot bind read-only). Only the job's own
	// goroutine writes them, before the command starts.
	inputBinds  []runtime.Bind
	inputMounts []string
	// buildDir is where the environment's uploaded build context was
	// unpacked ("" when the assignment names a folder on the node).
	buildDir string
	// held are the node cache's entries the job's binds show; released
	// when the job ends.
	held []*nodecache.Handle

	logs *shipper

	mu         sync.Mutex
	handle     runtime.Handle
	startTime  string // the process's /proc start time, to recognise it after an agent restart
	stopKind   stopKind
	stopReason string
	stopGrace  time.Duration
	final      *api.AssignmentStatus
	// stateFile is the job's state file (saveState); savedState its
	// content as last written.
	stateFile  *stateFile
	savedState []byte
	// asJSON is the assignment's encoding in the state file, made once
	// (nil again when the job's inputs are bound: they are part of it).
	asJSON []byte
	// cancelPrep stops fetching code and inputs when the job is stopped
	// before its command starts.
	cancelPrep context.CancelFunc
	// cancelPrepare ends the runtime's preparation (an image build) when
	// the job is stopped meanwhile.
	cancelPrepare context.CancelFunc

	// running is closed once the Running status was reported (or given
	// up, or skipped: startUnreported); nil when the process never
	// started.
	running chan struct{}
	// startUnreported: the command ended within RunningWait, so the
	// final status reports the start (api.AssignmentStatus.Started).
	startUnreported bool

	// use is what the job's processes used, sampled at each heartbeat.
	use usage
}

func newJob(a *agent, as api.Assignment) *job {
	j := &job{a: a, as: as, log: a.log.With(slog.String("assignment", as.ID))}
	j.dir = filepath.Join(a.cfg.Dir, "jobs", as.Workspace, as.Job, strconv.Itoa(as.Attempt))
	j.outputsDir = filepath.Join(j.dir, "outputs")
	j.logsDir = filepath.Join(j.dir, "logs")
	j.checkpointDir = filepath.Join(a.cfg.Dir, "checkpoints", as.Workspace, as.Job)
	j.logs = newShipper(j)
	return j
}

// status is what the agent reports for j at registration.
func (j *job) status() api.AssignmentStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.final != nil {
		return *j.final
	}
	return api.AssignmentStatus{ID: j.as.ID, NodeRank: j.as.NodeRank, Status: api.JobRunning, LastNodeSeq: j.logs.last()}
}

func (j *job) grace() time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.graceLocked()
}

func (j *job) graceLocked() time.Duration {
	switch {
	case j.stopGrace > 0:
		return j.stopGrace
	case j.as.GraceSeconds > 0:
		return time.Duration(j.as.GraceSeconds) * time.Second
	}
	return defaultGrace
}

// stop asks the job's processes to stop: SIGTERM now, SIGKILL after the
// grace period (grace 0: the assignment's, or 10s).
func (j *job) stop(kind stopKind, reason string, grace time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.stopKind != stopNone || j.final != nil {
		return
	}
	j.stopKind, j.stopReason, j.stopGrace = kind, reason, grace
	j.log.Info("stopping job", slog.String("reason", reason))
	if j.cancelPrep != nil {
		j.cancelPrep()
	}
	if j.cancelPrepare != nil {
		j.cancelPrepare()
	}
	if j.handle != nil {
		j.handle.Stop(j.graceLocked())
	}
}

// run runs the assignment to its end and reports it.
func (j *job) run() {
	j.a.wg.Go(func() { j.logs.loop(j.a.jobCtx) })
	st := j.execute()
	j.finish(st)
}

// execute prepares the folders, runs the command and returns how it ended
// (LastNodeSeq not set yet).
func (j *job) execute() api.AssignmentStatus {
	ctx := j.a.jobCtx
	as := j.as
	defer j.releaseInputs()
	failed := func(msg string) api.AssignmentStatus {
		j.logs.add("tide", "error: "+msg)
		return api.AssignmentStatus{ID: as.ID, NodeRank: as.NodeRank, Status: api.JobFailed, Error: msg}
	}
	for _, part := range []string{as.Workspace, as.Job, strconv.Itoa(as.Attempt)} {
		if !safeName(part) {
			return failed(fmt.Sprintf("assignment %s: workspace, job and attempt must be plain names", as.ID))
		}
	}
	for _, o := range as.Outputs {
		if !safeName(o) {
			return failed(fmt.Sprintf("outputs.%s: output names must be plain names (letters, digits, _ . -)", o))
		}
	}
	if err := j.a.spares.make(j); err != nil {
		return failed(err.Error())
	}
	j.logs.copyTo(j.logFile())
	j.saveState()

	for _, n := range as.Notes {
		j.logs.add("tide", n)
	}
	if err := j.prepare(ctx); err != nil {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.stopKind != stopNone {
			return j.stoppedStatus(nil)
		}
		return failed(err.Error())
	}
	if err := j.restoreCheckpoint(ctx); err != nil {
		return failed(err.Error())
	}
	j.saveState()
	command, err := bindCommand(as.Command, j.as.Inputs, j.outputPaths())
	if err != nil {
		return failed(err.Error())
	}

	plan, err := planLaunch(as, command, j.dir, os.Geteuid() == 0)
	if err != nil {
		return failed(err.Error())
	}
	for _, n := range plan.Notes {
		j.logs.add("tide", n)
	}
	for path, content := range plan.Files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			err = os.WriteFile(path, []byte(content), 0o644)
		}
		if err != nil {
			return failed(fmt.Sprintf("preparing the launcher: %v", err))
		}
	}
	_, isolated := j.a.cfg.Runtime.(runtime.Isolating)
	env, err := j.environ(!isolated)
	if err != nil {
		return failed(err.Error())
	}
	// MLflow's tracking API for the job's run, where the job can reach the
	// agent; a job naming its own tracking server keeps it.
	if hn, ok := j.a.cfg.Runtime.(runtime.HostNetworker); ok && hn.HostNetwork() && j.as.Env["MLFLOW_TRACKING_URI"] == "" {
		ml, mlEnv, err := startMLflow(j)
		if err != nil {
			j.logs.add("tide", "tide: warning: no MLflow endpoint for this job: "+err.Error())
		} else {
			defer ml.close()
			maps.Copy(env, mlEnv)
		}
	}
	if as.Distribution != nil && as.Distribution.Type != distMPI && as.NodeRank == 0 && !portFree(as.MasterPort) {
		j.logs.add("tide", fmt.Sprintf("tide: warning: port %d, chosen for this job's rendezvous, is in use on this node; the launcher may fail to start", as.MasterPort))
	}
	base, err := j.runtimeSpec()
	if err != nil {
		return failed(err.Error())
	}
	if p, ok := j.a.cfg.Runtime.(runtime.Preparer); ok {
		// Without the job's lock, and canceled by stop: a cancel must not
		// wait for an image build.
		pctx, cancel := context.WithCancel(ctx)
		j.mu.Lock()
		j.cancelPrepare = cancel
		stopped := j.stopKind != stopNone
		j.mu.Unlock()
		if stopped {
			cancel()
		}
		err := p.Prepare(pctx, &base)
		cancel()
		if err != nil {
			j.mu.Lock()
			stopped := j.stopKind != stopNone
			st := j.stoppedStatus(nil)
			j.mu.Unlock()
			if stopped {
				return st
			}
			return failed(fmt.Sprintf("preparing the job's environment: %v", err))
		}
	}

	var outs outputs
	j.mu.Lock()
	if j.stopKind != stopNone {
		j.mu.Unlock()
		return j.stoppedStatus(nil)
	}
	var hs []runtime.Handle
	for i, p := range plan.Procs {
		spec := base
		spec.Command, spec.Env = p.Command, envList(env, p.Env)
		spec.Stdout = outs.add(labeled(p.Label, func(s string) { j.logs.add("stdout", s) }))
		spec.Stderr = outs.add(labeled(p.Label, func(s string) { j.logs.add("stderr", s) }))
		if len(plan.Procs) > 1 {
			spec.Name += "-" + strconv.Itoa(i)
		}
		h, err := j.a.cfg.Runtime.Start(ctx, spec)
		if err != nil {
			for _, started := range hs {
				started.Stop(0)
				_, _ = started.Wait()
			}
			j.mu.Unlock()
			return failed(fmt.Sprintf("starting command: %v", err))
		}
		hs = append(hs, h)
	}
	h := newGroup(hs, j.graceLocked())
	j.handle = h
	j.startTime = procStartTime(h.Pid())
	j.mu.Unlock()
	j.saveState()
	j.log.Info("job started", slog.Int("pid", h.Pid()))

	// Report Running in the background: the job must not wait for a
	// restarting server. finish waits for it, so the server always sees
	// Running before the final status. A command that ends within
	// RunningWait is not reported Running: its final status says it
	// started (Config.RunningWait).
	j.running = make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(j.running)
		wait := time.NewTimer(j.a.cfg.RunningWait)
		defer wait.Stop()
		select {
		case <-exited:
			j.mu.Lock()
			j.startUnreported = true
			j.mu.Unlock()
			return
		case <-wait.C:
		}
		_ = j.postStatus(ctx, api.AssignmentStatus{ID: as.ID, NodeRank: as.NodeRank, Status: api.JobRunning, Time: time.Now().UTC()})
	}()

	if as.TimeoutSeconds > 0 {
		limit := time.Duration(as.TimeoutSeconds) * time.Second
		t := time.AfterFunc(limit, func() {
			j.stop(stopTimeout, fmt.Sprintf("timeout: ran longer than limits.timeout %s", limit), 0)
		})
		defer t.Stop()
	}

	code, err := h.Wait()
	close(exited)
	outs.flush()
	if err != nil {
		j.log.Warn("waiting for job", slog.Any("error", err))
	}
	// Outputs with a datastore path are written there when the command
	// ends, whatever its exit code (as Azure uploads them); a job that was
	// stopped writes nothing.
	j.mu.Lock()
	stopped := j.stopKind != stopNone
	j.mu.Unlock()
	var upErr error
	if !stopped && len(as.OutputPaths) > 0 {
		upErr = j.uploadOutputs(ctx)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.stopKind != stopNone {
		return j.stoppedStatus(&code)
	}
	st := api.AssignmentStatus{ID: as.ID, NodeRank: as.NodeRank, Status: api.JobCompleted, ExitCode: &code}
	if code != 0 {
		st.Status, st.Error = api.JobFailed, fmt.Sprintf("exit code %d", code)
	}
	if upErr != nil && code == 0 {
		st.Status, st.Error = api.JobFailed, upErr.Error()
		j.logs.add("tide", "error: "+upErr.Error())
	}
	if r, ok := h.(runtime.ExitReasoner); ok && r.ExitReason() != "" {
		st.Status, st.Error = api.JobFailed, fmt.Sprintf("exit code %d: %s", code, r.ExitReason())
		j.logs.add("tide", "error: "+r.ExitReason())
	}
	return st
}

// runtimeSpec is what every process of the job shares: its folder, image,
// mounts and limits; the command, environment and output are per process.
func (j *job) runtimeSpec() (runtime.Spec, error) {
	spec := runtime.Spec{
		Dir:      j.dir,
		Name:     strings.Join([]string{j.as.Workspace, j.as.Job, strconv.Itoa(j.as.Attempt), strconv.Itoa(j.as.NodeRank)}, "-"),
		Image:    j.as.Image,
		BuildDir: cmp.Or(j.buildDir, j.as.BuildPath),
		Mounts:   append([]string{j.checkpointDir}, j.inputMounts...),
		ReadOnly: j.inputBinds,
		Note:     func(s string) { j.logs.add("tide", s) },
	}
	if j.as.ShmSize != "" {
		n, err := parseShmSize(j.as.ShmSize)
		if err != nil {
			return spec, err
		}
		spec.ShmSize = n
	}
	return spec, nil
}

// parseShmSize reads resources.shm_size: a number of bytes with an
// optional unit b, k, m or g (binary multiples, as Docker reads it).
func parseShmSize(s string) (int64, error) {
	mult := int64(1)
	switch strings.ToLower(s[len(s)-1:]) {
	case "b":
		s = s[:len(s)-1]
	case "k":
		mult, s = 1<<10, s[:len(s)-1]
	case "m":
		mult, s = 1<<20, s[:len(s)-1]
	case "g":
		mult, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("resources.shm_size: %q must be a number with an optional unit b, k, m or g, e.g. 2g", s)
	}
	return n * mult, nil
}

// stoppedStatus is the final status of a job that was asked to stop; j.mu is held.
func (j *job) stoppedStatus(code *int) api.AssignmentStatus {
	st := api.AssignmentStatus{ID: j.as.ID, NodeRank: j.as.NodeRank, ExitCode: code, Error: j.stopReason}
	switch j.stopKind {
	case stopCancel:
		st.Status = api.JobCanceled
	case stopPreempt, stopShutdown:
		// The node is going away (an eviction notice, or the agent itself
		// told to stop by its backend): a node failure, which the server
		// retries under on_node_failure, not a failure of the job.
		st.Status, st.Preempted = api.JobFailed, true
	default:
		st.Status = api.JobFailed
	}
	return st
}

// finish delivers the log lines, the artifacts and the final status, each
// retried until the server takes it (or the agent gives up at shutdown).
func (j *job) finish(st api.AssignmentStatus) {
	ctx := j.a.jobCtx
	j.logs.close()
	st.LastNodeSeq = j.logs.last()
	st.Time = time.Now().UTC()
	if u := j.use.get(); u.Samples > 0 {
		st.Usage = &u
	}
	j.mu.Lock()
	j.final = &st
	j.mu.Unlock()
	j.saveState()
	j.log.Info("job ended", slog.String("status", st.Status), slog.String("error", st.Error))

	<-j.logs.done
	if j.running != nil {
		<-j.running
		j.mu.Lock()
		st.Started = j.startUnreported
		j.mu.Unlock()
		if st.Started {
			// Before the upload, which may retry for long: an agent
			// killed meanwhile sends what its state file holds.
			j.saveState()
		}
	}
	empty, emptied, ok := j.emptyArtifacts()
	if ok {
		j.mu.Lock() // j.final is &st
		st.EmptyArtifacts = empty
		j.mu.Unlock()
	} else if err := j.a.retry(ctx, "uploading artifacts", j.uploadArtifacts); err != nil {
		j.log.Error("artifacts not uploaded", slog.Any("error", err))
	}
	if len(st.EmptyArtifacts) > 0 {
		// An agent restarted before the server takes the status sends
		// what its state file holds: its empty artifacts must be in it.
		j.saveState()
	}
	if err := j.saveCheckpoint(ctx); err != nil {
		j.log.Error("checkpoint not uploaded", slog.Any("error", err))
	}
	if err := j.postStatus(ctx, st); err != nil {
		j.log.Error("final status not reported; it stays in the state folder", slog.Any("error", err))
		return
	}
	j.releaseState()
	j.a.spares.keep(j, emptied)
}

// ended reports whether the job's command is over (its final status is
// set: finish runs once its processes have exited).
func (j *job) ended() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.final != nil
}

func (j *job) postStatus(ctx context.Context, st api.AssignmentStatus) error {
	return j.a.retry(ctx, "reporting status "+st.Status, func(ctx context.Context) error {
		return j.a.client.postJSON(ctx, j.path("status"), st, nil)
	})
}

// path is the assignment's URL path for what; the id contains slashes.
func (j *job) path(what string) string {
	return "/v1/agent/assignments/" + url.PathEscape(j.as.ID) + "/" + what
}

// safeName reports whether s can be one folder name.
func safeName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}

// lineWriter splits a stream into lines. exec copies each stream from one
// goroutine, so it needs no lock.
type lineWriter struct {
	emit func(string)
	buf  []byte
}

// maxLine splits very long lines so one line cannot exhaust memory.
const maxLine = 64 << 10

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(strings.TrimSuffix(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	for len(w.buf) >= maxLine {
		w.emit(string(w.buf[:maxLine]))
		w.buf = w.buf[maxLine:]
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.emit(strings.TrimSuffix(string(w.buf), "\r"))
		w.buf = nil
	}
}

// procStartTime returns field 22 of /proc/<pid>/stat (start time in clock
// ticks since boot), which tells a process from a later one with the same pid.
func procStartTime(pid int) string {
	f := procStat(pid)
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
