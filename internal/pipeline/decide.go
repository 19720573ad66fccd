package pipeline

import (
	"fmt"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
)

// Decision is what to do with a pipeline now.
type Decision struct {
	// Start are the steps whose dependencies all completed, in order.
	Start []string
	// Skip are steps that will not run: a step they depend on failed, or
	// the pipeline stops after a failure.
	Skip []string
	// Cancel are the child jobs to cancel (the pipeline was canceled, or
	// a step failed and continue_on_step_failure is off).
	Cancel []string
	// Status is the pipeline's new status when it ends ("" while it
	// runs), and Error why it failed.
	Status string
	Error  string
}

// Decide looks at a pipeline's steps (p.Steps, whose Status mirrors their
// child jobs) and says what happens next. A failed step fails the steps
// that depend on it; unless settings.continue_on_step_failure, it also
// stops the rest. The pipeline ends when no step is running: Completed
// when every step completed, Canceled when it was canceled, Failed
// otherwise.
func Decide(p *api.Job) Decision {
	var d Decision
	status := map[string]string{}
	job := map[string]string{}
	for _, st := range p.Steps {
		status[st.Name], job[st.Name] = st.Status, st.Job
	}
	canceling := p.Status == api.JobCancelRequested
	var failed []string
	for _, st := range p.Steps {
		if st.Status == api.JobFailed || st.Status == api.JobCanceled {
			failed = append(failed, st.Name)
		}
	}
	stop := canceling || (len(failed) > 0 && (p.Settings == nil || !p.Settings.ContinueOnStepFailure))
	deps := spec.StepDependencies(p)
	running := 0
	for _, st := range p.Steps {
		switch {
		case st.Status == api.StepWaiting:
			if stop {
				d.Skip = append(d.Skip, st.Name)
				continue
			}
			ready, blocked := true, false
			for _, dep := range deps[st.Name] {
				switch status[dep] {
				case api.JobCompleted:
				case api.JobFailed, api.JobCanceled, api.StepSkipped:
					blocked = true
				default:
					ready = false
				}
			}
			switch {
			case blocked:
				d.Skip = append(d.Skip, st.Name)
				status[st.Name] = api.StepSkipped // its dependants too, this turn
			case ready:
				d.Start = append(d.Start, st.Name)
				running++
			default:
				running++
			}
		case !api.JobTerminal(st.Status) && st.Status != api.StepSkipped:
			running++
			if stop && st.Status != api.JobCancelRequested && st.Job != "" {
				d.Cancel = append(d.Cancel, st.Job)
			}
		}
	}
	if running > 0 {
		return d
	}
	switch {
	case canceling:
		d.Status = api.JobCanceled
	case len(failed) > 0:
		d.Status = api.JobFailed
		var names []string
		for _, f := range failed {
			if job[f] == "" {
				names = append(names, f+" (could not start; see the pipeline's events)")
				continue
			}
			names = append(names, fmt.Sprintf("%s (job %s, %s)", f, job[f], strings.ToLower(status[f])))
		}
		d.Error = "step " + strings.Join(names, ", step ") + " did not complete"
	default:
		d.Status = api.JobCompleted
	}
	return d
}
