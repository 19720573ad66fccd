package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
	"github.com/tideml/tide/internal/sweep"
)

// sweepProbe is the command job of a sweep's first trial, which the
// checks before a sweep is accepted look at: every trial runs the same
// command, code, environment and data on the same compute.
func sweepProbe(j *api.Job) *api.Job {
	p := sweep.TrialJob(j, 0, sweep.Next(j, 0, nil, nil))
	p.Name, p.Parent = j.Name, ""
	return p
}

// submitSweep checks a sweep (its trial as a command job against the
// workspace), stores it Running and starts its first trials.
func (s *Service) submitSweep(ctx context.Context, ws string, j *api.Job) (*api.Job, error) {
	j.Compute = strings.TrimPrefix(j.Compute, "azureml:")
	if c := j.Trial.Component; c != nil && c.Ref != "" {
		// A registered component's versions are immutable: resolving it
		// apart from the submission changes nothing.
		err := s.Store.View(ctx, func(tx store.Tx) (err error) {
			if _, err := s.workspace(ctx, tx, ws); err != nil {
				return err
			}
			j.Trial.Component, err = s.resolveComponent(ctx, tx, ws, "trial", c.Ref)
			return err
		})
		if err != nil {
			return nil, err
		}
		if err := spec.ValidateJob(j); err != nil {
			return nil, validation(err)
		}
	}
	engineErr := s.engineCheck(ctx, sweepProbe(j))
	err := s.Store.Update(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		if err := s.checkQueueRoom(ctx, tx, ws); err != nil {
			return err
		}
		return s.startSweep(ctx, tx, ws, j, engineErr)
	})
	if err != nil {
		return nil, s.mapStoreErr(err, "job", j.Name)
	}
	s.notify()
	return j, nil
}

// startSweep checks sweep j (its trial as a command job against the
// workspace), stores it Running and starts its first trials, in tx.
// engineErr is what asking the Docker engine answered.
func (s *Service) startSweep(ctx context.Context, tx store.Tx, ws string, j *api.Job, engineErr error) error {
	if j.Sampling.Type != api.SamplingGrid && j.Sampling.Seed == nil {
		// Recorded, so the trials' parameters can be drawn again.
		seed := rand.Int64N(1 << 31)
		j.Sampling.Seed = &seed
	}
	probe := sweepProbe(j)
	if err := s.checkAdmission(ctx, tx, ws, probe, engineErr, true); err != nil {
		return err
	}
	// The code and data inputs must have been uploaded by now.
	if err := s.checkData(ctx, tx, ws, &api.Job{Code: probe.Code, Inputs: probe.Inputs}); err != nil {
		return err
	}
	if j.Name == "" {
		j.Name = s.freeJobName(ctx, tx, ws, "")
	}
	now := s.now()
	j.Workspace, j.ID = ws, "/workspaces/"+ws+"/jobs/"+j.Name
	j.ExperimentName = cmp.Or(j.ExperimentName, spec.DefaultExperimentName)
	j.DisplayName = cmp.Or(j.DisplayName, j.Name)
	if j.CreatedBy == "" {
		j.CreatedBy = UserOf(ctx)
	}
	j.Status, j.CreatedOn, j.StartTime, j.EndTime = api.JobRunning, now, now, time.Time{}
	j.ExitCode, j.Error, j.LogTail, j.Ranks, j.Attempt, j.PendingReason = nil, "", nil, nil, 0, ""
	j.Trials, j.BestTrial = nil, ""
	if err := tx.PutJob(ctx, j, ""); err != nil {
		return err
	}
	msg := fmt.Sprintf("sweep of up to %d trial(s), %d at once, %s sampling; objective: %s %s", spec.SweepMaxTrials(j), spec.SweepMaxConcurrent(j), j.Sampling.Type, j.Objective.Goal, j.Objective.PrimaryMetric)
	if err := tx.AddEvent(ctx, ws, "job/"+j.Name, &api.Event{Time: now, Kind: "Running", Message: msg}); err != nil {
		return err
	}
	_, err := s.advanceSweep(ctx, tx, j)
	return err
}

// lateMetrics is how long after a trial ended its last log lines (and
// the metrics in them) may still be stored.
const lateMetrics = 30 * time.Second

// advanceSweep moves a sweep on in tx: it reads its trials' jobs and the
// primary metric each logged, stops the trials the early termination
// policy (or a cancel, the timeout, a missing metric) stops, starts new
// trials, and ends the sweep when no trial runs and none is due. It
// writes s when it changed.
func (s *Service) advanceSweep(ctx context.Context, tx store.Tx, sw *api.Job) (bool, error) {
	before, _ := json.Marshal(sw)
	now := s.now()
	running := false
	for _, t := range sw.Trials {
		running = running || !api.JobTerminal(t.Status)
	}
	// Ended trials' series matter only to an early termination policy
	// while trials run; otherwise what they logged is read until it has
	// surely all arrived, then kept.
	needSeries := sw.EarlyTermination != nil && running
	series := map[int][]float64{}
	for i, t := range sw.Trials {
		if t.Job == "" {
			continue
		}
		if !api.JobTerminal(t.Status) {
			child, err := tx.GetJob(ctx, sw.Workspace, t.Job)
			if err != nil {
				return false, fmt.Errorf("trial %d of sweep %s: %w", t.Index, sw.Name, err)
			}
			sw.Trials[i].Status = child.Status
			if api.JobTerminal(child.Status) {
				sw.Trials[i].Ended = now
			}
		}
		settled := api.JobTerminal(t.Status) && !t.Ended.IsZero() && now.Sub(t.Ended) > lateMetrics
		if settled && !needSeries {
			continue
		}
		ms, err := tx.ListMetrics(ctx, sw.Workspace, t.Job, sw.Objective.PrimaryMetric)
		if err != nil {
			return false, err
		}
		xs := make([]float64, 0, len(ms))
		for _, m := range ms {
			xs = append(xs, m.Value)
		}
		series[t.Index] = xs
		sw.Trials[i].Reports = len(xs)
		sw.Trials[i].Metric = nil
		if len(xs) > 0 {
			sw.Trials[i].Metric = &xs[len(xs)-1]
		}
	}
	d := sweep.Decide(sw, series, now)
	for _, st := range d.Stop {
		i := trialIndex(sw, st.Index)
		child, err := tx.GetJob(ctx, sw.Workspace, sw.Trials[i].Job)
		if err != nil {
			return false, err
		}
		if err := s.cancel(ctx, tx, child, st.Reason); err != nil {
			return false, err
		}
		sw.Trials[i].Status = child.Status
		if st.Early {
			sw.Trials[i].Stopped = st.Reason
			if err := tx.AddEvent(ctx, sw.Workspace, "job/"+sw.Name, &api.Event{Time: now, Kind: "TrialStopped", Message: fmt.Sprintf("trial %s stopped early: %s", child.Name, st.Reason)}); err != nil {
				return false, err
			}
		}
	}
	for range d.Start {
		if err := s.startTrial(ctx, tx, sw); err != nil {
			return false, err
		}
	}
	sw.BestTrial = ""
	if b := sweep.Best(sw.Trials, sw.Objective.Goal); b >= 0 {
		sw.BestTrial = sw.Trials[b].Job
	}
	if d.Status != "" {
		if err := s.endSweep(ctx, tx, sw, d, now); err != nil {
			return false, err
		}
	}
	return putIfChanged(ctx, tx, sw, before)
}

func trialIndex(sw *api.Job, index int) int {
	for i, t := range sw.Trials {
		if t.Index == index {
			return i
		}
	}
	panic("sweep " + sw.Name + " has no trial " + strconv.Itoa(index))
}

// startTrial draws the next trial's parameters and submits its job. A
// trial that cannot be admitted (its compute was deleted meanwhile) fails,
// with the reason in the sweep's events.
func (s *Service) startTrial(ctx context.Context, tx store.Tx, sw *api.Job) error {
	index := len(sw.Trials)
	var done []sweep.Observation
	var pending []map[string]string
	for _, t := range sw.Trials {
		switch {
		case t.Status == api.JobCompleted && t.Metric != nil:
			done = append(done, sweep.Observation{Params: t.Parameters, Value: *t.Metric})
		case !api.JobTerminal(t.Status):
			pending = append(pending, t.Parameters)
		}
	}
	params := sweep.Next(sw, index, done, pending)
	trial := api.SweepTrial{Index: index, Status: api.JobQueued, Parameters: params}
	child := sweep.TrialJob(sw, index, params)
	child.Name = s.freeJobName(ctx, tx, sw.Workspace, sw.Name+"_"+strconv.Itoa(index))
	child.CreatedBy = sw.CreatedBy
	now := s.now()
	if err := s.admit(ctx, tx, sw.Workspace, child, nil); err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return err
		}
		trial.Status = api.JobFailed
		sw.Trials = append(sw.Trials, trial)
		return tx.AddEvent(ctx, sw.Workspace, "job/"+sw.Name, &api.Event{Time: now, Kind: "TrialFailed", Message: fmt.Sprintf("trial %d could not start: %s", index, e.Msg)})
	}
	trial.Job, trial.Status = child.Name, child.Status
	sw.Trials = append(sw.Trials, trial)
	return tx.AddEvent(ctx, sw.Workspace, "job/"+sw.Name, &api.Event{Time: now, Kind: "TrialStarted", Message: fmt.Sprintf("trial %d runs as job %s with %s", index, child.Name, sweep.FormatParams(params))})
}

// endSweep records a sweep's end: its best trial, or why it failed.
func (s *Service) endSweep(ctx context.Context, tx store.Tx, sw *api.Job, d sweep.Decision, now time.Time) error {
	if len(d.Unlogged) > 0 {
		// A misspelt metric name shows beside what was logged.
		names := map[string]bool{}
		for _, job := range d.Unlogged {
			ms, err := tx.ListMetrics(ctx, sw.Workspace, job, "")
			if err != nil {
				return err
			}
			for _, m := range ms {
				names[m.Name] = true
			}
		}
		if len(names) == 0 {
			d.Error += " (they logged no metrics)"
		} else {
			d.Error += " (they logged " + strings.Join(slices.Sorted(maps.Keys(names)), ", ") + ")"
		}
	}
	sw.Status, sw.Error, sw.EndTime = d.Status, d.Error, now
	msg := d.Error
	switch d.Status {
	case api.JobCanceled:
		msg = "canceled"
	case api.JobCompleted:
		b := sw.Trials[sweep.Best(sw.Trials, sw.Objective.Goal)]
		msg = fmt.Sprintf("%d trial(s) ran; best trial %s: %s=%g with %s", len(sw.Trials), b.Job, sw.Objective.PrimaryMetric, *b.Metric, sweep.FormatParams(b.Parameters))
		if d.Note != "" {
			msg += " (" + d.Note + ")"
		}
	}
	return tx.AddEvent(ctx, sw.Workspace, "job/"+sw.Name, &api.Event{Time: now, Kind: d.Status, Message: msg})
}
