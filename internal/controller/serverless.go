package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/store"
)

// serverless applies the life of serverless jobs' hidden computes (see
// service/serverless.go): a compute whose job ended is deleted, nodes and
// all, and the computes of waiting jobs are admitted under the quota
// (catalog.Admit decides; here its result is written). It returns, by
// compute key, why each compute not admitted waits.
func (c *Controller) serverless(ctx context.Context, s *snapshot, now time.Time) (map[string]string, error) {
	// The jobs of serverless computes, by key: looked up by workspace and
	// name, in the queue first, so that the queue costs no key strings.
	jobs := map[string]*serverlessJob{}
	want := map[[2]string]bool{}
	for _, cp := range s.computes {
		if cp.ServerlessJob == "" {
			continue
		}
		jk := key(cp.Workspace, cp.ServerlessJob)
		if j, ok := s.queue.job(jk); ok {
			jobs[jk] = &serverlessJob{compute: j.Compute, instances: j.Instances, priority: j.Priority, seq: j.Seq}
		} else {
			want[[2]string{cp.Workspace, cp.ServerlessJob}] = true
		}
	}
	for i := 0; i < len(s.jobs) && len(want) > 0; i++ {
		if j := s.jobs[i]; want[[2]string{j.Workspace, j.Name}] {
			jobs[key(j.Workspace, j.Name)] = &serverlessJob{compute: key(j.Workspace, j.Compute), instances: j.InstanceCount(),
				priority: j.Priority(), seq: j.CreatedOn.UnixNano()}
		}
	}
	var live []api.Compute // what holds quota: every compute not being deleted
	var requests []catalog.Request
	var reqJobs []*serverlessJob
	for _, cp := range s.computes {
		if cp.ProvisioningState == api.ProvisioningDeleting {
			continue
		}
		j := jobs[key(cp.Workspace, cp.ServerlessJob)]
		if cp.ServerlessJob != "" && (j == nil || j.compute != key(cp.Workspace, cp.Name)) {
			if err := c.endServerless(ctx, cp, now); err != nil {
				return nil, err
			}
			continue
		}
		live = append(live, cp)
		if cp.ServerlessJob != "" && cp.MaxInstances == 0 {
			requests = append(requests, catalog.Request{Compute: cp, Instances: j.instances})
			reqJobs = append(reqJobs, j)
		}
	}
	// The scheduler's order: higher priority first, then older.
	order := make([]int, len(requests))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(reqJobs[b].priority, reqJobs[a].priority), cmp.Compare(reqJobs[a].seq, reqJobs[b].seq))
	})
	sorted := make([]catalog.Request, len(order))
	for i, o := range order {
		sorted[i] = requests[o]
	}
	adm := catalog.Admit(live, sorted, c.catalog, c.cfg.Quotas)
	for _, i := range adm.Admitted {
		r := sorted[i]
		if err := c.updateCompute(ctx, r.Compute.Workspace, r.Compute.Name, func(cp *api.Compute) bool {
			if cp.MaxInstances != 0 || cp.ProvisioningState == api.ProvisioningDeleting {
				return false
			}
			cp.MaxInstances = max(r.Instances, 1)
			return true
		}); err != nil {
			return nil, err
		}
	}
	waits := map[string]string{}
	for i, w := range adm.Waiting {
		r := sorted[i]
		waits[key(r.Compute.Workspace, r.Compute.Name)] = serverlessWaitReason(r, w, jobOfCompute(s.computes, r.Compute.Workspace, w.Behind))
	}
	return waits, nil
}

// serverlessJob is what serverless needs of a serverless compute's job.
type serverlessJob struct {
	compute   string // key
	instances int
	priority  int
	seq       int64 // creation, in nanoseconds
}

// endServerless deletes the hidden compute of a serverless job that ended:
// the Deleting phase removes its nodes at once (no idle time) and then the
// compute.
func (c *Controller) endServerless(ctx context.Context, cp api.Compute, now time.Time) error {
	err := c.store.Update(ctx, func(tx store.Tx) error {
		x, err := tx.GetCompute(ctx, cp.Workspace, cp.Name)
		if err != nil || x.ProvisioningState == api.ProvisioningDeleting {
			return err
		}
		x.ProvisioningState, x.ModifiedOn = api.ProvisioningDeleting, now
		if err := tx.PutCompute(ctx, x, ""); err != nil {
			return err
		}
		return tx.AddEvent(ctx, cp.Workspace, "compute/"+cp.Name, &api.Event{Time: now, Kind: "Deleting",
			Message: fmt.Sprintf("serverless job %s ended; deleting its nodes", cp.ServerlessJob)})
	})
	if store.IsNotFound(err) {
		return nil
	}
	return err
}

// serverlessWaitReason is the pending reason of a serverless job whose
// nodes the quota does not allow yet.
func serverlessWaitReason(r catalog.Request, w catalog.Wait, behindJob string) string {
	switch {
	case w.UnknownSize:
		return fmt.Sprintf("serverless nodes of size %s cannot start: the size is no longer in the server's catalog; cancel the job and submit it with another resources.instance_type", r.Compute.Size)
	case w.Behind != "":
		return fmt.Sprintf("waiting for quota behind serverless job %s (earlier in the queue), which waits for the same %s vCPUs in location %s", behindJob, r.Compute.Tier, r.Compute.Location)
	}
	q := w.Quota
	return fmt.Sprintf("waiting for quota: %d × %s node(s) need %d %s %s vCPUs in location %s; %d of the limit %d are reserved by computes and running serverless jobs; the job starts when enough are released",
		max(r.Instances, 1), r.Compute.Size, q.Requested, q.Family, q.Tier, q.Location, q.InUse, q.Limit)
}

func jobOfCompute(computes []api.Compute, ws, name string) string {
	for _, cp := range computes {
		if cp.Workspace == ws && cp.Name == name {
			return cp.ServerlessJob
		}
	}
	return name
}
