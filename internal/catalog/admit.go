package catalog

import "github.com/tideml/tide/api"

// Request is a serverless job's hidden compute waiting for its nodes'
// quota: Compute as stored (max_instances 0 while it waits), Instances the
// nodes the job needs.
type Request struct {
	Compute   api.Compute
	Instances int
}

// Wait says why a request was not admitted.
type Wait struct {
	// Quota is the limit the request would exceed.
	Quota *QuotaError
	// Behind names the compute of an earlier request in the same quota
	// bucket that waits too; requests are admitted in order, so a large
	// job is not overtaken forever by smaller ones. Empty when the request
	// itself does not fit.
	Behind string
	// UnknownSize: the compute's size left the catalog since the job was
	// submitted (a server restarted with other sizes).
	UnknownSize bool
}

// Admission is what Admit decided.
type Admission struct {
	// Admitted are the requests whose computes may now reserve Instances
	// nodes (max_instances = Instances), by index into the requests.
	Admitted []int
	// Waiting holds the other requests, by index.
	Waiting map[int]Wait
}

// Admit decides which requests fit their quota now, given every compute
// (requests' own computes included, each holding what it already
// reserves). Requests are taken in order (the caller sorts them: higher
// priority, then older); in each location, family and tier, the first that
// does not fit stops the ones after it. Admit is pure: the caller applies
// the result.
func Admit(computes []api.Compute, requests []Request, cat *Catalog, q Quotas) Admission {
	out := Admission{Waiting: map[int]Wait{}}
	existing := append([]api.Compute(nil), computes...)
	var blocked []reservation
	blockedBy := map[int]string{}
	for i, r := range requests {
		c := r.Compute
		c.MaxInstances = max(r.Instances, 1)
		want, ok := reserve(c, cat)
		if !ok {
			out.Waiting[i] = Wait{UnknownSize: true}
			continue
		}
		if b := bucketIndex(blocked, want); b >= 0 {
			out.Waiting[i] = Wait{Behind: blockedBy[b]}
			continue
		}
		if err := Check(existing, c, cat, q); err != nil {
			qe, _ := err.(*QuotaError)
			out.Waiting[i] = Wait{Quota: qe}
			blockedBy[len(blocked)] = c.Name
			blocked = append(blocked, want)
			continue
		}
		out.Admitted = append(out.Admitted, i)
		replaced := false
		for k := range existing {
			if existing[k].Workspace == c.Workspace && existing[k].Name == c.Name {
				existing[k], replaced = c, true
			}
		}
		if !replaced {
			existing = append(existing, c)
		}
	}
	return out
}

func bucketIndex(rs []reservation, r reservation) int {
	for i, b := range rs {
		if b.sameBucket(r) {
			return i
		}
	}
	return -1
}
