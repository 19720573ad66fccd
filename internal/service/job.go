package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/runmetrics"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// ParseJob parses a job document (YAML or JSON) from a request body.
func (s *Service) ParseJob(body []byte) (*api.Job, error) {
	j, err := spec.ParseJob("request body", body, nil)
	if err != nil {
		return nil, validation(err)
	}
	return j, nil
}

// SubmitJob validates a job and queues it. Everything a job needs is
// checked here, so a job that cannot run is rejected with the reason
// instead of waiting forever.
func (s *Service) SubmitJob(ctx context.Context, ws string, j *api.Job) (*api.Job, error) {
	if err := spec.ValidateJob(j); err != nil {
		return nil, validation(err)
	}
	switch j.Type {
	case api.JobTypePipeline:
		return s.submitPipeline(ctx, ws, j)
	case api.JobTypeSweep:
		return s.submitSweep(ctx, ws, j)
	}
	j.Compute = strings.TrimPrefix(j.Compute, "azureml:")
	j.Serverless = nil // set by the server, from the job's resources
	// The engine is asked outside the transaction; the compute's runtime
	// decides inside it whether the answer matters.
	var engineErr error
	if e := j.Environment; e != nil && (e.Image != "" || e.Build != nil) && s.DockerEngine != nil && slices.Contains(s.runtimes(), "docker") {
		engineErr = s.DockerEngine(ctx)
	}
	ctx = s.lookUpSnapshots(ctx, j)
	var push func() // the placement's, when the job was placed at once
	err := s.inWriteBatch(ctx, func(ctx context.Context, tx store.Tx) error {
		push = nil
		if spec.IsServerless(j) {
			// Its hidden compute is written before the job.
			if _, err := s.workspace(ctx, tx, ws); err != nil {
				return err
			}
		}
		if err := s.checkQueueRoom(ctx, tx, ws); err != nil {
			return err
		}
		// Else the workspace is read only when the job is refused: a job
		// is stored only in a workspace that exists (PutJob fails
		// otherwise), and a read of it on every submission was one
		// statement of each job's dispatch.
		err := s.admit(ctx, tx, ws, j, engineErr)
		if err != nil {
			var missing *Error // (the workspace's 404; a store error keeps err)
			if _, werr := s.workspace(ctx, tx, ws); errors.As(werr, &missing) {
				return werr
			}
			return err
		}
		if s.Placer != nil {
			push, err = s.Placer.PlaceSubmitted(ctx, tx, j)
		}
		return err
	}, func() {
		if push != nil {
			push()
		}
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "job", j.Name)
	}
	return j, nil
}

// admit checks a command job against the workspace (compute, data,
// environment, shape) and queues it, in tx. engineErr is what asking the
// Docker engine answered (nil: not asked, or it answered).
func (s *Service) admit(ctx context.Context, tx store.Tx, ws string, j *api.Job, engineErr error) error {
	if err := s.checkAdmission(ctx, tx, ws, j, engineErr, false); err != nil {
		return err
	}
	if j.ExperimentName == "" {
		j.ExperimentName = "Default"
	}
	if j.DisplayName == "" {
		j.DisplayName = j.Name
	}
	if j.Type == "" {
		j.Type = "command"
	}
	now := s.now()
	j.Workspace = ws
	j.ID = "/workspaces/" + ws + "/jobs/" + j.Name
	j.Status = api.JobQueued
	j.CreatedOn = now
	if j.CreatedBy == "" {
		// Steps of a pipeline keep the pipeline's submitter.
		j.CreatedBy = UserOf(ctx)
	}
	j.StartTime, j.EndTime = time.Time{}, time.Time{}
	j.ExitCode, j.Error, j.LogTail, j.Ranks, j.Attempt = nil, "", nil, nil, 0
	j.PendingReason = "waiting for the scheduler"
	msg := fmt.Sprintf("submitted to compute %s (%d node(s))", j.Compute, j.InstanceCount())
	if sl := j.Serverless; sl != nil && sl.Kubernetes != "" {
		msg = fmt.Sprintf("submitted to Kubernetes compute %s: %d Pod(s) of instance type %s, on nodes of its own (compute %s)", sl.Kubernetes, sl.InstanceCount, sl.InstanceType, j.Compute)
	} else if sl != nil {
		msg = fmt.Sprintf("submitted serverless: %d × %s (%s) in location %s, on nodes of its own (compute %s)", sl.InstanceCount, sl.InstanceType, sl.Tier, sl.Location, j.Compute)
	}
	if err := tx.PutJob(ctx, j, "", &api.Event{Time: now, Kind: "Queued", Message: msg}); err != nil {
		return err
	}
	return ignoredSettings(ctx, tx, j)
}

// CheckJob runs the checks SubmitJob runs, before the client uploads the
// job's code and data: the job's fields, its compute, environment,
// datastores and name, reporting every problem at once. Local paths (code,
// inputs) are left for SubmitJob, since they are uploaded after.
func (s *Service) CheckJob(ctx context.Context, ws string, j *api.Job) error {
	var ps problems
	if err := spec.ValidateJob(j); err != nil {
		ps.add(validation(err))
	}
	if j.Type == api.JobTypePipeline || (j.Type == api.JobTypeSweep && (len(ps) > 0 || j.Trial.Component != nil && j.Trial.Component.Ref != "")) {
		return ps.err() // a pipeline's steps and a registered trial component are checked at submission
	}
	j.Compute = strings.TrimPrefix(j.Compute, "azureml:")
	if j.Type == api.JobTypeSweep {
		// Its trials are checked as command jobs.
		j = sweepProbe(j)
	}
	engineErr := s.engineCheck(ctx, j)
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		if err := ps.add(s.checkAdmission(ctx, tx, ws, j, engineErr, true)); err != nil {
			return err
		}
		return ps.err()
	})
	return s.mapStoreErr(err, "job", j.Name)
}

// engineCheck asks the Docker engine whether it answers, for a job with
// an image when a location runs jobs in Docker (outside any transaction;
// the compute's runtime decides later whether the answer matters).
func (s *Service) engineCheck(ctx context.Context, j *api.Job) error {
	if e := j.Environment; e != nil && (e.Image != "" || e.Build != nil) && s.DockerEngine != nil && slices.Contains(s.runtimes(), "docker") {
		return s.DockerEngine(ctx)
	}
	return nil
}

// checkAdmission checks j against the workspace: compute, environment,
// GPUs, runtime, shape, name and data, collecting every problem. It names
// the job when it has no name. preUpload leaves out the local code and
// inputs the client uploads after this check.
func (s *Service) checkAdmission(ctx context.Context, tx store.Tx, ws string, j *api.Job, engineErr error, preUpload bool) error {
	var ps problems
	// The name comes first: a serverless job's compute carries it.
	if j.Name == "" {
		if !preUpload {
			for {
				j.Name = newJobName()
				if _, err := tx.GetJob(ctx, ws, j.Name); store.IsNotFound(err) {
					break
				}
			}
		}
	} else if _, err := tx.GetJob(ctx, ws, j.Name); err == nil {
		e := errorf(409, api.CodeConflict, "name: job %q already exists in workspace %s; job names are unique: choose another name or omit it to get a generated one", j.Name, ws)
		e.Field = "name"
		ps.add(e)
	} else if !store.IsNotFound(err) {
		return err
	}
	n := len(ps)
	var c *api.Compute // the job's compute, when resolveCompute read it
	if spec.IsServerless(j) && preUpload {
		// Its nodes are made when it is submitted; now only their shape
		// is checked.
		_, _, err := s.serverlessShape(ws, j)
		if err := ps.add(err); err != nil {
			return err
		}
		n = -1
	} else {
		var err error
		c, err = s.resolveCompute(ctx, tx, ws, j, preUpload)
		if err := ps.add(err); err != nil {
			return err
		}
	}
	computeOK := len(ps) == n
	if err := ps.add(s.resolveEnvironment(ctx, tx, ws, j)); err != nil {
		return err
	}
	if err := ps.add(checkSecretRefs(ctx, tx, ws, j.EnvironmentVariables)); err != nil {
		return err
	}
	if computeOK {
		if c == nil {
			// A serverless or Kubernetes job's hidden compute, made now.
			var err error
			if c, err = tx.GetCompute(ctx, ws, j.Compute); err != nil {
				return err
			}
		}
		if err := ps.add(s.checkGPUs(c)); err != nil {
			return err
		}
		if err := ps.add(checkJobIdentity(j, c)); err != nil {
			return err
		}
		if rt := s.Config.Runtime(c.Location); rt == "docker" && j.Environment == nil {
			e := errorf(400, api.CodeValidation, "environment: required on compute %q, which runs jobs in Docker containers (location %s, runtime docker); add environment: {image: IMAGE} or environment: {build: {path: DIR}}", c.Name, c.Location)
			e.Field = "environment"
			ps.add(e)
		} else if rt == "docker" && engineErr != nil {
			e := errorf(400, api.CodeValidation, "environment: compute %q runs jobs in Docker containers (location %s, runtime docker) but no Docker engine answers: %v; start dockerd on the nodes' host, or use a compute whose location has runtime process", c.Name, c.Location, engineErr)
			e.Field = "environment"
			ps.add(e)
		}
		if n := j.InstanceCount(); c.IsInstance() && n > 1 {
			e := errorf(400, api.CodeValidation, "resources.instance_count: %d nodes, but compute instance %q is one node; use instance_count 1 or a compute cluster", n, c.Name)
			e.Field = "resources.instance_count"
			ps.add(e)
		} else if n > c.MaxInstances && c.MaxInstances > 0 {
			// A paused cluster (max_instances 0) queues jobs until it
			// is raised again.
			e := errorf(400, api.CodeValidation, "resources.instance_count: %d nodes exceeds max_instances %d of compute %q, so the job could never start; lower instance_count or run 'tide compute update %s --max-instances %d'", n, c.MaxInstances, c.Name, c.Name, n)
			e.Field = "resources.instance_count"
			ps.add(e)
		}
	}
	// After the name: output paths may say ${{name}}.
	probe := j
	if preUpload {
		probe = withoutLocalData(j)
	}
	if err := ps.add(s.checkData(ctx, tx, ws, probe)); err != nil {
		return err
	}
	return ps.err()
}

// withoutLocalData is a copy of j without the code and inputs that are
// paths on the client's machine (not uploaded yet), for checking the rest
// of its data before the upload.
func withoutLocalData(j *api.Job) *api.Job {
	c := *j
	if _, _, ok := api.ParseBlobRef(c.Code); !ok {
		c.Code = ""
	}
	c.Inputs = map[string]api.JobInput{}
	for name, in := range j.Inputs {
		if kind, _ := spec.ClassifyDataPath(in.Path); api.IsDataType(in.Type) && kind == spec.PathLocal {
			continue
		}
		c.Inputs[name] = in
	}
	c.Outputs = maps.Clone(j.Outputs)
	return &c
}

// problems collects the user errors of several checks, to report at once.
type problems []*Error

// add records err when it is a user error and returns other errors (the
// store failing) for the caller to stop on.
func (p *problems) add(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if len(e.parts) > 0 {
			*p = append(*p, e.parts...)
		} else {
			*p = append(*p, e)
		}
		return nil
	}
	return err
}

// err is nil, the one problem, or all of them in one 400 whose message
// lists each and whose fields are every problem's.
func (p problems) err() error {
	switch len(p) {
	case 0:
		return nil
	case 1:
		return p[0]
	}
	out := &Error{Status: 400, Code: api.CodeValidation, parts: p}
	msgs := make([]string, 0, len(p))
	for _, e := range p {
		msgs = append(msgs, e.Msg)
		if len(e.Fields) > 0 {
			out.Fields = append(out.Fields, e.Fields...)
		} else {
			out.Fields = append(out.Fields, api.FieldProblem{Field: e.Field, Message: e.Msg})
		}
	}
	out.Field = out.Fields[0].Field
	out.Msg = fmt.Sprintf("%d problems:\n  %s", len(p), strings.Join(msgs, "\n  "))
	return out
}

// runtimes lists the configured locations' runtimes.
func (s *Service) runtimes() []string {
	var out []string
	for _, l := range s.Config.Locations {
		out = append(out, s.Config.Runtime(l.Name))
	}
	return out
}

// resolveCompute checks the job's compute and returns it, or, for a
// serverless job (no compute, or compute: serverless) and a job on an
// attached Kubernetes cluster, creates the hidden compute of its nodes
// (preUpload: only checks it could) and returns nil.
func (s *Service) resolveCompute(ctx context.Context, tx store.Tx, ws string, j *api.Job, preUpload bool) (*api.Compute, error) {
	if spec.IsServerless(j) {
		return nil, s.serverless(ctx, tx, ws, j)
	}
	j.Serverless = nil
	// One row on the way of every submission; the list only for the hint.
	c, err := tx.GetCompute(ctx, ws, j.Compute)
	if err != nil && !store.IsNotFound(err) {
		return nil, err
	}
	if err == nil && c.ProvisioningState != api.ProvisioningDeleting && c.ServerlessJob == "" {
		if c.IsKubernetes() {
			return nil, s.kubernetesJob(ctx, tx, ws, j, c, preUpload)
		}
		return c, nil
	}
	computes, err := tx.ListComputes(ctx, ws)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range computes {
		if c.ProvisioningState != api.ProvisioningDeleting && c.ServerlessJob == "" {
			names = append(names, c.Name)
		}
	}
	if !contains(names, j.Compute) {
		hint := "create it with 'tide compute create -f FILE', or remove compute: to run the job serverless"
		if len(names) > 0 {
			hint = "known computes: " + strings.Join(names, ", ") + "; or remove compute: to run the job serverless"
		}
		e := errorf(400, api.CodeValidation, "compute: compute %q not found in workspace %s; %s", j.Compute, ws, hint)
		e.Field = "compute"
		return nil, e
	}
	return nil, nil
}

func (s *Service) job(ctx context.Context, tx store.Tx, ws, name string) (*api.Job, error) {
	if _, err := s.workspace(ctx, tx, ws); err != nil {
		return nil, err
	}
	j, err := tx.GetJob(ctx, ws, name)
	if store.IsNotFound(err) {
		return nil, notFound("job", name, "run 'tide job list' to see the jobs of workspace "+ws)
	}
	return j, err
}

// Job returns one job.
func (s *Service) Job(ctx context.Context, ws, name string) (*api.Job, error) {
	var out *api.Job
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if out, err = s.job(ctx, tx, ws, name); err != nil {
			return err
		}
		out.Cost = s.jobCost(ctx, tx, out)
		jobUsage(ctx, tx, out)
		ms, err := tx.ListMetrics(ctx, ws, name, "")
		if err != nil {
			return err
		}
		out.Metrics = runmetrics.Latest(ms)
		if out.Status != api.JobQueued {
			return nil
		}
		// Counted in the store, over the part of the queue ahead: a job
		// shown (polled) while thousands wait costs what is ahead of it.
		out.QueuePosition, err = tx.QueuePosition(ctx, ws, name)
		return err
	})
	return out, err
}

// setQueuePositions tells each queued job of js, listed by f, its place
// in its compute's queue, in the scheduler's order (higher priority first,
// then older). When f lists every queued job of the computes it lists (no
// limit, no keys, Queued among its statuses), the positions come from js
// itself; otherwise from the queue's keys and priorities (JobVersions),
// not the jobs' documents, so a `job list` costs little even when
// thousands of jobs wait.
func setQueuePositions(ctx context.Context, tx store.Tx, f store.JobFilter, js []ListedJob) error {
	computes := map[string]bool{}
	for _, j := range js {
		if j.Status == api.JobQueued {
			computes[j.Compute] = true
		}
	}
	if len(computes) == 0 {
		return nil
	}
	// The queue in creation order.
	var queued []store.JobVersion
	if f.Limit == 0 && len(f.Keys) == 0 && (len(f.Statuses) == 0 || slices.Contains(f.Statuses, api.JobQueued)) {
		for _, j := range js {
			if j.Status == api.JobQueued {
				queued = append(queued, store.JobVersion{JobKey: store.JobKey{Name: j.Name}, Compute: j.Compute, Priority: j.Priority})
			}
		}
		if f.Newest {
			slices.Reverse(queued)
		}
	} else {
		q := store.JobFilter{Workspace: f.Workspace, Statuses: []string{api.JobQueued}}
		if len(computes) == 1 {
			for c := range computes {
				q.Compute = c
			}
		}
		var err error
		if queued, err = tx.JobVersions(ctx, q); err != nil {
			return err
		}
	}
	// A stable sort keeps the creation order within a priority.
	slices.SortStableFunc(queued, func(a, b store.JobVersion) int { return cmp.Compare(b.Priority, a.Priority) })
	pos, next := map[string]int{}, map[string]int{}
	for _, j := range queued {
		next[j.Compute]++
		pos[j.Name] = next[j.Compute]
	}
	for i, j := range js {
		if p, ok := pos[j.Name]; ok && j.Status == api.JobQueued {
			js[i].QueuePosition = p
		}
	}
	return nil
}

// ListedJob is one job of a list: its document as stored, undecoded (the
// server sends it on as it is), and its place in its compute's queue when
// it is queued (0 otherwise), which the document does not hold.
type ListedJob struct {
	store.JobDoc
	QueuePosition int
}

// Jobs lists the jobs f selects, as stored: a list of 560 jobs spent most
// of its time decoding their documents and encoding them again, for a
// client that decodes them itself.
func (s *Service) Jobs(ctx context.Context, f store.JobFilter) ([]ListedJob, error) {
	var out []ListedJob
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, f.Workspace); err != nil {
			return err
		}
		docs, err := tx.ListJobDocs(ctx, f)
		if err != nil {
			return err
		}
		out = make([]ListedJob, len(docs))
		for i, d := range docs {
			out[i].JobDoc = d
		}
		return setQueuePositions(ctx, tx, f, out)
	})
	return out, err
}

// CancelJob cancels a job: a queued job ends Canceled at once; a running
// one becomes CancelRequested and the controller stops its processes.
func (s *Service) CancelJob(ctx context.Context, ws, name, ifMatch string) (*api.Job, error) {
	var out *api.Job
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		j, err := s.job(ctx, tx, ws, name)
		if err != nil {
			return err
		}
		if err := checkEtag("job", name, j.Etag, ifMatch); err != nil {
			return err
		}
		out = j
		if (j.Type == api.JobTypePipeline || j.Type == api.JobTypeSweep) && j.Status != api.JobCancelRequested && !api.JobTerminal(j.Status) {
			// The steps or trials are canceled by the next turn of the
			// controller (AdvanceParent), which then ends the parent.
			j.Status = api.JobCancelRequested
			if err := tx.PutJob(ctx, j, ""); err != nil {
				return err
			}
			children := "steps"
			if j.Type == api.JobTypeSweep {
				children = "trials"
			}
			return tx.AddEvent(ctx, ws, "job/"+name, &api.Event{Time: s.now(), Kind: "Cancel", Message: "cancel requested; canceling the " + children})
		}
		return s.cancel(ctx, tx, j, "")
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "job", name)
	}
	s.notify()
	return out, nil
}

// cancel cancels a command job in tx: a queued job ends Canceled, a
// running one becomes CancelRequested. why, when not empty, says who
// asked.
func (s *Service) cancel(ctx context.Context, tx store.Tx, j *api.Job, why string) error {
	if api.JobTerminal(j.Status) || j.Status == api.JobCancelRequested {
		return nil
	}
	now := s.now()
	msg := "cancel requested"
	if j.Status == api.JobQueued || j.Status == api.JobNotStarted {
		j.Status, j.EndTime, j.PendingReason = api.JobCanceled, now, ""
		msg = "canceled while queued"
	} else {
		j.Status = api.JobCancelRequested
	}
	if why != "" {
		msg += " (" + why + ")"
	}
	if err := tx.PutJob(ctx, j, ""); err != nil {
		return err
	}
	return tx.AddEvent(ctx, j.Workspace, "job/"+j.Name, &api.Event{Time: now, Kind: "Cancel", Message: msg})
}

// JobMetrics returns the metric values a job logged (of one metric when
// name is not empty), each with its step.
func (s *Service) JobMetrics(ctx context.Context, ws, job, name string) ([]api.Metric, error) {
	var out []api.Metric
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := s.job(ctx, tx, ws, job); err != nil {
			return err
		}
		all, err := tx.ListMetrics(ctx, ws, job, "")
		if err != nil {
			return err
		}
		runmetrics.NumberSteps(all)
		for _, m := range all {
			if name == "" || m.Name == name {
				out = append(out, m)
			}
		}
		return nil
	})
	if out == nil {
		out = []api.Metric{}
	}
	return out, err
}

// Logs returns up to limit log lines after seq.
func (s *Service) Logs(ctx context.Context, ws, name string, after int64, limit int) ([]api.LogLine, *api.Job, error) {
	var lines []api.LogLine
	var job *api.Job
	err := s.Store.View(ctx, func(tx store.Tx) (err error) {
		if job, err = s.job(ctx, tx, ws, name); err != nil {
			return err
		}
		lines, err = tx.ReadLog(ctx, ws, name, after, limit)
		return err
	})
	return lines, job, err
}

// checkGPUs rejects a job whose compute's size has GPUs that the docker
// runtime cannot give its containers: nodes of the local and docker
// providers run on the server's host, whose GPUs HostGPUs counts. (The
// process runtime treats GPUs as logical capacity, and remote hosts are
// checked by their agents.)
func (s *Service) checkGPUs(c *api.Compute) error {
	if s.HostGPUs == nil || s.Config.Runtime(c.Location) != "docker" {
		return nil
	}
	if p := s.Config.ProviderOf(c.Location); p != "local" && p != "docker" {
		return nil
	}
	size, ok := s.Catalog.Lookup(c.Size)
	if !ok || size.GPUs == 0 {
		return nil
	}
	if have := s.HostGPUs(); have < size.GPUs {
		e := errorf(400, api.CodeValidation, "compute %q: size %s has %d GPU(s) per node, but the host of location %s (runtime docker) has %d NVIDIA GPU(s) to pass to containers; use a size without GPUs, or a location on a host with GPUs", c.Name, c.Size, size.GPUs, c.Location, have)
		e.Field = "compute"
		return e
	}
	return nil
}
