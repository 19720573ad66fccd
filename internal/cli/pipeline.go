package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// preparePipeline reads the component files a pipeline's steps name,
// resolves environment files, and uploads code folders and local data, all
// relative to the file that names them (the pipeline's or the
// component's), as Azure ML reads them. It validates the result.
func (r *run) preparePipeline(ctx context.Context, cl *api.Client, file string, j *api.Job) error {
	base := fileBase(file)
	if err := r.uploadInputs(ctx, cl, base, "inputs.", j.Inputs); err != nil {
		return err
	}
	for _, name := range sortedKeys(j.Jobs) {
		s, field := j.Jobs[name], "jobs."+name
		if s == nil {
			continue
		}
		cfield, set := field+".component", func(c *api.Component) { s.Component = c }
		if s.Type == api.JobTypeSweep && s.Trial != nil {
			cfield, set = field+".trial", func(c *api.Component) { s.Trial.Component = c }
		}
		switch c := spec.StepComponent(s); {
		case c != nil && c.Ref != "":
			if _, ok := spec.ComponentFile(c.Ref); ok {
				comp, err := r.readComponentFile(ctx, cl, file, cfield, c.Ref)
				if err != nil {
					return err
				}
				set(comp)
			}
		case c != nil:
			if err := r.prepareComponent(ctx, cl, file, cfield+".", c); err != nil {
				return err
			}
		}
		var err error
		if s.Environment, err = localEnvironment(file, s.Environment); err != nil {
			return err
		}
		if s.Code, err = r.uploadCode(ctx, cl, base, field+".code", s.Code); err != nil {
			return err
		}
		if err := r.uploadBuild(ctx, cl, base, field+".environment.build.path", s.Environment); err != nil {
			return err
		}
		if err := r.uploadInputs(ctx, cl, base, field+".inputs.", s.Inputs); err != nil {
			return err
		}
	}
	return spec.ValidateJob(j)
}

// streamPipeline follows a pipeline: each step's log in step order as the
// steps start (a step that ran meanwhile is printed from its start), then
// the pipeline's summary. It exits like streamJob.
func (r *run) streamPipeline(ctx context.Context, cl *api.Client, name string) error {
	done := map[string]bool{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		c, cancel := context.WithTimeout(ctx, requestTimeout)
		p, err := cl.Job(c, r.workspace, name)
		cancel()
		if err != nil {
			return err
		}
		progressed := false
		for _, st := range p.Steps {
			if done[st.Name] || st.Job == "" {
				continue
			}
			done[st.Name], progressed = true, true
			if st.ReusedFrom != "" {
				fmt.Fprintf(r.app.Stderr, "Step %s reuses job %s.\n", st.Name, st.ReusedFrom)
				continue
			}
			fmt.Fprintf(r.app.Stderr, "Step %s runs as job %s.\n", st.Name, st.Job)
			follow := r.streamJob
			if s := p.Jobs[st.Name]; s != nil && s.Type == api.JobTypeSweep {
				follow = r.streamSweep
			}
			var outcome *JobOutcomeError
			if err := follow(ctx, cl, st.Job); err != nil && !errors.As(err, &outcome) {
				return err
			}
		}
		if api.JobTerminal(p.Status) && !progressed {
			for _, st := range p.Steps {
				if st.Status == api.StepSkipped {
					fmt.Fprintf(r.app.Stderr, "Step %s was skipped.\n", st.Name)
				}
			}
			fmt.Fprintln(r.app.Stderr, summary(p))
			if p.Status != api.JobCompleted {
				return &JobOutcomeError{Job: p.Name, Status: p.Status}
			}
			return nil
		}
		if progressed {
			continue
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(r.app.Stderr, "Stopped following pipeline %s; it keeps running ('tide job cancel %s' stops it).\n", name, name)
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// pipelineSteps prints a pipeline's steps: job, status, reuse.
func (p *printer) pipelineSteps(w io.Writer, j *api.Job) {
	rows := make([][]string, 0, len(j.Steps))
	for _, st := range j.Steps {
		note := ""
		if st.ReusedFrom != "" {
			note = "reused"
		}
		rows = append(rows, []string{st.Name, dash(st.Job), st.Status, dash(note)})
	}
	fmt.Fprintln(w, "steps:")
	table(w, []string{"STEP", "JOB", "STATUS", "NOTE"}, rows)
}
