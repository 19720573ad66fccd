package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/pipeline"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// StepOutputs hands a step's outputs to the steps after it. The server
// keeps what each job wrote to its outputs (its artifacts); a step's
// output becomes a content-addressed blob the next step's node fetches,
// so no file system is shared between nodes.
type StepOutputs interface {
	// PackOutput returns a blob reference to what job wrote to its output
	// (the one file in it, as blob:HEX/FILE, when file is set).
	PackOutput(ctx context.Context, job *api.Job, output string, file bool) (string, error)
	// CopyOutput copies job's output into another job's output to (a
	// pipeline's own outputs, downloaded with the pipeline).
	CopyOutput(ctx context.Context, job *api.Job, output, toJob, to string) error
}

// submitPipeline checks a pipeline job (its components resolved, each
// step's compute and data), stores it Running and starts the steps that
// depend on no other.
func (s *Service) submitPipeline(ctx context.Context, ws string, j *api.Job) (*api.Job, error) {
	if s.Outputs == nil {
		return nil, errorf(400, api.CodeNotSupported, "type: pipeline jobs are not supported by this server (it keeps no step outputs)")
	}
	err := s.inUpdateWithOutputs(ctx, func(ctx context.Context, tx store.Tx, w *outputWork) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		if err := s.checkQueueRoom(ctx, tx, ws); err != nil {
			return err
		}
		if err := s.resolveComponents(ctx, tx, ws, j); err != nil {
			return err
		}
		if err := spec.ValidateJob(j); err != nil {
			return validation(err)
		}
		if err := s.checkData(ctx, tx, ws, &api.Job{Inputs: j.Inputs}); err != nil {
			return err
		}
		// Output paths are checked on a copy: their placeholders are
		// expanded for each step's job.
		if err := s.checkData(ctx, tx, ws, &api.Job{Outputs: maps.Clone(j.Outputs)}); err != nil {
			return err
		}
		if err := s.checkDefaultDatastore(ctx, tx, ws, j.Settings); err != nil {
			return err
		}
		for _, name := range stepNames(j) {
			if err := s.checkStep(ctx, tx, ws, j, name); err != nil {
				return err
			}
		}
		if j.Name == "" {
			j.Name = s.freeJobName(ctx, tx, ws, "")
		} else if _, err := tx.GetJob(ctx, ws, j.Name); err == nil {
			return nameTaken(ws, j.Name)
		}
		order, err := spec.StepOrder(j)
		if err != nil {
			return validation(err)
		}
		now := s.now()
		j.Workspace, j.ID = ws, "/workspaces/"+ws+"/jobs/"+j.Name
		j.ExperimentName = cmp.Or(j.ExperimentName, spec.DefaultExperimentName)
		j.DisplayName = cmp.Or(j.DisplayName, j.Name)
		j.Status, j.CreatedOn, j.StartTime, j.EndTime = api.JobRunning, now, now, time.Time{}
		j.ExitCode, j.Error, j.LogTail, j.Ranks, j.Attempt, j.PendingReason = nil, "", nil, nil, 0, ""
		j.Steps = nil
		for _, name := range order {
			j.Steps = append(j.Steps, api.PipelineStep{Name: name, Status: api.StepWaiting})
		}
		if err := tx.PutJob(ctx, j, ""); err != nil {
			return err
		}
		if err := tx.AddEvent(ctx, ws, "job/"+j.Name, &api.Event{Time: now, Kind: "Running", Message: fmt.Sprintf("pipeline of %d step(s): %s", len(order), strings.Join(order, ", "))}); err != nil {
			return err
		}
		_, err = s.advance(ctx, tx, w, j)
		return err
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "job", j.Name)
	}
	s.notify()
	return j, nil
}

func stepNames(j *api.Job) []string {
	names := make([]string, 0, len(j.Jobs))
	for name := range j.Jobs {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// resolveComponents replaces each azureml:NAME:VERSION component of the
// steps with a copy of the registered version, which the pipeline keeps
// even if that version is deleted later.
func (s *Service) resolveComponents(ctx context.Context, tx store.Tx, ws string, j *api.Job) error {
	for _, name := range stepNames(j) {
		step := j.Jobs[name]
		if step == nil {
			continue
		}
		c, field := spec.StepComponent(step), "jobs."+name+".component"
		if c == nil || c.Ref == "" {
			continue
		}
		if step.Type == api.JobTypeSweep {
			field = "jobs." + name + ".trial"
		}
		c, err := s.resolveComponent(ctx, tx, ws, field, c.Ref)
		if err != nil {
			return err
		}
		if step.Type == api.JobTypeSweep {
			step.Trial.Component = c
		} else {
			step.Component = c
		}
	}
	return nil
}

// resolveComponent returns a copy of the registered component ref names
// (azureml:NAME:VERSION), for the field that names it.
func (s *Service) resolveComponent(ctx context.Context, tx store.Tx, ws, field, ref string) (*api.Component, error) {
	if f, ok := spec.ComponentFile(ref); ok {
		e := errorf(400, api.CodeValidation, "%s: %s: a component file is read by the CLI (tide job create -f), which sends the component inline; a request must carry it inline or name a registered one (azureml:NAME:VERSION)", field, f)
		e.Field = field
		return nil, e
	}
	r, err := spec.ParseComponentRef(ref)
	if err != nil {
		e := validation(err).(*Error)
		e.Msg, e.Field = field+": "+err.(*spec.FieldError).Message, field
		return nil, e
	}
	c, err := s.component(ctx, tx, ws, r.Name, r.Version)
	var se *Error
	if errors.As(err, &se) {
		se.Msg, se.Field = field+": "+se.Msg, field
		se.Status = 400
		return nil, se
	}
	if err != nil {
		return nil, err
	}
	cp := *c
	cp.Workspace, cp.Etag = "", ""
	return &cp, nil
}

// checkStep checks what a step needs from the workspace before the
// pipeline is accepted: its compute (the step's, else
// settings.default_compute, else the pipeline's, else serverless) and its
// code and data snapshots.
func (s *Service) checkStep(ctx context.Context, tx store.Tx, ws string, p *api.Job, name string) error {
	step, field := p.Jobs[name], "jobs."+name+"."
	probe := &api.Job{Compute: strings.TrimPrefix(step.Compute, "azureml:")}
	if probe.Compute == "" && p.Settings != nil {
		probe.Compute = p.Settings.DefaultCompute
	}
	probe.Compute = cmp.Or(probe.Compute, p.Compute)
	if spec.IsServerless(probe) {
		// The step's job gets nodes of its own when it starts; here its
		// shape is only checked.
		probe.Resources, probe.QueueSettings = step.Resources, step.QueueSettings
		if c := spec.StepComponent(step); probe.Resources == nil && c != nil {
			probe.Resources = c.Resources
		}
		if _, _, err := s.serverlessShape(ws, probe); err != nil {
			return prefixed(err, field)
		}
		probe.Compute = "serverless"
	} else if _, err := s.resolveCompute(ctx, tx, ws, probe, true); err != nil {
		return prefixed(err, field)
	}
	step.Compute = probe.Compute
	probe.Code = step.Code
	if c := spec.StepComponent(step); c != nil {
		probe.Code = c.Code
	}
	probe.Inputs = map[string]api.JobInput{}
	for k, in := range step.Inputs {
		if api.IsDataType(in.Type) {
			probe.Inputs[k] = in
		}
	}
	probe.Outputs = map[string]api.JobOutput{}
	for k, o := range step.Outputs {
		if o.Path != "" {
			probe.Outputs[k] = o
		}
	}
	return prefixed(s.checkData(ctx, tx, ws, probe), field)
}

// checkDefaultDatastore checks a pipeline's settings.default_datastore:
// a datastore of the workspace that nodes can write.
func (s *Service) checkDefaultDatastore(ctx context.Context, tx store.Tx, ws string, set *api.PipelineSettings) error {
	if set == nil || set.DefaultDatastore == "" {
		return nil
	}
	const field = "settings.default_datastore"
	bad := func(format string, args ...any) error {
		e := errorf(400, api.CodeValidation, field+": "+format, args...)
		e.Field = field
		return e
	}
	d, err := s.findDatastore(ctx, tx, ws, set.DefaultDatastore)
	switch {
	case store.IsNotFound(err):
		return bad("datastore %q not found in workspace %s; create it with 'tide datastore create -f ds.yml', or use azureml:workspaceblobstore", set.DefaultDatastore, ws)
	case err != nil:
		return err
	case d.Type != api.DatastoreLocal && d.Type != api.DatastoreAzureBlob:
		return bad("datastore %q has type %s, which nodes cannot write; use a datastore of type local or azure_blob", d.Name, d.Type)
	}
	return nil
}

// prefixed puts a step's field path in front of an error's field.
func prefixed(err error, prefix string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	if e.Field != "" {
		e.Msg = prefix + e.Msg
		e.Field = prefix + e.Field
	}
	return e
}

// freeJobName returns want when no job has it, else a generated name.
func (s *Service) freeJobName(ctx context.Context, tx store.Tx, ws, want string) string {
	if want != "" && len(want) <= 255 {
		if _, err := tx.GetJob(ctx, ws, want); store.IsNotFound(err) {
			return want
		}
	}
	for {
		name := newJobName()
		if _, err := tx.GetJob(ctx, ws, name); store.IsNotFound(err) {
			return name
		}
	}
}

// AdvanceParent moves a running pipeline or sweep on. A pipeline: it
// reads its steps' jobs, starts the steps whose inputs are ready, skips or
// cancels what a failure or a cancel stops, and ends the pipeline when no
// step runs. A sweep: see advanceSweep. It reports whether it changed
// anything. The controller calls it each turn for every unfinished
// pipeline and sweep.
func (s *Service) AdvanceParent(ctx context.Context, ws, name string) (bool, error) {
	changed := false
	err := s.inUpdateWithOutputs(ctx, func(ctx context.Context, tx store.Tx, w *outputWork) error {
		changed = false
		p, err := tx.GetJob(ctx, ws, name)
		if store.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if api.JobTerminal(p.Status) {
			return nil
		}
		switch p.Type {
		case api.JobTypePipeline:
			changed, err = s.advance(ctx, tx, w, p)
		case api.JobTypeSweep:
			changed, err = s.advanceSweep(ctx, tx, p)
		}
		return err
	})
	return changed, err
}

// putIfChanged writes parent job j unless its JSON is still before (what
// it was when its advance began); it says whether it wrote.
func putIfChanged(ctx context.Context, tx store.Tx, j *api.Job, before []byte) (bool, error) {
	after, err := json.Marshal(j)
	if err != nil {
		return false, err
	}
	if string(before) == string(after) {
		return false, nil
	}
	return true, tx.PutJob(ctx, j, "")
}

// advance is AdvancePipeline in tx; it writes p when it changed.
func (s *Service) advance(ctx context.Context, tx store.Tx, w *outputWork, p *api.Job) (bool, error) {
	before, _ := json.Marshal(p)
	for i, st := range p.Steps {
		if st.Job == "" || api.JobTerminal(st.Status) {
			continue
		}
		child, err := tx.GetJob(ctx, p.Workspace, st.Job)
		if err != nil {
			return false, fmt.Errorf("step %s of pipeline %s: %w", st.Name, p.Name, err)
		}
		p.Steps[i].Status = child.Status
	}
	now := s.now()
	for {
		d := pipeline.Decide(p)
		for _, job := range d.Cancel {
			child, err := tx.GetJob(ctx, p.Workspace, job)
			if err != nil {
				return false, err
			}
			why := "pipeline " + p.Name + " was canceled"
			if p.Status != api.JobCancelRequested {
				why = "pipeline " + p.Name + " stops after a failed step"
			}
			if err := s.cancel(ctx, tx, child, why); err != nil {
				return false, err
			}
			p.Steps[stepIndex(p, child.Step)].Status = child.Status
		}
		for _, name := range d.Skip {
			p.Steps[stepIndex(p, name)].Status = api.StepSkipped
		}
		for _, name := range d.Start {
			if err := s.startStep(ctx, tx, w, p, name); err != nil {
				return false, err
			}
		}
		if d.Status != "" {
			if err := s.endPipeline(ctx, tx, w, p, d, now); err != nil {
				return false, err
			}
			break
		}
		if len(d.Start) == 0 && len(d.Skip) == 0 {
			break
		}
		// A reused step completes at once: decide again.
	}
	return putIfChanged(ctx, tx, p, before)
}

func stepIndex(p *api.Job, name string) int {
	for i, st := range p.Steps {
		if st.Name == name {
			return i
		}
	}
	panic("pipeline " + p.Name + " has no step " + name)
}

// startStep submits a step's command job, or reuses the outputs of an
// earlier job that did the same work. A step that cannot be admitted (its
// environment is gone, a compute was deleted) fails, with the reason in
// the pipeline's events.
func (s *Service) startStep(ctx context.Context, tx store.Tx, w *outputWork, p *api.Job, name string) error {
	i := stepIndex(p, name)
	ref := func(step, out string, file bool) (string, error) {
		job, err := outputJob(ctx, tx, p.Workspace, p.Steps[stepIndex(p, step)].Job)
		if err != nil {
			return "", err
		}
		return w.pack(job, out, file)
	}
	now := s.now()
	fail := func(msg string) error {
		p.Steps[i].Status = api.JobFailed
		return tx.AddEvent(ctx, p.Workspace, "job/"+p.Name, &api.Event{Time: now, Kind: "StepFailed", Message: "step " + name + ": " + msg})
	}
	child, err := pipeline.StepJob(p, name, ref)
	if errors.Is(err, errOutputWork) {
		return err
	}
	if err != nil {
		return fail(err.Error())
	}
	step := p.Jobs[name]
	// A sweep samples anew each run: its step is never reused.
	deterministic := step.Type != api.JobTypeSweep && (step.Component == nil || step.Component.Deterministic())
	if deterministic && (p.Settings == nil || !p.Settings.ForceRerun) {
		old, err := s.reusable(ctx, tx, p.Workspace, child.ReuseKey)
		if err != nil {
			return err
		}
		if old != nil {
			p.Steps[i].Job, p.Steps[i].Status, p.Steps[i].ReusedFrom = old.Name, api.JobCompleted, old.Name
			return tx.AddEvent(ctx, p.Workspace, "job/"+p.Name, &api.Event{Time: now, Kind: "StepReused", Message: fmt.Sprintf("step %s reuses the outputs of job %s (same component, code, environment and inputs; settings.force_rerun: true runs it again)", name, old.Name)})
		}
	}
	child.Name = s.freeJobName(ctx, tx, p.Workspace, p.Name+"-"+name)
	child.CreatedBy = p.CreatedBy
	admit := func() error { return s.admit(ctx, tx, p.Workspace, child, nil) }
	if child.Type == api.JobTypeSweep {
		admit = func() error { return s.startSweep(ctx, tx, p.Workspace, child, nil) }
	}
	if err := admit(); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return fail(e.Msg)
		}
		return err
	}
	p.Steps[i].Job, p.Steps[i].Status = child.Name, child.Status
	return tx.AddEvent(ctx, p.Workspace, "job/"+p.Name, &api.Event{Time: now, Kind: "StepStarted", Message: fmt.Sprintf("step %s runs as job %s on compute %s", name, child.Name, child.Compute)})
}

// outputJob is the job whose outputs are step job's: its own, or a sweep
// step's best trial's, as in Azure.
func outputJob(ctx context.Context, tx store.Tx, ws, job string) (*api.Job, error) {
	j, err := tx.GetJob(ctx, ws, job)
	if err != nil {
		return nil, err
	}
	if j.Type != api.JobTypeSweep {
		return j, nil
	}
	if j.BestTrial == "" {
		return nil, fmt.Errorf("sweep %s has no best trial to take outputs from", job)
	}
	return tx.GetJob(ctx, ws, j.BestTrial)
}

// reusable finds the newest completed job with the same reuse key.
func (s *Service) reusable(ctx context.Context, tx store.Tx, ws, key string) (*api.Job, error) {
	done, err := tx.ListJobs(ctx, store.JobFilter{Workspace: ws, Statuses: []string{api.JobCompleted}, Newest: true})
	if err != nil {
		return nil, err
	}
	for i := range done {
		if done[i].ReuseKey == key && done[i].Parent != "" {
			return &done[i], nil
		}
	}
	return nil, nil
}

// endPipeline records a pipeline's end and gathers the outputs of
// completed steps bound to its own outputs.
func (s *Service) endPipeline(ctx context.Context, tx store.Tx, w *outputWork, p *api.Job, d pipeline.Decision, now time.Time) error {
	for _, st := range p.Steps {
		if st.Status != api.JobCompleted {
			continue
		}
		for out, o := range p.Jobs[st.Name].Outputs {
			b, ok := spec.ParseBinding(o.Bind)
			if !ok || !b.Output {
				continue
			}
			job, err := outputJob(ctx, tx, p.Workspace, st.Job)
			if err == nil {
				err = w.copy(job, out, p.Name, b.Name)
			}
			if errors.Is(err, errOutputWork) {
				return err
			}
			if err != nil {
				d.Status = api.JobFailed
				d.Error = fmt.Sprintf("outputs.%s: copying output %s of step %s: %v", b.Name, out, st.Name, err)
			}
		}
	}
	p.Status, p.Error, p.EndTime = d.Status, d.Error, now
	msg := "all steps completed"
	switch d.Status {
	case api.JobCanceled:
		msg = "canceled"
	case api.JobFailed:
		msg = d.Error
	}
	return tx.AddEvent(ctx, p.Workspace, "job/"+p.Name, &api.Event{Time: now, Kind: d.Status, Message: msg})
}

// ChildJobs lists the jobs that ran the steps of pipeline parent, in step
// order (reused jobs of earlier pipelines included), or the trials of
// sweep parent in the order they started.
func (s *Service) ChildJobs(ctx context.Context, ws, parent string) ([]api.Job, error) {
	out := []api.Job{}
	err := s.Store.View(ctx, func(tx store.Tx) error {
		p, err := s.job(ctx, tx, ws, parent)
		if err != nil {
			return err
		}
		var children []string
		switch p.Type {
		case api.JobTypePipeline:
			for _, st := range p.Steps {
				children = append(children, st.Job)
			}
		case api.JobTypeSweep:
			for _, t := range p.Trials {
				children = append(children, t.Job)
			}
		default:
			e := errorf(400, api.CodeValidation, "parent: job %s is a %s job, not a pipeline or a sweep; it has no child jobs", parent, p.Type)
			e.Field = "parent"
			return e
		}
		for _, child := range children {
			if child == "" {
				continue
			}
			j, err := tx.GetJob(ctx, ws, child)
			if err != nil {
				return err
			}
			out = append(out, *j)
		}
		return nil
	})
	return out, err
}
