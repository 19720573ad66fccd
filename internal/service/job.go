package service

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

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
