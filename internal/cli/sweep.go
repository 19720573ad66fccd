package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/sweep"
)

// prepareSweep reads the component file a sweep's trial names and uploads
// code folders and local data, all relative to the file that names them
// (parseJob read a command trial's environment file). It validates the
// result.
func (r *run) prepareSweep(ctx context.Context, cl *api.Client, file string, j *api.Job) error {
	base := fileBase(file)
	if err := r.uploadInputs(ctx, cl, base, "inputs.", j.Inputs); err != nil {
		return err
	}
	t := j.Trial
	switch c := t.Component; {
	case c != nil && c.Ref != "":
		if _, ok := spec.ComponentFile(c.Ref); ok {
			comp, err := r.readComponentFile(ctx, cl, file, "trial", c.Ref)
			if err != nil {
				return err
			}
			t.Component = comp
		}
	case c != nil:
		if err := r.prepareComponent(ctx, cl, file, "trial.component.", c); err != nil {
			return err
		}
	default:
		var err error
		if t.Code, err = r.uploadCode(ctx, cl, base, "trial.code", t.Code); err != nil {
			return err
		}
	}
	return spec.ValidateJob(j)
}

// sweepLines are the settings and the best trial of a sweep, for job show.
func sweepLines(j *api.Job) []kv {
	var lines []kv
	if o := j.Objective; o != nil {
		lines = append(lines, kv{"objective", o.Goal + " " + o.PrimaryMetric})
	}
	if s := j.Sampling; s != nil {
		v := s.Type
		if s.Seed != nil {
			v += fmt.Sprintf(" (seed %d)", *s.Seed)
		}
		lines = append(lines, kv{"sampling", v})
	}
	lim := fmt.Sprintf("%d trial(s), %d at once", spec.SweepMaxTrials(j), spec.SweepMaxConcurrent(j))
	if l := j.Limits; l != nil && l.TrialTimeout > 0 {
		lim += fmt.Sprintf(", %ds per trial", l.TrialTimeout)
	}
	if l := j.Limits; l != nil && l.Timeout > 0 {
		lim += fmt.Sprintf(", %ds in all", l.Timeout)
	}
	lines = append(lines, kv{"limits", lim})
	if et := j.EarlyTermination; et != nil {
		v := et.Type
		switch {
		case et.SlackFactor != nil:
			v += fmt.Sprintf(" slack_factor %g", *et.SlackFactor)
		case et.SlackAmount != nil:
			v += fmt.Sprintf(" slack_amount %g", *et.SlackAmount)
		case et.TruncationPercentage > 0:
			v += fmt.Sprintf(" %d%%", et.TruncationPercentage)
		}
		v += fmt.Sprintf(", every %d interval(s) from %d", max(et.EvaluationInterval, 1), max(et.DelayEvaluation, 1))
		lines = append(lines, kv{"early_termination", v})
	}
	if b := sweep.Best(j.Trials, j.Objective.Goal); b >= 0 {
		t := j.Trials[b]
		lines = append(lines, kv{"best_trial", fmt.Sprintf("%s: %s=%g with %s", t.Job, j.Objective.PrimaryMetric, *t.Metric, sweep.FormatParams(t.Parameters))})
	}
	return lines
}

// sweepTrials prints a sweep's trials ranked by the primary metric.
func (p *printer) sweepTrials(w io.Writer, j *api.Job) {
	if len(j.Trials) == 0 {
		return
	}
	best := sweep.Best(j.Trials, j.Objective.Goal)
	rows := make([][]string, 0, len(j.Trials))
	for rank, i := range sweep.Rank(j.Trials, j.Objective.Goal) {
		t := j.Trials[i]
		metric := "-"
		if t.Metric != nil {
			metric = strconv.FormatFloat(*t.Metric, 'g', -1, 64)
		}
		note := t.Stopped
		if i == best {
			note = "best"
		}
		rows = append(rows, []string{strconv.Itoa(rank + 1), dash(t.Job), t.Status, metric, strconv.Itoa(t.Reports), sweep.FormatParams(t.Parameters), dash(note)})
	}
	fmt.Fprintf(w, "trials (by %s, %s):\n", j.Objective.PrimaryMetric, j.Objective.Goal)
	table(w, []string{"RANK", "TRIAL", "STATUS", strings.ToUpper(j.Objective.PrimaryMetric), "REPORTS", "PARAMETERS", "NOTE"}, rows)
}

// streamSweep follows a sweep: each trial as it starts and ends (the
// trials' logs interleave, so they are left to 'tide job stream TRIAL'),
// then the best trial and the sweep's summary. It exits like streamJob.
func (r *run) streamSweep(ctx context.Context, cl *api.Client, name string) error {
	started, ended := map[int]bool{}, map[int]bool{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		c, cancel := context.WithTimeout(ctx, requestTimeout)
		s, err := cl.Job(c, r.workspace, name)
		cancel()
		if err != nil {
			return err
		}
		for _, t := range s.Trials {
			if !started[t.Index] && t.Job != "" {
				started[t.Index] = true
				fmt.Fprintf(r.app.Stderr, "Trial %d runs as job %s: %s.\n", t.Index, t.Job, sweep.FormatParams(t.Parameters))
			}
			if ended[t.Index] || !api.JobTerminal(t.Status) {
				continue
			}
			ended[t.Index] = true
			metric := "no " + s.Objective.PrimaryMetric
			if t.Metric != nil {
				metric = fmt.Sprintf("%s=%g", s.Objective.PrimaryMetric, *t.Metric)
			}
			switch {
			case t.Stopped != "":
				fmt.Fprintf(r.app.Stderr, "Trial %s stopped early (%s): %s.\n", dash(t.Job), metric, t.Stopped)
			default:
				fmt.Fprintf(r.app.Stderr, "Trial %s %s (%s).\n", dash(t.Job), strings.ToLower(t.Status), metric)
			}
		}
		if api.JobTerminal(s.Status) {
			if b := sweep.Best(s.Trials, s.Objective.Goal); b >= 0 {
				t := s.Trials[b]
				fmt.Fprintf(r.app.Stdout, "Best trial %s: %s=%g with %s\n", t.Job, s.Objective.PrimaryMetric, *t.Metric, sweep.FormatParams(t.Parameters))
			}
			fmt.Fprintln(r.app.Stderr, summary(s))
			if s.Status != api.JobCompleted {
				return &JobOutcomeError{Job: s.Name, Status: s.Status}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(r.app.Stderr, "Stopped following sweep %s; it keeps running ('tide job cancel %s' stops it).\n", name, name)
			return ctx.Err()
		case <-tick.C:
		}
	}
}
