// Package metrics counts what tide's control plane did, for Prometheus:
// jobs submitted and finished, their queue waits and run times, retries,
// scale-ups and scale-downs, nodes created, provisioning failures,
// preemptions, API requests and controller turns. Gauges of the current
// state (nodes by state, queued jobs) are read from the store at scrape
// time by the server.
//
// Most figures come from Observe, a store that watches the events every
// transition already records (a job's Queued, Completed, Failed or Canceled
// event, a compute's ScaleUp, ScaleDown, NodePreempted, Provisioning*
// event) and counts them once their transaction commits, so the service
// and controller need no metrics code and a retried transaction is never
// counted twice. Counters are per process: with several replicas,
// Prometheus sums them.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tideml/tide/api"
)

// Metrics are tide's counters and histograms. A nil *Metrics counts
// nothing.
type Metrics struct {
	jobsSubmitted  *prometheus.CounterVec
	jobsFinished   *prometheus.CounterVec
	jobRetries     *prometheus.CounterVec
	queueWait      *prometheus.HistogramVec
	jobDuration    *prometheus.HistogramVec
	scaleUps       *prometheus.CounterVec
	scaleDowns     *prometheus.CounterVec
	nodesCreated   *prometheus.CounterVec
	provisionFails *prometheus.CounterVec
	preemptions    *prometheus.CounterVec
	requests       *prometheus.HistogramVec
	refused        *prometheus.CounterVec
	turns          prometheus.Histogram
}

// waitBuckets span a warm start (milliseconds) to hours in a queue.
var waitBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600}

// New registers tide's metrics with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		jobsSubmitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_jobs_submitted_total",
			Help: "Jobs submitted."}, []string{"workspace", "compute"}),
		jobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_jobs_finished_total",
			Help: "Jobs that ended, by final status (Completed, Failed, Canceled)."}, []string{"workspace", "compute", "status"}),
		jobRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_job_retries_total",
			Help: "Job attempts that ended badly and were queued again."}, []string{"workspace", "compute"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tide_job_queue_wait_seconds",
			Help: "Time from submit to start of jobs that started.", Buckets: waitBuckets}, []string{"workspace", "compute"}),
		jobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tide_job_duration_seconds",
			Help: "Run time (start to end) of jobs that ended, by final status.", Buckets: waitBuckets}, []string{"workspace", "compute", "status"}),
		scaleUps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_scale_ups_total",
			Help: "Scale-up decisions (each creates one or more nodes)."}, []string{"workspace", "compute"}),
		scaleDowns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_scale_downs_total",
			Help: "Nodes removed by scale-down (idle, unusable or preempted)."}, []string{"workspace", "compute"}),
		nodesCreated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_nodes_created_total",
			Help: "Nodes asked of a provider."}, []string{"workspace", "compute"}),
		provisionFails: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_provisioning_failures_total",
			Help: "Nodes that failed to be created or to start in time, by reason."}, []string{"workspace", "compute", "reason"}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_preemptions_total",
			Help: "Low-priority nodes preempted."}, []string{"workspace", "compute"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tide_http_request_duration_seconds",
			Help:    "API requests by route pattern, method and status code (server-sent event streams: time to the first byte is not measured; the whole stream is).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 600}},
			[]string{"route", "method", "code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tide_submissions_refused_total",
			Help: "Job submissions refused with 429 by an admission limit (limits.submit_rate, limits.max_queued_jobs)."}, []string{"workspace", "limit"}),
		turns: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tide_controller_turn_seconds",
			Help: "Duration of a controller turn (load, decide, apply).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
	}
	reg.MustRegister(m.jobsSubmitted, m.jobsFinished, m.jobRetries, m.queueWait, m.jobDuration, m.scaleUps,
		m.scaleDowns, m.nodesCreated, m.provisionFails, m.preemptions, m.requests, m.refused, m.turns)
	return m
}

// Request records one API request.
func (m *Metrics) Request(route, method string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Observe(d.Seconds())
}

// Refused counts one submission to workspace ws refused by limit.
func (m *Metrics) Refused(ws, limit string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(ws, limit).Inc()
}

// Turn records one controller turn.
func (m *Metrics) Turn(d time.Duration) {
	if m == nil {
		return
	}
	m.turns.Observe(d.Seconds())
}

// event counts one committed event; job is the job's document as this
// transaction left it, nil for compute events or when it did not write one.
func (m *Metrics) event(ws, resource string, e *api.Event, job *api.Job) {
	if m == nil {
		return
	}
	kind, name := resourceKind(resource)
	switch kind {
	case "job":
		compute := ""
		if job != nil {
			compute = job.Compute
		}
		switch e.Kind {
		case api.JobQueued:
			m.jobsSubmitted.WithLabelValues(ws, compute).Inc()
		case "Requeued":
			m.jobRetries.WithLabelValues(ws, compute).Inc()
		case "Running":
			// The first attempt's start: a retry's wait would include the
			// earlier attempts' run time.
			if job != nil && job.Attempt <= 1 && !job.CreatedOn.IsZero() && !job.StartTime.IsZero() {
				m.queueWait.WithLabelValues(ws, compute).Observe(job.StartTime.Sub(job.CreatedOn).Seconds())
			}
		case api.JobCompleted, api.JobFailed, api.JobCanceled, "Cancel":
			if e.Kind == "Cancel" && (job == nil || job.Status != api.JobCanceled) {
				return // a cancel request; the job ends later with its own event
			}
			status := e.Kind
			if e.Kind == "Cancel" {
				status = api.JobCanceled
			}
			m.jobsFinished.WithLabelValues(ws, compute, status).Inc()
			if job != nil && !job.StartTime.IsZero() && !job.EndTime.IsZero() {
				m.jobDuration.WithLabelValues(ws, compute, status).Observe(job.EndTime.Sub(job.StartTime).Seconds())
			}
		}
	case "compute":
		switch e.Kind {
		case "ScaleUp":
			m.scaleUps.WithLabelValues(ws, name).Inc()
		case "ScaleDown":
			m.scaleDowns.WithLabelValues(ws, name).Inc()
		case "NodePreempted":
			m.preemptions.WithLabelValues(ws, name).Inc()
		case "ProvisioningFailed", "ProvisioningTimeout":
			m.provisionFails.WithLabelValues(ws, name, e.Kind).Inc()
		}
	}
}

// nodeCreated counts a node written for the first time, as preparing.
func (m *Metrics) nodeCreated(n *api.Node) {
	if m == nil {
		return
	}
	m.nodesCreated.WithLabelValues(n.Workspace, n.Compute).Inc()
}

func resourceKind(resource string) (kind, name string) {
	for i := range len(resource) {
		if resource[i] == '/' {
			return resource[:i], resource[i+1:]
		}
	}
	return resource, ""
}
