package simulate

import (
	"math"
	"slices"
	"time"

	"github.com/tideml/tide/api"
)

// Result is what a simulation measured. Its JSON form has exactly the keys
// issue 6 promises to programs (jobs, node_hours, cost, wait_seconds,
// cold_start_fraction, peak_nodes); the other fields are for the table.
type Result struct {
	// Policy is the policy that ran, with its setting.
	Policy string `json:"-"`
	// Jobs is the number of jobs replayed.
	Jobs int `json:"jobs"`
	// NodeHours splits the node time.
	NodeHours NodeHours `json:"node_hours"`
	// Cost is NodeHours.Total times the size's hourly price (low-priority
	// price for a low_priority compute), in USD.
	Cost float64 `json:"cost"`
	// Wait is the queue wait of the jobs (submit to start), in seconds.
	Wait Quantiles `json:"wait_seconds"`
	// MaxWait is the longest wait, in seconds: with no node cap and no
	// faults no job waits longer than the boot time.
	MaxWait float64 `json:"-"`
	// ColdStartFraction is the share of jobs that found no idle node when
	// they were submitted and waited for nodes to boot.
	ColdStartFraction float64 `json:"cold_start_fraction"`
	// PeakNodes is the most nodes that existed at once.
	PeakNodes int `json:"peak_nodes"`
	// ScaleUps and ScaleDowns count the nodes created and deleted.
	ScaleUps   int `json:"-"`
	ScaleDowns int `json:"-"`
	// BootFailures and Preemptions count the simulated provider's faults.
	BootFailures int `json:"-"`
	Preemptions  int `json:"-"`
	// CapacityFailures counts the node creations refused during
	// Config.CapacityOutage.
	CapacityFailures int `json:"-"`
	// Failed counts the jobs preempted more often than Config.Retries
	// allows: they ended without finishing.
	Failed int `json:"failed_jobs"`
	// Skipped counts the trace's rows of jobs that never ran.
	Skipped int `json:"-"`
	// Horizon is the simulated time, in hours.
	Horizon float64 `json:"-"`
	// Series is the time series asked for with Config.SeriesPoints.
	Series []Point `json:"-"`
	// jobWaits is each job's wait in seconds, in the trace's order (NaN
	// for a job that never started), for Advise's holdout windows.
	jobWaits []float64
}

// NodeHours is node time by what the nodes did.
type NodeHours struct {
	Busy    float64 `json:"busy"`
	Idle    float64 `json:"idle"`
	Booting float64 `json:"booting"`
	Total   float64 `json:"total"`
}

// Quantiles summarizes a distribution.
type Quantiles struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
}

// Point is one sample of the time series: the most nodes and queued jobs
// during the interval that starts at Hours.
type Point struct {
	Hours  float64
	Nodes  int
	Busy   int
	Queued int
}

// sample records the time series.
func (s *sim) sample() {
	if s.seriesStep == 0 {
		return
	}
	k := int(s.now / s.seriesStep)
	for len(s.series) <= k {
		s.series = append(s.series, Point{Hours: (time.Duration(len(s.series)) * s.seriesStep).Hours()})
	}
	p := &s.series[k]
	p.Nodes = max(p.Nodes, s.counts[stPreparing]+s.counts[stIdle]+s.counts[stBusy])
	p.Busy = max(p.Busy, s.counts[stBusy])
	p.Queued = max(p.Queued, s.queue.Len())
}

// result closes the books: nodes still alive count until the last job
// ended.
func (s *sim) result() Result {
	for i := range s.nodes {
		if st := s.nodes[i].state; st != stGone {
			s.setState(int32(i), stGone)
		}
	}
	r := s.res
	r.Policy = s.cfg.Policy
	r.Jobs = len(s.jobs)
	r.NodeHours = NodeHours{Busy: s.busyT.hours(), Idle: s.idleT.hours(), Booting: s.bootT.hours()}
	r.NodeHours.Total = r.NodeHours.Busy + r.NodeHours.Idle + r.NodeHours.Booting
	price := s.cfg.Size.PricePerHour
	if s.cfg.Compute.Tier == api.TierLowPriority && s.cfg.Size.LowPriorityPrice > 0 {
		price = s.cfg.Size.LowPriorityPrice
	}
	r.Cost = r.NodeHours.Total * price
	r.Wait = quantiles(s.waits)
	if len(s.waits) > 0 {
		r.MaxWait = s.waits[len(s.waits)-1] // sorted by quantiles
	}
	cold := 0
	r.jobWaits = make([]float64, len(s.jobs))
	for i := range s.jobs {
		j := &s.jobs[i]
		if j.cold {
			cold++
		}
		r.jobWaits[i] = math.NaN()
		if j.ran {
			r.jobWaits[i] = (j.first - j.Submit).Seconds()
		}
	}
	r.ColdStartFraction = float64(cold) / float64(len(s.jobs))
	r.PeakNodes = s.peak
	r.Horizon = s.now.Hours()
	r.Series = s.series
	return r
}

// quantiles returns the mean and percentiles of v (nearest rank); v is
// sorted in place.
func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	slices.Sort(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	at := func(p float64) float64 {
		k := int(math.Ceil(p*float64(len(v)))) - 1
		return v[min(max(k, 0), len(v)-1)]
	}
	return Quantiles{Mean: sum / float64(len(v)), P50: at(0.50), P95: at(0.95), P99: at(0.99)}
}
