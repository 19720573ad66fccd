package service

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/spec"
	"github.com/tideml/tide/internal/store"
)

// A serverless job (no compute in its file, or compute: serverless) runs on
// nodes created for it alone. They belong to a hidden compute made with the
// job: the scheduler, autoscaler and providers treat it as any cluster, so
// quotas, gang placement, preemption and retries work as on clusters. It
// starts with max_instances 0; the controller raises it to the job's
// instance_count once the quota has room (catalog.Admit) and deletes the
// compute, nodes first, when the job ends.

// serverlessShape returns the hidden compute serverless job j needs in
// workspace ws, unnamed and unsaved, with a warning when its size
// oversubscribes its location's host. It refuses a job whose nodes could
// never fit the quota, however many other computes were deleted.
func (s *Service) serverlessShape(ws string, j *api.Job) (*api.Compute, string, error) {
	loc := s.Config.ServerlessLocation(ws)
	c, err := spec.ServerlessCompute(j, spec.Env{Catalog: s.Catalog, Locations: s.Config.LocationNames()}, s.Config.Serverless.InstanceType, loc)
	if err != nil {
		return nil, "", validation(err)
	}
	c.Workspace = ws
	warning, err := s.hostFit(c)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Field = "resources.instance_type"
			e.Fields = []api.FieldProblem{{Field: e.Field, Message: e.Msg}}
		}
		return nil, "", err
	}
	alone := *c
	alone.MaxInstances = j.InstanceCount()
	if err := catalog.Check(nil, alone, s.Catalog, s.Config.Quotas); err != nil {
		var qe *catalog.QuotaError
		if !errors.As(err, &qe) {
			return nil, "", err
		}
		e := errorf(409, api.CodeQuotaExceeded, "resources.instance_count: %d node(s) of %s need %d %s %s vCPUs in location %s, more than the quota's limit of %d, so the job could never start; lower instance_count, choose a smaller resources.instance_type, or ask the administrator to raise %s in the server config",
			j.InstanceCount(), c.Size, qe.Requested, qe.Family, qe.Tier, qe.Location, qe.Limit, qe.ConfigPath)
		e.Field = "resources.instance_count"
		return nil, "", e
	}
	return c, warning, nil
}

// serverless creates job j's hidden compute in tx and points j at it.
func (s *Service) serverless(ctx context.Context, tx store.Tx, ws string, j *api.Job) error {
	c, warning, err := s.serverlessShape(ws, j)
	if err != nil {
		return err
	}
	now := s.now()
	if err := putHidden(ctx, tx, ws, api.ServerlessPrefix, c, now); err != nil {
		return err
	}
	if warning != "" {
		if err := tx.AddEvent(ctx, ws, "compute/"+c.Name, &api.Event{Time: now, Kind: "Oversubscribed", Message: warning}); err != nil {
			return err
		}
	}
	j.Compute = c.Name
	j.Serverless = &api.JobServerless{InstanceType: c.Size, InstanceCount: j.InstanceCount(), Tier: c.Tier, Location: c.Location}
	return tx.AddEvent(ctx, ws, "compute/"+c.Name, &api.Event{Time: now, Kind: "Created",
		Message: fmt.Sprintf("serverless nodes of job %s: %d × %s (%s), location %s", j.Name, j.InstanceCount(), c.Size, c.Tier, c.Location)})
}

// putHidden names hidden compute c (of one job's nodes) prefix and random
// letters, and stores it.
func putHidden(ctx context.Context, tx store.Tx, ws, prefix string, c *api.Compute, now time.Time) error {
	for {
		c.Name = prefix + randomLetters(10)
		if _, err := tx.GetCompute(ctx, ws, c.Name); store.IsNotFound(err) {
			break
		} else if err != nil {
			return err
		}
	}
	c.ID = "/workspaces/" + ws + "/computes/" + c.Name
	c.CreatedOn, c.ModifiedOn = now, now
	c.ProvisioningState = api.ProvisioningCreating
	c.AllocationState = api.AllocationSteady
	return tx.PutCompute(ctx, c, "")
}

// ignoredSettings tells, in the log and events of job j, which of its
// settings have no effect where it runs, as Azure ignores them:
// resources.instance_type on a compute (its own size decides its nodes),
// and queue_settings.job_tier anywhere but on serverless nodes (a
// cluster's tier decides; a Kubernetes cluster's Pods have none).
func ignoredSettings(ctx context.Context, tx store.Tx, j *api.Job) error {
	var msgs []string
	if j.Resources != nil && j.Resources.InstanceType != "" && j.Serverless == nil {
		c, err := tx.GetCompute(ctx, j.Workspace, j.Compute)
		if err != nil {
			return err
		}
		msgs = append(msgs, fmt.Sprintf("resources.instance_type %s is ignored: the job runs on compute %s, whose nodes are %s; remove compute: to run serverless on %s nodes", j.Resources.InstanceType, c.Name, c.Size, j.Resources.InstanceType))
	}
	if q := j.QueueSettings; q != nil && q.JobTier != "" {
		switch {
		case j.Serverless == nil:
			msgs = append(msgs, fmt.Sprintf("queue_settings.job_tier %s is ignored: the job runs on compute %s, whose tier decides whether its nodes are low priority; remove compute: to run serverless in that tier", q.JobTier, j.Compute))
		case j.Serverless.Kubernetes != "":
			msgs = append(msgs, fmt.Sprintf("queue_settings.job_tier %s is ignored: Pods on Kubernetes cluster %s have no tier", q.JobTier, j.Serverless.Kubernetes))
		}
	}
	now := j.CreatedOn
	for i, msg := range msgs {
		if err := tx.AppendLog(ctx, j.Workspace, j.Name, []api.LogLine{{Attempt: 0, Node: 0, NodeSeq: int64(i + 1), Time: now, Stream: "tide", Text: msg}}); err != nil {
			return err
		}
		if err := tx.AddEvent(ctx, j.Workspace, "job/"+j.Name, &api.Event{Time: now, Kind: "Warning", Message: msg}); err != nil {
			return err
		}
	}
	return nil
}

// serverlessOwned refuses changes to a serverless job's hidden compute:
// the job owns it.
func serverlessOwned(c *api.Compute, what string) error {
	if c.ServerlessJob == "" {
		return nil
	}
	return errorf(409, api.CodeConflict, "compute %q holds the nodes of serverless job %s and cannot be %s; it goes when the job ends: run 'tide job cancel %s' to end it now", c.Name, c.ServerlessJob, what, c.ServerlessJob)
}

// randomLetters returns n random lowercase letters: valid in every
// provider's node names, and every '-' before them is followed by a letter
// as compute names need.
func randomLetters(n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(byte('a' + rand.IntN(26)))
	}
	return b.String()
}
