package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// What a job must be to be queued: its compute, data, environment, shape
// and GPUs, checked in the submission's transaction (admit) or before the
// client uploads its code (CheckJob).

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
	err := tx.PutJob(ctx, j, store.IfAbsent, &api.Event{Time: now, Kind: "Queued", Message: msg})
	if errors.Is(err, store.ErrExists) {
		return nameTaken(ws, j.Name)
	}
	if err != nil {
		return err
	}
	return ignoredSettings(ctx, tx, j)
}

// nameTaken is the refusal of a job whose name another job has.
func nameTaken(ws, name string) *Error {
	e := errorf(409, api.CodeConflict, "name: job %q already exists in workspace %s; job names are unique: choose another name or omit it to get a generated one", name, ws)
	e.Field = "name"
	return e
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
	// The name comes first: a serverless job's compute carries it. At
	// submission it is not read: the job's put creates it only if no job
	// has its name (store.IfAbsent, in admit), which a read before would
	// only repeat, one statement of each job's dispatch.
	switch {
	case j.Name == "" && !preUpload:
		j.Name = newJobName()
	case j.Name != "" && preUpload:
		if _, err := tx.GetJob(ctx, ws, j.Name); err == nil {
			ps.add(nameTaken(ws, j.Name))
		} else if !store.IsNotFound(err) {
			return err
		}
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
