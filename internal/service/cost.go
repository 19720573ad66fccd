package service

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tideml/tide/api"
	"github.com/tideml/tide/internal/catalog"
	"github.com/tideml/tide/internal/store"
)

// PricePerHour is the price of one node-hour of size for tier: the
// low-priority price for low_priority (the dedicated one when the size has
// none), else the dedicated price.
func PricePerHour(size api.Size, tier string) float64 {
	if tier == api.TierLowPriority && size.LowPriorityPrice > 0 {
		return size.LowPriorityPrice
	}
	return size.PricePerHour
}

// span is node time at a price over [from, to).
type span struct {
	key      string
	node     string
	from, to time.Time
	nodes    int
	price    float64
}

// hours is the span's node-hours inside [since, until).
func (sp span) hours(since, until time.Time) float64 {
	from, to := sp.from, sp.to
	if from.Before(since) {
		from = since
	}
	if to.After(until) {
		to = until
	}
	if !to.After(from) {
		return 0
	}
	return to.Sub(from).Hours() * float64(sp.nodes)
}

// report adds spans up by key over [since, until), largest cost first.
func report(ws, by string, spans []span, since, until time.Time) *api.CostReport {
	r := &api.CostReport{Workspace: ws, By: by, Since: since, Until: until, Currency: api.Currency, Rows: []api.CostLine{}}
	idx := map[string]int{}
	for _, sp := range spans {
		h := sp.hours(since, until)
		if h == 0 {
			continue
		}
		i, ok := idx[sp.key]
		if !ok {
			i = len(r.Rows)
			idx[sp.key] = i
			r.Rows = append(r.Rows, api.CostLine{Key: sp.key})
		}
		r.Rows[i].NodeHours += h
		r.Rows[i].Amount += h * sp.price
		r.NodeHours += h
		r.Total += h * sp.price
	}
	slices.SortStableFunc(r.Rows, func(a, b api.CostLine) int {
		switch {
		case a.Amount > b.Amount:
			return -1
		case a.Amount < b.Amount:
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return r
}

// Cost reports what a workspace's nodes (by compute, node or workspace)
// or its jobs' runs (by job, tag or user) cost between since and now.
func (s *Service) Cost(ctx context.Context, ws, by string, since time.Time) (*api.CostReport, error) {
	if by == "" {
		by = "compute"
	}
	if !slices.Contains(api.CostGroups, by) {
		return nil, errorf(400, api.CodeValidation, "by %q: group cost by one of %s", by, strings.Join(api.CostGroups, ", "))
	}
	now := s.now()
	var spans []span
	err := s.Store.View(ctx, func(tx store.Tx) error {
		if _, err := s.workspace(ctx, tx, ws); err != nil {
			return err
		}
		prices := priceList(ctx, tx, s.Catalog, ws)
		var err error
		switch by {
		case "compute", "node", "workspace":
			spans, err = nodeSpans(ctx, tx, ws, "", since, now, prices)
			for i := range spans {
				spans[i].key = map[string]string{"compute": spans[i].key, "node": spans[i].node, "workspace": ws}[by]
			}
		default:
			spans, err = jobSpans(ctx, tx, ws, by, now, prices)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return report(ws, by, spans, since, now), nil
}

// priceList returns the price per node-hour of each compute of ws.
func priceList(ctx context.Context, tx store.Tx, cat *catalog.Catalog, ws string) map[string]float64 {
	out := map[string]float64{}
	cs, err := tx.ListComputes(ctx, ws)
	if err != nil {
		return out
	}
	for _, c := range cs {
		if size, ok := cat.Lookup(c.Size); ok {
			out[c.Name] = PricePerHour(size, c.Tier)
		}
	}
	return out
}

// nodeSpans returns the node time of ws's removed and live nodes (of one
// compute when compute is not empty), keyed by compute.
func nodeSpans(ctx context.Context, tx store.Tx, ws, compute string, since, now time.Time, prices map[string]float64) ([]span, error) {
	usage, err := tx.ListNodeUsage(ctx, ws, compute, since)
	if err != nil {
		return nil, err
	}
	spans := make([]span, 0, len(usage))
	for _, u := range usage {
		spans = append(spans, span{key: u.Compute, node: u.Node, from: u.Started, to: u.Ended, nodes: 1, price: u.PricePerHour})
	}
	nodes, err := tx.ListNodes(ctx, ws, compute)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		price := n.PricePerHour
		if price == 0 {
			price = prices[n.Compute] // a node created before prices were kept
		}
		spans = append(spans, span{key: n.Compute, node: n.ID, from: n.CreatedOn, to: now, nodes: 1, price: price})
	}
	return spans, nil
}

// jobSpans returns the node time of ws's jobs while they ran, keyed by
// job, by each tag (key=value) or by the user who submitted it.
func jobSpans(ctx context.Context, tx store.Tx, ws, by string, now time.Time, prices map[string]float64) ([]span, error) {
	jobs, err := tx.ListJobs(ctx, store.JobFilter{Workspace: ws})
	if err != nil {
		return nil, err
	}
	var spans []span
	for i := range jobs {
		j := &jobs[i]
		sp, ok := jobSpan(j, now, prices)
		if !ok {
			continue
		}
		switch by {
		case "job":
			sp.key = j.Name
			spans = append(spans, sp)
		case "user":
			sp.key = cmpOr(j.CreatedBy, "(unknown)") // jobs from before users existed
			spans = append(spans, sp)
		case "tag":
			if len(j.Tags) == 0 {
				sp.key = "(untagged)"
				spans = append(spans, sp)
			}
			for k, v := range j.Tags {
				sp.key = k + "=" + v
				spans = append(spans, sp)
			}
		}
	}
	return spans, nil
}

// jobSpan is a job's run: its nodes from its (last attempt's) start to its
// end, or until now while it runs.
func jobSpan(j *api.Job, now time.Time, prices map[string]float64) (span, bool) {
	if j.StartTime.IsZero() {
		return span{}, false
	}
	end := j.EndTime
	if end.IsZero() || end.Before(j.StartTime) {
		end = now
	}
	return span{from: j.StartTime, to: end, nodes: j.InstanceCount(), price: prices[j.Compute]}, true
}

// computeCost is what a compute's nodes have cost since it was created.
func (s *Service) computeCost(ctx context.Context, tx store.Tx, c *api.Compute) *api.Cost {
	now := s.now()
	price := 0.0
	if size, ok := s.Catalog.Lookup(c.Size); ok {
		price = PricePerHour(size, c.Tier)
	}
	spans, err := nodeSpans(ctx, tx, c.Workspace, c.Name, time.Time{}, now, map[string]float64{c.Name: price})
	if err != nil {
		return nil
	}
	r := report(c.Workspace, "compute", spans, time.Time{}, now)
	return &api.Cost{NodeHours: r.NodeHours, Amount: r.Total, Currency: api.Currency, PricePerHour: price}
}

// jobCost is what a job's run has cost so far.
func (s *Service) jobCost(ctx context.Context, tx store.Tx, j *api.Job) *api.Cost {
	prices := map[string]float64{}
	if sl := j.Serverless; sl != nil {
		// Its compute goes with its nodes; the job keeps their shape.
		if size, ok := s.Catalog.Lookup(sl.InstanceType); ok {
			prices[j.Compute] = PricePerHour(size, sl.Tier)
		}
	} else if c, err := tx.GetCompute(ctx, j.Workspace, j.Compute); err == nil {
		if size, ok := s.Catalog.Lookup(c.Size); ok {
			prices[j.Compute] = PricePerHour(size, c.Tier)
		}
	}
	sp, ok := jobSpan(j, s.now(), prices)
	if !ok {
		return &api.Cost{Currency: api.Currency, PricePerHour: prices[j.Compute]}
	}
	h := sp.hours(sp.from, sp.to)
	return &api.Cost{NodeHours: h, Amount: h * sp.price, Currency: api.Currency, PricePerHour: sp.price}
}

// jobUser names who submitted j, when the server records it.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// jobUsage fills in what a job's running ranks used from their nodes'
// last heartbeats, and the job's total.
func jobUsage(ctx context.Context, tx store.Tx, j *api.Job) {
	id := AssignmentID(j.Workspace, j.Name, j.Attempt)
	var total api.JobUsage
	var gpuSum float64
	gpuN := 0
	for i := range j.Ranks {
		r := &j.Ranks[i]
		if !api.JobTerminal(r.Status) && r.Node != "" {
			if n, err := tx.GetNode(ctx, r.Node); err == nil && n.Job == id && n.JobUsage != nil {
				u := *n.JobUsage
				r.Usage = &u
			}
		}
		if r.Usage == nil {
			continue
		}
		total.CPUSeconds += r.Usage.CPUSeconds
		total.MemoryBytes += r.Usage.MemoryBytes
		total.PeakMemoryBytes = max(total.PeakMemoryBytes, r.Usage.PeakMemoryBytes)
		total.GPUMemoryBytes = max(total.GPUMemoryBytes, r.Usage.GPUMemoryBytes)
		total.DiskBytes += r.Usage.DiskBytes
		total.Samples += r.Usage.Samples
		if r.Usage.GPUPercent != nil {
			gpuSum += *r.Usage.GPUPercent
			gpuN++
		}
	}
	if total.Samples == 0 {
		return
	}
	if gpuN > 0 {
		mean := gpuSum / float64(gpuN)
		total.GPUPercent = &mean
	}
	j.Usage = &total
}

// Spent is what a budget's scope cost from since to now: its compute's
// nodes, the jobs carrying its tag, or every node of its workspace.
func Spent(ctx context.Context, tx store.Tx, cat *catalog.Catalog, b *api.Budget, since, now time.Time) (float64, error) {
	prices := priceList(ctx, tx, cat, b.Workspace)
	var spans []span
	var err error
	if tag := b.Scope.Tag; tag != "" {
		spans, err = jobSpans(ctx, tx, b.Workspace, "tag", now, prices)
		spans = slices.DeleteFunc(spans, func(sp span) bool { return sp.key != tag })
	} else {
		spans, err = nodeSpans(ctx, tx, b.Workspace, b.Scope.Compute, since, now, prices)
	}
	if err != nil {
		return 0, err
	}
	return report(b.Workspace, "budget", spans, since, now).Total, nil
}
