package spec

import (
	"cmp"
	"slices"
	"strings"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
)

// IsServerless reports whether job j runs serverless: its file names no
// compute, or compute: serverless, as in Azure ML. A compute name with
// api.ServerlessPrefix is a serverless job's hidden compute, which a
// round-tripped `job show -o yaml` carries: that job is serverless too.
func IsServerless(j *api.Job) bool {
	name := strings.TrimPrefix(j.Compute, "azureml:")
	return name == "" || strings.EqualFold(name, "serverless") || strings.HasPrefix(strings.ToLower(name), api.ServerlessPrefix)
}

// ServerlessTier maps Azure's queue_settings.job_tier to the tier of a
// serverless job's nodes: spot runs on low-priority nodes, which can be
// preempted; null (no tier), basic, standard and premium on dedicated
// nodes.
func ServerlessTier(j *api.Job) string {
	if q := j.QueueSettings; q != nil && strings.EqualFold(q.JobTier, "spot") {
		return api.TierLowPriority
	}
	return api.TierDedicated
}

// ServerlessCompute returns the hidden compute that holds serverless job
// j's nodes: resources.instance_type (defaultSize when the job sets none)
// in tier ServerlessTier(j) at location, scaling from zero with no idle
// time, and max_instances 0 until the controller admits it under the quota.
// The caller names it. Errors name the job's fields.
func ServerlessCompute(j *api.Job, env Env, defaultSize, location string) (*api.Compute, error) {
	var errs collector
	cat := cmp.Or(env.Catalog, catalog.Default())
	name := defaultSize
	field := "resources.instance_type"
	if j.Resources != nil && j.Resources.InstanceType != "" {
		name = j.Resources.InstanceType
	}
	tier := ServerlessTier(j)
	size, ok := cat.Lookup(name)
	switch {
	case !ok:
		errs.add(0, field, "unknown VM size %q; nearest sizes: %s; run 'tide compute list-sizes' for all", name, strings.Join(NearestSizes(cat, name, 3), ", "))
	case tier == api.TierLowPriority && !size.LowPriorityCapable:
		errs.add(0, "queue_settings.job_tier", "spot runs on low-priority nodes, which size %s cannot be; use job_tier standard or a low-priority-capable instance_type", size.Name)
	}
	if len(env.Locations) > 0 && !slices.Contains(env.Locations, location) {
		errs.add(0, "compute", "serverless jobs of this workspace run in location %q, which is not configured; fix serverless.location in the server config", location)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return &api.Compute{
		Type: api.ComputeTypeAmlCompute, Size: size.Name, Tier: tier, Location: location,
		MinInstances: 0, MaxInstances: 0, IdleTimeBeforeScaleDown: 0,
		Description: "nodes of serverless job " + j.Name, ServerlessJob: j.Name,
	}, nil
}

// NearestSizes returns up to n size names of cat closest to name (by edit
// distance, ignoring case), for errors that name an unknown size.
func NearestSizes(cat *catalog.Catalog, name string, n int) []string {
	type scored struct {
		name string
		d    int
	}
	var all []scored
	for _, s := range cat.Sizes() {
		all = append(all, scored{s.Name, levenshtein(strings.ToLower(name), strings.ToLower(s.Name))})
	}
	slices.SortStableFunc(all, func(a, b scored) int { return cmp.Or(cmp.Compare(a.d, b.d), strings.Compare(a.name, b.name)) })
	var out []string
	for _, s := range all[:min(n, len(all))] {
		out = append(out, s.name)
	}
	return out
}
