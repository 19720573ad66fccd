package service

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/runmetrics"
	"github.com/tideml/tide/internal/store"
)

// Register records an agent's registration and reconciles what it runs
// with what the store says it should run. It returns the assignments the
// agent must stop.
func (s *Service) Register(ctx context.Context, nodeID string, h api.AgentHello) (*api.AgentWelcome, error) {
	w := &api.AgentWelcome{HeartbeatSeconds: int(s.Config.HeartbeatInterval.Seconds()), MaxDataBytes: int64(s.Config.MaxDataSize),
		UnusableAfterMS: s.Config.UnusableAfter.Milliseconds()}
	if w.HeartbeatSeconds < 1 {
		w.HeartbeatSeconds = 1
	}
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		w.Cancel = nil
		n, err := tx.GetNode(ctx, nodeID)
		if store.IsNotFound(err) {
			return notFound("node", nodeID, "the node was deleted; stop this agent")
		}
		if err != nil {
			return err
		}
		now := s.now()
		n.LastHeartbeat = now
		n.Address = h.Address
		n.Runtime = h.Runtime
		n.SSHHostKey = h.SSHHostKey
		n.VCPUs, n.MemoryGB, n.GPUs, n.GPUDevices = h.Capacity.VCPUs, h.Capacity.MemoryGB, h.Capacity.GPUs, h.Capacity.GPUDevices
		kept := false
		for _, r := range h.Running {
			ws, name, attempt, err := ParseAssignmentID(r.ID)
			if err != nil {
				continue
			}
			j, err := tx.GetJob(ctx, ws, name)
			if err != nil || j.Attempt != attempt || api.JobTerminal(j.Status) || r.NodeRank < 0 || r.NodeRank >= len(j.Ranks) ||
				j.Ranks[r.NodeRank].Node != nodeID || api.JobTerminal(j.Ranks[r.NodeRank].Status) {
				// Not (or no longer) this node's: a rank the store ended
				// (lost with its node, then the agent came back) is
				// stopped, and the node is not kept running for it.
				w.Cancel = append(w.Cancel, r.ID)
				continue
			}
			kept = true
			if j.Ranks[r.NodeRank].Status == "" {
				j.Ranks[r.NodeRank].Status = api.JobRunning
				if err := tx.PutJob(ctx, j, ""); err != nil {
					return err
				}
			}
		}
		if n.RegisteredOn.IsZero() {
			n.RegisteredOn = now
		}
		if c, err := tx.GetCompute(ctx, n.Workspace, n.Compute); err == nil && c.IsInstance() {
			w.Instance = instanceSetup(c)
		}
		switch {
		case n.State == api.NodeLeaving, n.State == api.NodePreempted:
			// Going away whatever its agent says: a preempted node's job
			// gets its eviction notice (controller.preempting) and the
			// node is removed, not made running or idle again.
		case kept || n.Job != "":
			if n.State != api.NodeRunning {
				n.State, n.StateSince = api.NodeRunning, now
			}
		case n.State != api.NodeIdle:
			n.State, n.StateSince = api.NodeIdle, now
			n.Error = ""
		}
		return tx.PutNode(ctx, n)
	})
	if err != nil {
		return nil, err
	}
	s.Recheck(nodeID) // its next heartbeat reconciles with the store
	s.notify()
	return w, nil
}

// Pending returns what a connecting agent must be told: the assignment of
// the job its node holds if the agent has not started it, or a cancel.
func (s *Service) Pending(ctx context.Context, nodeID string, runtime string) (assign *api.Assignment, cancel *api.Cancel, err error) {
	err = s.Store.View(ctx, func(tx store.Tx) error {
		n, err := tx.GetNode(ctx, nodeID)
		if err != nil || n.Job == "" {
			return err
		}
		ws, name, attempt, err := ParseAssignmentID(n.Job)
		if err != nil {
			return nil
		}
		j, err := tx.GetJob(ctx, ws, name)
		if err != nil || j.Attempt != attempt {
			return nil
		}
		rank := -1
		for i, r := range j.Ranks {
			if r.Node == nodeID {
				rank = i
			}
		}
		if rank < 0 || api.JobTerminal(j.Ranks[rank].Status) {
			return nil
		}
		if j.Status == api.JobCancelRequested {
			cancel = &api.Cancel{ID: n.Job, Reason: "canceled", GraceSeconds: int(s.Config.CancelGrace.Seconds())}
			return nil
		}
		if j.Ranks[rank].Status == "" && (j.Status == api.JobPreparing || j.Status == api.JobRunning) && n.State == api.NodeRunning {
			// (A finalizing job's or a leaving node's rank is not
			// started: the controller stops the job.)
			addrs, err := s.addresses(ctx, tx, j)
			if err != nil {
				return err
			}
			a := AssignmentFor(j, rank, addrs, runtime, int(s.Config.CancelGrace.Seconds()))
			var c *api.Compute
			if s.IdentityToken != nil {
				if c, err = tx.GetCompute(ctx, j.Workspace, j.Compute); err != nil && !store.IsNotFound(err) {
					return err
				}
			}
			js, err := LoadJobSecrets(ctx, tx, s.SecretBox, j, c, s.IdentityToken)
			if err != nil {
				return err
			}
			js.Apply(&a)
			assign = &a
		}
		return nil
	})
	return assign, cancel, err
}

func (s *Service) addresses(ctx context.Context, tx store.Tx, j *api.Job) ([]string, error) {
	addrs := make([]string, len(j.Ranks))
	for i, r := range j.Ranks {
		n, err := tx.GetNode(ctx, r.Node)
		if store.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		addrs[i] = n.Address
	}
	return addrs, nil
}

// AppendLogs stores a batch of log lines from an agent.
func (s *Service) AppendLogs(ctx context.Context, nodeID, assignment string, lines []api.LogLine) error {
	ws, name, attempt, err := ParseAssignmentID(assignment)
	if err != nil {
		return err
	}
	for i := range lines {
		lines[i].Attempt = attempt
		// As the agent does (an older one may not): no store keeps a NUL.
		lines[i].Text = noNUL(lines[i].Text)
		lines[i].Stream = noNUL(lines[i].Stream)
	}
	trialMetrics := false
	defer func() {
		if trialMetrics {
			// Its sweep's early termination policy looks at them now.
			s.notify()
		}
	}()
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if err := nodeMayLog(ctx, tx, nodeID, ws, name); err != nil {
			return err
		}
		if err := tx.AppendLog(ctx, ws, name, lines); err != nil {
			return err
		}
		// Metric lines are read once the store numbered the lines, so
		// a resent batch stores its metrics once.
		ms, problems := runmetrics.FromLines(lines)
		if len(problems) > 0 {
			msg := fmt.Sprintf("metric line not stored: %s (the form is %sNAME=VALUE [step=N])", problems[0], api.MetricPrefix)
			if len(problems) > 1 {
				msg += fmt.Sprintf("; and %d more in the same batch", len(problems)-1)
			}
			if err := tx.AddEvent(ctx, ws, "job/"+name, &api.Event{Time: s.now(), Kind: "Metrics", Message: msg}); err != nil {
				return err
			}
		}
		params, tags, pproblems := runmetrics.Properties(lines)
		if len(pproblems) > 0 {
			if err := tx.AddEvent(ctx, ws, "job/"+name, &api.Event{Time: s.now(), Kind: "Metrics",
				Message: "parameter or tag line not stored: " + pproblems[0] + " (the form is ##tide param NAME=VALUE or ##tide tag NAME=VALUE)"}); err != nil {
				return err
			}
		}
		if len(ms) > 0 || len(params) > 0 || len(tags) > 0 {
			j, err := tx.GetJob(ctx, ws, name)
			if err != nil {
				return err
			}
			trialMetrics = len(ms) > 0 && j.Parent != "" && j.Parameters != nil
			if len(params) > 0 || len(tags) > 0 {
				j.Params = mergeStrings(j.Params, params)
				j.Tags = mergeStrings(j.Tags, tags)
				if err := tx.PutJob(ctx, j, ""); err != nil {
					return err
				}
			}
		}
		return tx.AddMetrics(ctx, ws, name, ms)
	})
}

// finishRank frees the rank's node and, when every rank has ended, ends the
// job. It returns the event that says so (none while ranks run), which the
// caller records with its write of j (store.Tx.PutJob).
func finishRank(ctx context.Context, tx store.Tx, j *api.Job, rank int, now time.Time) ([]*api.Event, error) {
	r := j.Ranks[rank]
	// The node is freed in one statement, unread: its job cleared if it
	// is still this attempt, and a running node made idle.
	state, reason := api.NodeIdle, ""
	if r.NodeFailure {
		// The node's own agent ended the attempt because it is stopping
		// (its backend is taking the node away: scancel, a Pod eviction,
		// a shutdown). It must not get the retry; the controller's
		// provider check says why it went (preempted or gone) and
		// removes it.
		state, reason = api.NodeLeaving, cmp.Or(r.Error, "its agent is stopping")
	}
	if err := tx.ReleaseNode(ctx, r.Node, AssignmentID(j.Workspace, j.Name, j.Attempt), state, reason, now); err != nil {
		return nil, err
	}
	switch {
	case j.Status != api.JobRunning && j.Status != api.JobPreparing:
	case r.Status != api.JobCompleted:
		// One failing rank fails the job; seeing it Finalizing, the
		// controller stops the other ranks.
		j.Status = api.JobFinalizing
		if j.Error == "" {
			j.Error = fmt.Sprintf("node %d: %s", rank, rankError(r))
			j.ExitCode = r.ExitCode
		}
	case rank == 0 && mpiLaunched(j):
		// mpirun on node 0 ran every process; the other nodes only held
		// their slots and are stopped now.
		j.Status = api.JobFinalizing
	}
	for _, r := range j.Ranks {
		if !api.JobTerminal(r.Status) {
			return nil, nil
		}
	}
	return endJob(ctx, tx, j, now)
}

// mpiLaunched reports whether node 0 launches every process of the job
// with mpirun (distribution type mpi).
func mpiLaunched(j *api.Job) bool {
	return j.Distribution != nil && j.Distribution.Type == "mpi"
}

// StopReason is what the controller tells the nodes of a job it stops.
func StopReason(j *api.Job) string {
	switch {
	case j.Status != api.JobFinalizing:
		return "canceled"
	case j.Error == "" && mpiLaunched(j):
		return "mpirun on node 0 finished"
	}
	return "another node of the job failed"
}

func rankError(r api.JobRank) string {
	if r.Error != "" {
		return r.Error
	}
	if r.ExitCode != nil {
		return fmt.Sprintf("exit code %d", *r.ExitCode)
	}
	return strings.ToLower(r.Status)
}

// endJob sets a job's final status from its ranks and keeps its log tail,
// or requeues it; it returns the event that says which.
func endJob(ctx context.Context, tx store.Tx, j *api.Job, now time.Time) ([]*api.Event, error) {
	status := api.JobCompleted
	for i, r := range j.Ranks {
		switch {
		case j.Status == api.JobCancelRequested:
			status = api.JobCanceled
		case r.Status == api.JobFailed && status != api.JobCanceled:
			status = api.JobFailed
			if j.Error == "" {
				j.Error = fmt.Sprintf("node %d: %s", i, rankError(r))
			}
		case r.Status == api.JobCanceled && status == api.JobCompleted && !(i > 0 && mpiLaunched(j) && j.Ranks[0].Status == api.JobCompleted):
			status = api.JobFailed
		}
	}
	if status == api.JobCompleted {
		j.Error = ""
		zero := 0
		j.ExitCode = &zero
	}
	if status == api.JobCanceled {
		j.Error = "canceled by the user"
	}
	if len(j.Ranks) == 1 && j.ExitCode == nil {
		j.ExitCode = j.Ranks[0].ExitCode
	}
	if status == api.JobFailed {
		if e := requeue(j, now); e != nil {
			return []*api.Event{e}, nil
		}
	}
	j.Status, j.EndTime, j.PendingReason = status, now, ""
	if status == api.JobFailed {
		tail, err := logTail(ctx, tx, j, 20)
		if err != nil {
			return nil, err
		}
		j.LogTail = tail
	}
	// The kind says the status; the message says why (not the status
	// again).
	msg := j.Error
	if msg == "" {
		msg = "every node exited 0"
	}
	return []*api.Event{{Time: now, Kind: status, Message: msg}}, nil
}

// logTail is the last n lines of j's log, prefixed with their node's rank
// on a job of several nodes.
func logTail(ctx context.Context, tx store.Tx, j *api.Job, n int) ([]string, error) {
	var tail []string
	var after int64
	multi := j.InstanceCount() > 1
	for {
		lines, err := tx.ReadLog(ctx, j.Workspace, j.Name, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			tail = append(tail, l.Display(multi))
			after = l.Seq
		}
		if len(tail) > n {
			tail = tail[len(tail)-n:]
		}
		if len(lines) < 1000 {
			return tail, nil
		}
	}
}

// ForceEnd ends an unfinished job with status and reason, whatever its
// attempt (used when its compute is deleted).
func ForceEnd(ctx context.Context, st store.Store, ws, name, status, reason string, now time.Time) (bool, error) {
	return forceEnd(ctx, st, ws, name, -1, status, reason, now)
}

// ForceEndAttempt ends attempt `attempt` of a job with status and reason
// when that attempt is still the job's current one and unfinished (used
// when its nodes are lost). It reports whether it ended the job.
func ForceEndAttempt(ctx context.Context, st store.Store, ws, name string, attempt int, status, reason string, now time.Time) (bool, error) {
	return forceEnd(ctx, st, ws, name, attempt, status, reason, now)
}

func forceEnd(ctx context.Context, st store.Store, ws, name string, attempt int, status, reason string, now time.Time) (bool, error) {
	return endAttempt(ctx, st, ws, name, attempt, status, reason, false, now)
}

// NodeLost ends attempt `attempt` of a job whose node was lost (preempted,
// unusable, gone): the job is retried under its retry setting for node
// failures, else it fails with reason. It reports whether it ended the
// attempt.
func NodeLost(ctx context.Context, st store.Store, ws, name string, attempt int, reason string, now time.Time) (bool, error) {
	return endAttempt(ctx, st, ws, name, attempt, api.JobFailed, reason, true, now)
}

// RankLost ends the ranks that attempt `attempt` of a job ran on a lost
// node (Failed, a node failure) and leaves the job's other ranks to the
// way a failing rank ends a gang: the job is Finalizing, the controller
// stops the other ranks, and the attempt ends (retried under
// on_node_failure) once each has ended. NodeLost instead ends the attempt
// at once and frees the other ranks' nodes while their processes still
// run, so a retry could start beside them.
func RankLost(ctx context.Context, st store.Store, ws, name string, attempt int, node, reason string, now time.Time) error {
	return st.Update(ctx, func(tx store.Tx) error {
		j, err := tx.GetJob(ctx, ws, name)
		if store.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if api.JobTerminal(j.Status) || j.Attempt != attempt {
			return nil
		}
		var events []*api.Event
		for i := range j.Ranks {
			if r := &j.Ranks[i]; r.Node == node && !api.JobTerminal(r.Status) {
				r.Status, r.Error, r.NodeFailure = api.JobFailed, reason, true
				es, err := finishRank(ctx, tx, j, i, now)
				if err != nil {
					return err
				}
				events = append(events, es...)
			}
		}
		return tx.PutJob(ctx, j, "", events...)
	})
}

func endAttempt(ctx context.Context, st store.Store, ws, name string, attempt int, status, reason string, nodeFailure bool, now time.Time) (bool, error) {
	ended := false
	err := st.Update(ctx, func(tx store.Tx) error {
		ended = false
		j, err := tx.GetJob(ctx, ws, name)
		if store.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if api.JobTerminal(j.Status) || attempt >= 0 && j.Attempt != attempt {
			return nil
		}
		id := AssignmentID(ws, name, j.Attempt)
		for i := range j.Ranks {
			r := &j.Ranks[i]
			if n, err := tx.GetNode(ctx, r.Node); err == nil && n.Job == id {
				n.Job = ""
				if n.State == api.NodeRunning {
					n.State, n.StateSince = api.NodeIdle, now
				}
				if err := tx.PutNode(ctx, n); err != nil {
					return err
				}
			}
			if !api.JobTerminal(r.Status) {
				r.Status, r.Error, r.NodeFailure = status, reason, nodeFailure
			}
		}
		ended = true
		if status == api.JobFailed && j.Status != api.JobCancelRequested {
			j.Error = reason
			if e := requeue(j, now); e != nil {
				return tx.PutJob(ctx, j, "", e)
			}
		}
		j.Status, j.EndTime, j.PendingReason, j.Error = status, now, "", reason
		if status == api.JobFailed {
			tail, err := logTail(ctx, tx, j, 20)
			if err != nil {
				return err
			}
			j.LogTail = tail
		}
		return tx.PutJob(ctx, j, "", &api.Event{Time: now, Kind: status, Message: reason})
	})
	return ended, err
}

// requeue puts a failed attempt's job back in the queue when its retry
// setting allows: after a node failure (a rank's node was preempted or
// lost) under tide.retries.on_node_failure, after a non-zero exit under
// tide.retries.on_exit_code. The job keeps its name, logs and checkpoint;
// the next attempt gets a new number. It returns the event that says so,
// for the caller to record with its write of j, or nil (j unchanged) when
// no retry is left.
func requeue(j *api.Job, now time.Time) *api.Event {
	nodeFailure := false
	for _, r := range j.Ranks {
		nodeFailure = nodeFailure || r.NodeFailure
	}
	onNode, onExit := j.RetryLimits()
	cause, used, limit := "a non-zero exit", &j.Retried.ExitCode, onExit
	if nodeFailure {
		cause, used, limit = "a node failure", &j.Retried.NodeFailure, onNode
	}
	if *used >= limit {
		return nil
	}
	*used++
	reason := j.Error
	msg := fmt.Sprintf("attempt %d ended by %s (%s); retry %d of %d", j.Attempt, cause, reason, *used, limit)
	j.Status, j.PendingReason = api.JobQueued, "requeued after "+cause+"; waiting for the scheduler"
	j.Error, j.ExitCode, j.EndTime = "", nil, time.Time{}
	return &api.Event{Time: now, Kind: "Requeued", Message: msg}
}

// nodeMayLog lets a node add log lines to a job it runs or ran: one of the
// job's ranks, or a node of the job's compute (whose late lines of an
// earlier attempt may arrive after the job moved on). A node token cannot
// write into another compute's or workspace's jobs.
func nodeMayLog(ctx context.Context, tx store.Tx, nodeID, ws, name string) error {
	j, err := tx.GetJob(ctx, ws, name)
	if err != nil {
		return err
	}
	for _, r := range j.Ranks {
		if r.Node == nodeID {
			return nil
		}
	}
	if n, err := tx.GetNode(ctx, nodeID); err == nil && n.Workspace == ws && n.Compute == j.Compute {
		return nil
	} else if err != nil && !store.IsNotFound(err) {
		return err
	}
	return errorf(403, "Forbidden", "node %s does not run job %s", nodeID, name)
}

// mergeStrings adds add's entries to m (a new map when m is nil).
func mergeStrings(m, add map[string]string) map[string]string {
	if len(add) == 0 {
		return m
	}
	if m == nil {
		m = make(map[string]string, len(add))
	}
	maps.Copy(m, add)
	return m
}

// noNUL replaces NUL characters, which no store keeps (PostgreSQL refuses
// them in text and jsonb), with U+FFFD, as an invalid byte is shown.
func noNUL(s string) string {
	if !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}
